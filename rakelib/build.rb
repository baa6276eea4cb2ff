# rakelib/build.rb - what the Rakefile and every rakelib/*.rake share: the
# project's paths and msgpack-c's compiler flags, each defined once here.
# (ext/rbtrace/extconf.rb finds msgpack-c on its own, with mkmf: it runs
# where the gem is installed, without rakelib/.)
require_relative '../lib/rbtrace/version'

module Build
  ROOT = File.expand_path('..', __dir__)
  # The sources of the extension (*.c) and of the client (cli/*.c, codec.c).
  EXT = File.join(ROOT, 'ext', 'rbtrace')
  EXTCONF = File.join(EXT, 'extconf.rb')
  # Where `rake compile` puts the extension (rbtrace.so) and the client
  # (LIB_DIR from ROOT, as rake-compiler wants it).
  LIB_DIR = 'lib/rbtrace'.freeze
  LIB = File.join(ROOT, LIB_DIR)
  CLIENT = File.join(LIB, 'rbtrace-client')
  # --inject's bootstrap library, beside the client.
  BOOT = File.join(LIB, 'rbtrace_boot.so')
  # Everything built goes below tmp/.
  TMP = File.join(ROOT, 'tmp')

  module_function

  # A directory of tmp/ (tmp/ctest, tmp/asan...).
  def tmp(*parts)
    File.join(TMP, *parts)
  end

  # The files called name in rake-compiler's build directories for this
  # Ruby (tmp/PLATFORM/rbtrace/RUBY_VERSION/name).
  def compiled(name)
    Dir[tmp('*', 'rbtrace', RUBY_VERSION, name)]
  end

  # Where this Ruby's extension is kept for --inject:
  # tmp/inject/X.Y/rbtrace/rbtrace.so, X.Y the Ruby's API version (the
  # client puts tmp/inject/X.Y before lib/ on the target's load path).
  def inject_copy
    api = RbConfig::CONFIG.values_at('MAJOR', 'MINOR').join('.')
    tmp('inject', api, 'rbtrace', 'rbtrace.so')
  end

  def cc
    ENV['CC'] || 'gcc'
  end

  # The client's version (main.c), as extconf.rb passes it.
  def version_define
    %(-DRBTRACE_VERSION="#{RBTrace::VERSION}")
  end

  # msgpack-c's compile flags (pkg-config; none needed where its headers
  # are in the usual place).
  def msgpack_cflags
    @msgpack_cflags ||= pkg_config('--cflags') || []
  end

  # msgpack-c's link flags (pkg-config), or its library's old name when
  # pkg-config does not know it.
  def msgpack_libs
    @msgpack_libs ||= pkg_config('--libs').then { |libs| libs.nil? || libs.empty? ? ['-lmsgpackc'] : libs }
  end

  # msgpack-c 6 renamed its pkg-config module (and library) from msgpack to
  # msgpack-c: the first that answers, or nil.
  def pkg_config(what)
    %w[msgpack-c msgpack].each do |mod|
      flags = IO.popen(['pkg-config', what, mod], err: File::NULL, &:read)
      return flags.split if $?.success?
    rescue SystemCallError # no pkg-config
      return nil
    end
    nil
  end
end
