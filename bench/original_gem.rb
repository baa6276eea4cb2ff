# frozen_string_literal: true

# bench/original_gem.rb - the original rbtrace gem (0.5.x, Ruby client, FFI),
# installed into a private GEM_HOME under tmp/ (one per Ruby version), so
# that the benchmarks can compare it with ours in the same run without the
# two clashing: its `require 'rbtrace'` and its `rbtrace` command are found
# only through that GEM_HOME, ours only through -I lib.
#
# OriginalGem.find returns the installation, installing it the first time
# (about a minute: ffi and msgpack are compiled), or nil with the reason in
# OriginalGem.why_not when it cannot be had (no registry, a build failure):
# the benchmarks then say so and go on without it.
require 'fileutils'
require 'rbconfig'

module OriginalGem
  VERSION = '0.5.5'
  Install = Struct.new(:gem_home, :gem_path, :client)

  class << self
    attr_reader :why_not

    # rubocop:disable Naming/MemoizedInstanceVariableName -- what find memoizes is the installation
    def find
      return @install if defined?(@install)

      @install = locate || install
    end
    # rubocop:enable Naming/MemoizedInstanceVariableName

    # An environment for Process.spawn in which Ruby finds the original gem
    # (and the gems this Ruby already has, for benchmark-ips), never ours.
    def env
      inst = find or return nil
      { 'GEM_HOME' => inst.gem_home, 'GEM_PATH' => inst.gem_path, 'RUBYLIB' => nil,
        'BUNDLE_GEMFILE' => nil, 'BUNDLER_SETUP' => nil }
    end

    # The original's client, as a command line (it is a Ruby script).
    def client_command
      inst = find or return nil
      [RbConfig.ruby, inst.client]
    end

    # Runs the block outside Bundler's environment (bench/run runs under
    # `bundle exec`, whose RUBYOPT=-rbundler/setup would hide the gem).
    def unbundled(&block)
      defined?(Bundler) ? Bundler.with_unbundled_env(&block) : block.call
    end

    private

    def gem_home
      File.join(File.expand_path('..', __dir__), 'tmp', "original-rbtrace-#{RUBY_VERSION}")
    end

    def locate
      client = File.join(gem_home, 'gems', "rbtrace-#{VERSION}", 'bin', 'rbtrace')
      return nil unless File.file?(client)

      ok = unbundled do
        system({ 'GEM_HOME' => gem_home, 'GEM_PATH' => gem_path }, RbConfig.ruby, '-rrbtrace', '-e', '0',
               out: File::NULL, err: File::NULL)
      end
      ok ? Install.new(gem_home, gem_path, client) : nil
    end

    def gem_path
      [gem_home, *Gem.path].uniq.join(File::PATH_SEPARATOR)
    end

    def install
      warn "==> installing the original rbtrace gem #{VERSION} into #{gem_home} (once, about a minute)"
      FileUtils.mkdir_p(gem_home)
      gem = File.join(RbConfig::CONFIG['bindir'], 'gem')
      log = File.join(gem_home, 'install.log')
      ok = unbundled do
        system({ 'GEM_HOME' => gem_home, 'GEM_PATH' => gem_home }, RbConfig.ruby, gem, 'install',
               '--no-document', 'rbtrace', '-v', VERSION, out: log, err: %i[child out])
      end
      return locate if ok

      tail = File.exist?(log) ? File.readlines(log).last(3).join.strip : ''
      @why_not = "the original rbtrace gem #{VERSION} could not be installed (#{tail}; see #{log})"
      nil
    end
  end
end
