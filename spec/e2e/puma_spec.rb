require_relative '../spec_helper'
require_relative '../real/real_helper'

# Issue 5, item 10: a forking server. Debian's puma in cluster mode (two
# workers, the app preloaded in the master) serves a small Rack app under
# load from Debian's wrk, both on loopback. Each worker in turn is attached
# to, its app method traced for about a second, and detached: wrk sees no
# errors, and the master is never traced. Puma's and wrk's whole process
# groups are killed after the example, pass or fail.
RSpec.describe 'puma cluster under load' do
  CONFIG_RU = <<~'RUBY'.freeze
    class App
      def meth(env); "hello from #{Process.pid} #{env['PATH_INFO']}\n"; end
      def call(env); [200, { 'content-type' => 'text/plain' }, [meth(env)]]; end
    end
    run App.new
  RUBY
  WRK_SECONDS = 4
  # [where App is among its ancestors, whether App#meth is App's own]:
  # always [0, true], traced or not: a Ruby method is traced by TracePoints
  # on it alone, which change nothing the app can see.
  UNWRAPPED = '[App.ancestors.index(App), App.instance_method(:meth).owner == App]'.freeze

  before do
    # Debian's puma runs on Debian's Ruby (#!/usr/bin/ruby, and its C
    # extension is built for it): it cannot load the rbtrace built for
    # another Ruby (the 3.3 legs of script/test).
    unless File.realpath(RbConfig.ruby) == File.realpath('/usr/bin/ruby')
      skip "Debian's puma runs on Debian's Ruby only, not on #{RbConfig.ruby}"
    end
    missing = %w[puma wrk].reject { |cmd| system('sh', '-c', "command -v #{cmd}", out: File::NULL) }
    raise "#{missing.join(' and ')} missing: run script/setup (Debian packages puma, wrk)" unless missing.empty?
  end

  let(:dir) { Dir.mktmpdir('rbtrace-puma-spec') }
  after { FileUtils.rm_rf(dir) }

  def spawn_group(*cmd, log:, env: {})
    pid = Process.spawn(env, *cmd, chdir: dir, out: log, err: %i[child out], in: :close, pgroup: true)
    @spec_processes << RealApps::Group.new(pid, cmd.first)
    pid
  end

  def ppid_of(pid); File.read("/proc/#{pid}/stat")[/\) \S (\d+)/, 1].to_i; end

  # Puma's master, once both workers have booted and the port answers;
  # returns the workers' pids. rbtrace is loaded by RUBYOPT, or by the app
  # as it boots (config_ru requires it).
  def boot_puma(port, config_ru: CONFIG_RU, rubyopt: '-rrbtrace')
    File.write(File.join(dir, 'config.ru'), config_ru)
    log = File.join(dir, 'puma.log')
    # SPAWN_ENV: under rake test:asan, the ASan runtime preloaded first.
    env = RBTraceSpec::SPAWN_ENV.merge('RUBYLIB' => RBTraceSpec::LIB, 'RUBYOPT' => rubyopt,
                                       'BUNDLE_GEMFILE' => nil)
    @master = spawn_group('puma', '-w', '2', '-t', '2:4', '--preload', '-e', 'production',
                          '-b', "tcp://127.0.0.1:#{port}", 'config.ru', env: env, log: log)
    workers = []
    Timeout.timeout(30) do
      loop do
        workers = File.read(log).scan(/Worker \d \(PID: (\d+)\) booted/).flatten.map(&:to_i)
        break if workers.size == 2

        raise "puma exited:\n#{File.read(log)}" if Process.waitpid(@master, Process::WNOHANG)

        sleep 0.05
      end
    end
    expect(workers.map { |w| ppid_of(w) }).to eq([@master, @master])
    TCPSocket.new('127.0.0.1', port).close
    workers
  end

  it 'traces each worker in turn while wrk loads them: calls shown, no errors, the master never traced' do
    port = RealApps.free_port
    workers = boot_puma(port)
    wrk_out = File.join(dir, 'wrk.out')
    wrk = spawn_group('wrk', '-t', '2', '-c', '8', '-d', "#{WRK_SECONDS}s", "http://127.0.0.1:#{port}/", log: wrk_out)
    started = Time.now
    sleep 0.3
    counts = workers.map do |worker|
      client = start_client('-p', worker, '-m', 'App#meth')
      client.attached
      client.wait_for(/^(\[t\d+\] )?App#meth <\d+\.\d+>$/)
      # Meanwhile the master's App#meth is its own, not wrapped.
      r = rbtrace('-p', @master, '-e', UNWRAPPED)
      expect(r.stdout).to include('=> [0, true]')
      sleep 0.5
      expect(client.stop).to be_success
      expect(client.stderr).to include("*** detached from process #{worker}")
      client.stdout.scan(/^(?:\[t\d+\] )?App#meth <\d+\.\d+>$/).size
    end
    # The master, traced for as long while the workers serve: no call of its own.
    master = start_client('-p', @master, '-m', 'App#meth')
    master.attached
    sleep 0.8
    expect(master.stop).to be_success
    master_calls = master.stdout.scan(/App#meth/).size
    traced_within = Time.now - started
    Timeout.timeout(WRK_SECONDS + 15) { Process.wait(wrk) }
    expect($?).to be_success
    report = File.read(wrk_out)
    puts "\n    puma: calls traced per worker #{counts.inspect}, master #{master_calls}, " \
         "traces done #{traced_within.round(2)} s into the load; wrk: " \
         "#{report[/\d+ requests in [\d.]+\w+/]}, #{report[%r{Requests/sec:\s*[\d.]+}]}"
    expect(counts).to all(be > 0)
    expect(master_calls).to eq(0)
    expect(report).to match(/^\s*(\d+) requests in/)
    expect(report[/^\s*(\d+) requests in/, 1].to_i).to be > 0
    expect(report).not_to match(/Socket errors|Non-2xx/)
    # The workers were traced, and after the detach App is as it was.
    workers.each do |worker|
      expect(rbtrace('-p', worker, '-e', UNWRAPPED).stdout).to include('=> [0, true]')
    end
  end

  # Issue 32: workers that never loaded rbtrace get it by --inject, each in
  # turn, while wrk loads them, then traced: no failed request.
  it 'injects rbtrace into each worker of a puma started without it, under wrk: no errors' do
    skip '--inject needs root (or CAP_SYS_PTRACE)' unless Process.uid.zero?
    port = RealApps.free_port
    workers = boot_puma(port, rubyopt: nil)
    workers.each { |w| expect(File.read("/proc/#{w}/maps")).not_to include('rbtrace.so') }
    wrk_out = File.join(dir, 'wrk.out')
    wrk = spawn_group('wrk', '-t', '2', '-c', '8', '-d', "#{WRK_SECONDS}s", "http://127.0.0.1:#{port}/", log: wrk_out)
    sleep 0.3
    counts = workers.map do |worker|
      client = start_client('-p', worker, '--inject', '--timeout', '20', '-m', 'App#meth')
      client.attached
      client.wait_for(/^(\[t\d+\] )?App#meth <\d+\.\d+>$/)
      sleep 0.3
      expect(client.stop).to be_success
      expect(client.stderr).to include("*** injected rbtrace into process #{worker}")
      client.stdout.scan(/^(?:\[t\d+\] )?App#meth <\d+\.\d+>$/).size
    end
    Timeout.timeout(WRK_SECONDS + 15) { Process.wait(wrk) }
    expect($?).to be_success
    report = File.read(wrk_out)
    puts "\n    puma --inject: calls traced per worker #{counts.inspect}; wrk: " \
         "#{report[/\d+ requests in [\d.]+\w+/]}, #{report[%r{Requests/sec:\s*[\d.]+}]}"
    expect(counts).to all(be > 0)
    expect(report[/^\s*(\d+) requests in/, 1].to_i).to be > 0
    expect(report).not_to match(/Socket errors|Non-2xx/)
    expect(File.read("/proc/#{@master}/maps")).not_to include('rbtrace.so') # the master untouched
  end

  # Issue 20, item 9: with preload, Puma lists the threads the app's boot
  # started (those without the thread variable :fork_safe, a convention
  # Rails shares) and warns of each, for they do not survive the fork.
  # rbtrace's helper is marked fork-safe: a forked child starts its own.
  it 'an app that requires rbtrace as it boots gets no warning of a thread started in app boot' do
    port = RealApps.free_port
    workers = boot_puma(port, config_ru: "require 'rbtrace'\n#{CONFIG_RU}", rubyopt: nil)
    log = File.read(File.join(dir, 'puma.log'))
    expect(log).to include('Preloading application')
    expect(log).not_to include('started in app boot')
    (workers + [@master]).each do |pid|
      r = rbtrace('-p', pid, '-e', '[Process.pid, RBTrace.helper.alive?]')
      expect(r.stdout).to eq(">> [Process.pid, RBTrace.helper.alive?]\n=> [#{pid}, true]\n"), "stderr: #{r.stderr}"
    end
  end
end
