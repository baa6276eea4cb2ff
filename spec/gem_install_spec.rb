# spec/gem_install_spec.rb - the gem as users get it: built from the
# gemspec, installed with `gem install` (which compiles the extension and
# the client) into a private directory, then used from there: the rbtrace
# command, `require "rbtrace"`, and one attach. No network: the gem has no
# runtime dependencies and is installed with --local.
require 'rspec'
require 'fileutils'
require 'rbconfig'
require 'timeout'
require 'tmpdir'

RSpec.describe 'the installed gem', :gem_install do
  root = File.expand_path('..', __dir__)
  version = File.read(File.join(root, 'lib/rbtrace/version.rb'))[/VERSION = '([^']+)'/, 1]

  # Runs cmd with env (no Bundler, no RUBYOPT from the spec run); kills it
  # if it outlives the timeout. A block is given the pid once it runs.
  # Returns [output (stdout + stderr), status].
  def run(env, *cmd, timeout: 30, chdir: @tmp)
    out_r, out_w = IO.pipe
    pid = Process.spawn(clean_env.merge(env), *cmd, out: out_w, err: out_w, in: File::NULL,
                                                    chdir: chdir, unsetenv_others: true)
    out_w.close
    output = +''
    reader = Thread.new { output << out_r.read }
    yield pid if block_given?
    status = Timeout.timeout(timeout) { Process.wait2(pid).last }
    pid = nil
    reader.join
    [output, status]
  ensure
    if pid
      Process.kill('KILL', pid)
      Process.wait(pid)
    end
    out_r.close
  end

  # The environment the spec run started from, without what Bundler adds.
  def clean_env
    env = defined?(Bundler) ? Bundler.unbundled_env : ENV.to_h
    env.reject { |k, _| k.start_with?('BUNDLE_', 'RUBYOPT', 'RUBYLIB', 'GEM_') }
  end

  # Where the installed gem is found first, then the system's gems.
  def gem_env
    { 'GEM_HOME' => @gem_home, 'GEM_PATH' => ([@gem_home] + Gem.default_path).join(File::PATH_SEPARATOR) }
  end

  before(:context) do
    @tmp = Dir.mktmpdir('rbtrace-gem')
    @gem_home = File.join(@tmp, 'gems')
    gem_file = File.join(@tmp, "rbtrace-#{version}.gem")

    output, status = run({}, RbConfig.ruby, '-S', 'gem', 'build', 'rbtrace.gemspec', '-o', gem_file,
                         chdir: root)
    raise "gem build failed:\n#{output}" unless status.success?

    # Compiling the extension and the client with LTO takes ~40 s on this
    # project's 2-vCPU machines, longer while they are busy: the timeout
    # only guards against a hang.
    output, status = run(gem_env, RbConfig.ruby, '-S', 'gem', 'install', '--local', '--no-document',
                         '--install-dir', @gem_home, gem_file, timeout: 300)
    raise "gem install failed:\n#{output}" unless status.success?
  end

  after(:context) do
    FileUtils.rm_rf(@tmp) if @tmp
  end

  let(:rbtrace_command) { File.join(@gem_home, 'bin', 'rbtrace') }

  it 'installs the rbtrace command, which prints the version' do
    output, status = run(gem_env, rbtrace_command, '--version')
    expect(status).to be_success, output
    expect(output).to eq("rbtrace #{version}\n")
  end

  # RubyGems installs a gem's files and nothing else: the man page lies in the
  # gem's directory (`man "$(gem contents rbtrace | grep rbtrace.1)"`).
  it 'installs the man page, docs/rbtrace.1, with the gem' do
    installed = File.join(@gem_home, 'gems', "rbtrace-#{version}", 'docs', 'rbtrace.1')
    expect(File.read(installed)).to eq(File.read(File.join(root, 'docs/rbtrace.1')))
    output, status = run(gem_env, RbConfig.ruby, '-S', 'gem', 'contents', 'rbtrace')
    expect(status).to be_success, output
    expect(output.lines.map(&:chomp)).to include(installed)
  end

  it 'can be required from the installed gem' do
    code = 'require "rbtrace"; p RBTrace::VERSION; puts $LOADED_FEATURES.grep(/rbtrace\.so\z/)'
    output, status = run(gem_env, RbConfig.ruby, '-e', code)
    expect(status).to be_success, output
    lines = output.lines.map(&:chomp)
    expect(lines.first).to eq(version.inspect)
    expect(lines.last).to start_with(@gem_home)
  end

  it 'attaches to a process that loaded the installed gem and evaluates code in it' do
    app_r, app_w = IO.pipe
    app = Process.spawn(clean_env.merge(gem_env), RbConfig.ruby, '-rrbtrace', '-e',
                        'puts Process.pid; $stdout.flush; sleep',
                        out: app_w, in: File::NULL, chdir: @tmp, unsetenv_others: true)
    app_w.close
    pid_line = Timeout.timeout(20) { app_r.gets }
    expect(pid_line&.chomp).to eq(app.to_s)

    output, status = run(gem_env, rbtrace_command, '-p', app.to_s, '-e', '1+1')
    expect(status).to be_success, output
    expect(output).to include("=> 2\n")

    # The shipped tracers, found from the installed client's own path.
    env = gem_env.merge('RBTRACE_TRACERS_DIR' => nil)
    output, status = run(env, rbtrace_command, '-p', app.to_s, '-c', 'nosuch')
    expect(status.exitstatus).to eq(2), output
    expect(output).to include('the shipped tracers are activerecord, io, mysql2, net_http, pg, ' \
                              'puma, rack, redis, sidekiq;')
    output, status = run(env, rbtrace_command, '-p', app.to_s, '-c', 'io') do |pid|
      sleep 1
      Process.kill('INT', pid)
    end
    expect(status).to be_success, output
    expect(output).to include("*** attached to process #{app}")
  ensure
    if app
      Process.kill('KILL', app)
      Process.wait(app)
    end
    app_r&.close
  end

  # --inject from the installed gem: its client loads its own rbtrace (the
  # gem's lib/, built for this Ruby) into an app started without it.
  it 'injects the installed rbtrace into a process that never loaded it' do
    skip '--inject needs root (or CAP_SYS_PTRACE)' unless Process.uid.zero?
    app_r, app_w = IO.pipe
    app = Process.spawn(clean_env, RbConfig.ruby, '-e', 'puts Process.pid; $stdout.flush; sleep',
                        out: app_w, in: File::NULL, chdir: @tmp, unsetenv_others: true)
    app_w.close
    expect(Timeout.timeout(20) { app_r.gets }&.chomp).to eq(app.to_s)
    output, status = run(gem_env, rbtrace_command, '-p', app.to_s, '--inject', '--timeout', '20', '-e',
                         '$LOADED_FEATURES.grep(/rbtrace\.so\z/)', timeout: 60)
    if RUBY_VERSION == '4.0.0' # an untimed sleep is not woken there (Bug #21812)
      expect(output).to include('Bug #21812')
    else
      expect(status).to be_success, output
      expect(output).to include("=> [\"#{@gem_home}")
    end
  ensure
    if app
      Process.kill('KILL', app)
      Process.wait(app)
    end
    app_r&.close
  end
end
