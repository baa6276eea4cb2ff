# Shared helpers for the end-to-end specs: every spec starts real Ruby
# processes with the extension loaded and runs the real client against
# them by pid. Every process started here is killed after each example,
# pass or fail.
require 'rspec'
require 'timeout'
require 'tmpdir'
require 'fileutils'
require 'rbconfig'
require 'etc'
require_relative 'queues_helper'
require_relative '../lib/rbtrace/version' # RBTrace::VERSION, what the client and the extension report

module RBTraceSpec
  ROOT = File.expand_path('..', __dir__)
  # The lib/ under test: `rake test:asan` points RBTRACE_SPEC_LIB at a copy
  # holding the extension and client built with AddressSanitizer.
  LIB = ENV.fetch('RBTRACE_SPEC_LIB', File.join(ROOT, 'lib'))
  # RBTRACE_SPEC_PRELOAD: a library preloaded into every target and client
  # started here (rake test:asan: the ASan runtime, which a Ruby must load
  # before an extension built with it), not into the spec runner itself.
  SPAWN_ENV = (ENV['RBTRACE_SPEC_PRELOAD'] ? { 'LD_PRELOAD' => ENV['RBTRACE_SPEC_PRELOAD'] } : {}).freeze
  CLIENT = File.join(LIB, 'rbtrace', 'rbtrace-client')
  STUB = File.join(ROOT, 'bin', 'rbtrace')

  # Does the VM report the C methods its specialized instructions call
  # (Integer#+, Array#[], String#size...) to c_call hooks? 3.1 does; 2.7
  # does not (its opt_* instructions are never switched to their traced
  # forms for c_call): `1 + 1` calls Integer#+ with no event, which no
  # tracer sees.
  # Asked of a child Ruby: a global hook leaves the VM that enabled it
  # slower (README, "Known limits"), and the spec run would pay.
  C_CALL_OF_OPERATORS = IO.popen(
    [RbConfig.ruby, '-e', 'seen = false; one = 1; ' \
                          'TracePoint.new(:c_call) { |tp| seen ||= tp.method_id == :+ }.enable { one + 1 }; ' \
                          'print seen'], &:read
  ) == 'true'

  # Process._fork (Ruby 3.1+), which rbtrace hooks to reset a forked child.
  FORK_HOOK = Process.respond_to?(:_fork)
  NO_FORK_HOOK = 'no Process._fork (Ruby 3.1+): a forked child keeps its parent\'s state, with no helper'
  NO_C_CALL_OF_OPERATORS = 'this Ruby calls operators and other specialized instructions without c_call events'

  # A system user for the specs that act as another user (or run a server
  # that refuses root): created the first time (as root; idempotent, never
  # removed), with no home and no login shell.
  def self.system_user(name)
    Etc.getpwnam(name)
  rescue ArgumentError
    ok = system('useradd', '--system', '--no-create-home', '--home-dir', '/nonexistent',
                '--shell', '/usr/sbin/nologin', name)
    # 9: created meanwhile by someone else
    raise "useradd #{name} failed (#{$?.inspect}): run the specs as root" unless ok || $?.exitstatus == 9

    Etc.getpwnam(name)
  end

  # A Ruby process under test. Its stdout is read line by line; it is
  # expected to print "ready" once its setup is done.
  class Target
    # started_at: epoch seconds, for Queues.of(born:).
    attr_reader :pid, :lines, :started_at

    # prefix: a command that runs ruby, e.g. setpriv to run it as another user.
    def initialize(code, rbtrace: true, env: {}, ruby_args: [], prefix: [])
      @out_r, out_w = IO.pipe
      @err_path = File.join(Dir.tmpdir, "rbtrace-spec-#{Process.pid}-#{object_id}.err")
      args = [*prefix, 'ruby', '-I', LIB, *ruby_args]
      args << '-rrbtrace' if rbtrace
      args += ['-e', "$stdout.sync = true\n#{code}"]
      @started_at = Time.now.to_i
      @pid = Process.spawn(SPAWN_ENV.merge(env), *args, out: out_w, err: @err_path, pgroup: true)
      out_w.close
      @lines = []
      @status = nil
    end

    # Waits until the target printed a line matching pattern; returns it.
    def wait_for(pattern, timeout: 10)
      Timeout.timeout(timeout) do
        loop do
          found = @lines.find { |l| pattern === l }
          return found if found

          line = @out_r.gets
          raise "target #{pid} exited before printing #{pattern.inspect}; stderr: #{stderr}" unless line

          @lines << line.chomp
        end
      end
    end

    # A loaded machine (the ASan leg, under load) has taken over 10 s to
    # start a Ruby that prints "ready".
    def ready
      wait_for('ready', timeout: 30)
      self
    end

    # Everything printed so far (non-blocking).
    def drain
      loop { @lines << @out_r.read_nonblock(65_536).split("\n") }
    rescue IO::WaitReadable, EOFError
      @lines.flatten!
      @lines
    end

    def stderr
      File.exist?(@err_path) ? File.read(@err_path) : ''
    end

    def alive?
      return false if @status

      if (done = Process.waitpid(pid, Process::WNOHANG))
        @status = $?
        return false if done
      end
      true
    rescue Errno::ECHILD
      false
    end

    def wait(timeout: 10)
      Timeout.timeout(timeout) { Process.wait(pid) }
      @status = $?
    end

    attr_reader :status

    def kill
      if alive?
        Process.kill(:KILL, -pid) rescue Process.kill(:KILL, pid) rescue nil
        Process.wait(pid) rescue nil
      end
      Queues.remove_left_by(pid, born: started_at)
      @out_r.close unless @out_r.closed?
      FileUtils.rm_f(@err_path)
    end
  end

  # A child process's end, for the clients the specs start (Client here,
  # FaultsSpec::PipedClient and Spawned): its status once it has exited,
  # reaped without blocking.
  module ChildExit
    attr_reader :pid

    def exited?
      return true if @status

      @status = $? if Process.waitpid(pid, Process::WNOHANG)
      !@status.nil?
    end

    def wait(timeout: 10)
      Timeout.timeout(timeout) { sleep 0.01 until exited? }
      @status
    end

    # Kills the process and reaps it, unless it has exited (or was reaped
    # by the spec itself).
    def kill_child
      return if exited?

      Process.kill(:KILL, pid) rescue nil
      Process.wait(pid) rescue nil
    rescue Errno::ECHILD
      nil
    end
  end

  # A client run in the background, for traces that run until interrupted.
  class Client
    include ChildExit

    def initialize(args, client: CLIENT, env: {})
      @out_path = File.join(Dir.tmpdir, "rbtrace-spec-client-#{Process.pid}-#{object_id}")
      @pid = Process.spawn(SPAWN_ENV.merge(env), client, *args.map(&:to_s), out: "#{@out_path}.out",
                                                                            err: "#{@out_path}.err", in: :close)
    end

    def stdout; File.exist?(path(:stdout)) ? File.read(path(:stdout)) : ''; end
    def stderr; File.exist?(path(:stderr)) ? File.read(path(:stderr)) : ''; end

    # A client's output a spec may read whole: past this a trace is running
    # away (a target calling a traced method in a hot loop renders ~100 MB
    # a second), and reading it would take the spec's memory with it.
    OUTPUT_LIMIT = 64 << 20

    # Waits until the client's stdout (or stderr) matches pattern.
    def wait_for(pattern, stream: :stdout, timeout: 10)
      Timeout.timeout(timeout) do
        sleep 0.02 until pattern === bounded(stream) || exited?
      end
      return if pattern === bounded(stream)

      raise "client exited before #{stream} matched #{pattern.inspect}\n#{outputs}"
    rescue Timeout::Error
      raise "client #{stream} never matched #{pattern.inspect}\n#{outputs}"
    end

    def attached; wait_for(/\*\*\* attached/, stream: :stderr); end

    # The stream's text, unless it grew past OUTPUT_LIMIT.
    def bounded(stream)
      size = File.size?(path(stream)).to_i
      return send(stream) if size <= OUTPUT_LIMIT

      raise "client #{stream} grew to #{size >> 20} MiB without matching: the trace runs away " \
            "(bound what the target calls)\n#{outputs}"
    end

    # The ends of stdout and stderr, for an error message.
    def outputs; "stdout: #{tail(:stdout)}\nstderr: #{tail(:stderr)}"; end

    def tail(stream, bytes = 4096)
      File.open(path(stream)) do |f|
        skipped = [f.size - bytes, 0].max
        f.seek(skipped)
        skipped.positive? ? "[#{skipped} bytes before]...#{f.read}" : f.read
      end
    rescue Errno::ENOENT
      ''
    end

    def path(stream); "#{@out_path}.#{stream == :stdout ? 'out' : 'err'}"; end

    # Sends signal and waits for the client to exit; returns its status.
    def stop(signal = :INT, timeout: 10)
      Process.kill(signal, pid) unless exited?
      wait(timeout: timeout)
    end

    def kill
      kill_child
      FileUtils.rm_f(["#{@out_path}.out", "#{@out_path}.err"])
    end
  end

  Result = Struct.new(:stdout, :stderr, :status) do
    def success?; status.success?; end
    def exitstatus; status.exitstatus; end
  end

  # A line in the spec run's report: a figure, or which way a race went.
  def say(text); RSpec.configuration.reporter.message("    #{text}"); end

  def start_target(code, **opts)
    target = Target.new(code, **opts)
    @spec_processes << target
    target
  end

  def start_client(*args, **opts)
    client = Client.new(args.flatten, **opts)
    @spec_processes << client
    client
  end

  # Runs the client to completion (bounded by timeout) and returns a Result.
  def rbtrace(*args, timeout: 20, client: CLIENT, env: {})
    c = start_client(*args, client: client, env: env)
    c.wait(timeout: timeout)
    Result.new(c.stdout, c.stderr, c.wait)
  rescue Timeout::Error
    raise "rbtrace #{args.join(' ')} did not finish within #{timeout}s\nstdout: #{c.stdout}\nstderr: #{c.stderr}"
  end

  # Traces target with args for a while (until the block returns or the
  # stdout matches `until`), then interrupts the client like Ctrl-C.
  def trace(target, *args, until_output: nil, seconds: nil)
    client = start_client('-p', target.pid, *args)
    client.attached
    client.wait_for(until_output) if until_output
    sleep seconds if seconds
    yield client if block_given?
    status = client.stop(:INT)
    Result.new(client.stdout, client.stderr, status)
  end

  # Runs the block while client is stopped (SIGSTOP: the ring fills up);
  # then calms app (its USR1 trap slows its calls), resumes the client,
  # and expects it to report the events lost meanwhile and end cleanly.
  def while_client_stopped(app, client)
    Process.kill(:STOP, client.pid)
    begin
      yield
    ensure
      Process.kill(:USR1, app.pid)
      Process.kill(:CONT, client.pid)
    end
    client.wait_for(/\*\*\* \d+ events lost/)
    expect(client.stop).to be_success
  end
end

# Should the runner itself die of a signal, RSpec prints no summary and a CI
# log just stops: say which signal and in which example, and keep stdout
# unbuffered so that the progress dots show how far it got.
$stdout.sync = true
at_exit do
  if $!.is_a?(SignalException) && !$!.is_a?(Interrupt)
    warn "rspec: killed by #{$!.message} during #{$rbtrace_spec_example || 'no example'}"
  end
end

RSpec.configure do |config|
  config.include RBTraceSpec
  config.before do |example|
    $rbtrace_spec_example = example.location
    @spec_processes = []
  end
  config.after { @spec_processes.reverse_each(&:kill) }
  config.expect_with(:rspec) { |c| c.syntax = :expect }
  config.order = :defined
end
