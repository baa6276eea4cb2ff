require_relative '../spec_helper'

# --inject: rbtrace loaded into apps started WITHOUT it, by the real client,
# then attached to in the same command (docs/DESIGN.md, "Injection").
RSpec.describe 'rbtrace --inject' do
  # Ruby 4.0.0's Bug #21812: a SIGCHLD ends a main thread's untimed sleep,
  # so an app whose main thread waits with no time-out is not woken there:
  # rbtrace loads when that thread next wakes, and the client says so.
  BUG_21812 = RUBY_VERSION == '4.0.0'
  PENDING_21812 = 'runs Ruby 4.0.0, and its main thread waits with no time-out'.freeze

  # state => [the app, whether rbtrace is left pending on 4.0.0: its main
  # thread waits with no time-out and no other thread runs (a running thread
  # runs the job, asked for by the bootstrap's nudges)]
  INJECT_STATES = {
    'in sleep' => ['puts "ready"; sleep', true],
    'blocked in IO.select' => ['r, _w = IO.pipe; puts "ready"; IO.select([r]); puts "woke"', false],
    'blocked in an IO read' => ['r, _w = IO.pipe; puts "ready"; r.read; puts "woke"', false],
    'waiting on Queue#pop' => ['Thread.new { sleep }; q = Queue.new; puts "ready"; q.pop; puts "woke"', true],
    'waiting on ConditionVariable#wait' => ['Thread.new { sleep }; m = Mutex.new; c = ConditionVariable.new; ' \
                                            'puts "ready"; m.synchronize { c.wait(m) }; puts "woke"', true],
    'busy in Ruby' => ['puts "ready"; x = 0; loop { x += 1 }', false],
    'with 20 threads' => ['19.times { Thread.new { sleep } }; puts "ready"; sleep', true],
    # rbtrace's require waits for the GVL at each file: 3.3+ nudges the busy threads
    'asleep while 9 threads are busy in Ruby' => ['9.times { Thread.new { loop { 1 + 1 } } }; puts "ready"; sleep', false],
    'asleep while another thread is busy' => ['Thread.new { x = 0; loop { x += 1 } }; puts "ready"; sleep', false],
    'asleep in a loop of timed sleeps' => ['puts "ready"; loop { sleep 0.2 }', false]
  }.freeze

  def plain_app(code)
    start_target(code, rbtrace: false).ready
  end

  # What the process has mapped of rbtrace's: the extension, the bootstrap.
  def mapped(pid)
    maps = File.read("/proc/#{pid}/maps")
    { rbtrace: maps.include?('/rbtrace/rbtrace.so'), boot: maps.include?('memfd:rbtrace_boot') }
  end

  # Who ptraces each thread of pid (0: nobody); a thread that ends
  # meanwhile (the bootstrap's, an eval's) is skipped.
  def tracers(pid)
    Dir["/proc/#{pid}/task/*/status"].filter_map do |f|
      File.read(f)[/^TracerPid:\s*(\d+)/, 1].to_i
    rescue Errno::ENOENT, Errno::ESRCH
      nil
    end.uniq
  end

  def expect_untouched(app)
    expect(app).to be_alive
    expect(mapped(app.pid)).to eq(rbtrace: false, boot: false)
    expect(tracers(app.pid)).to eq([0])
  end

  INJECT_STATES.each do |state, (code, untimed)|
    it "loads rbtrace into an app #{state} and answers -e in the same command" do
      app = plain_app(code)
      sleep 0.2
      expect(mapped(app.pid)).to eq(rbtrace: false, boot: false)
      left_pending = BUG_21812 && untimed
      # 9 threads busy before 3.3: ~10 s (16 at most in bench/RESULTS.md)
      r = rbtrace('-p', app.pid, '--inject', '--timeout', left_pending ? '2' : '60', '-e', 'Process.pid', timeout: 90)
      expect(r.stderr).to match(/\*\*\* injected rbtrace into process #{app.pid} \(Ruby #{Regexp.escape(RUBY_VERSION)}\): its main thread stopped [\d.]+ ms/)
      if left_pending
        expect(r.exitstatus).to eq(1)
        expect(r.stderr).to include(PENDING_21812, 'Bug #21812')
        sleep 0.3
        expect(app).to be_alive
        expect(mapped(app.pid)).to eq(rbtrace: false, boot: true)
      else
        expect(r.stdout).to eq(">> Process.pid\n=> #{app.pid}\n"), "stderr: #{r.stderr}"
        expect(r.exitstatus).to eq(0)
        expect(mapped(app.pid)).to eq(rbtrace: true, boot: true)
      end
      expect(tracers(app.pid)).to eq([0])
      expect(app).to be_alive
      expect(app.drain).not_to include('woke') # its wait went on, unbroken
    end
  end

  it 'traces -m after injecting, and a later attach needs no --inject' do
    app = plain_app(<<~'RUBY')
      class Shop
        def buy(n) = n * 2
      end
      puts "ready"
      loop { Shop.new.buy(1); sleep 0.01 }
    RUBY
    r = trace(app, '--inject', '-m', 'Shop#buy', until_output: /Shop#buy/)
    expect(r.stderr).to include("*** injected rbtrace into process #{app.pid}")
    expect(r.stdout).to include('Shop#buy')
    # loaded as if required: no --inject, no second bootstrap
    code = "[Thread.list.count { |t| t.name == 'rbtrace' }, $LOADED_FEATURES.grep(%r{/rbtrace\\.rb}).size]"
    r = rbtrace('-p', app.pid, '-e', code)
    expect(r.stdout).to eq(">> #{code}\n=> [1, 1]\n"), r.stderr
    r = rbtrace('-p', app.pid, '--inject', '-e', '1 + 1')
    expect(r.stdout).to eq(">> 1 + 1\n=> 2\n")
    expect(r.stderr).not_to include('injected')
    expect(File.read("/proc/#{app.pid}/maps").scan(/^\S+ r-xp .*memfd:rbtrace_boot/).size).to eq(1)
  end

  it 'loads rbtrace into an app with M:N threads (Ruby 3.3+)' do
    skip 'M:N threads are Ruby 3.3+' if RUBY_VERSION < '3.3'
    app = start_target('5.times { Thread.new { loop { sleep 0.05 } } }; puts "ready"; loop { sleep 0.2 }',
                       rbtrace: false, env: { 'RUBY_MN_THREADS' => '1' }).ready
    r = rbtrace('-p', app.pid, '--inject', '--timeout', '20', '-e', 'ENV["RUBY_MN_THREADS"]', timeout: 40)
    expect(r.stdout).to eq(">> ENV[\"RUBY_MN_THREADS\"]\n=> \"1\"\n"), r.stderr
  end

  it 'finds a process without rbtrace by --ps with --inject, and names --inject without it' do
    marker = "inject-ps-#{rand(1 << 30)}"
    app = plain_app("$0 = #{marker.inspect}; puts 'ready'; loop { sleep 0.2 }")
    r = rbtrace('--ps', marker, '-e', '1')
    expect(r.stderr).to include('(1 matches but did not load it, or are not yours; --inject loads it)')
    r = rbtrace('--ps', marker, '--inject', '--timeout', '20', '-e', 'Process.pid', timeout: 40)
    expect(r.stdout).to eq(">> Process.pid\n=> #{app.pid}\n"), r.stderr
  end

  # As from the host into a container (docs/DESIGN.md, "Containers"): the
  # bootstrap goes through a memfd, the rbtrace loaded is at a path the app
  # sees (this one shares the host's filesystem).
  it 'loads rbtrace into an app in its own PID, IPC and mount namespaces, by its host pid' do
    unshare = %w[unshare --kill-child --pid --ipc --mount --fork --mount-proc]
    app = start_target('puts "ready"; loop { sleep 0.2 }', rbtrace: false, prefix: unshare).ready
    host_pid = File.read("/proc/#{app.pid}/task/#{app.pid}/children").split.first.to_i
    r = rbtrace('-p', host_pid, '--inject', '--timeout', '20', '-e', 'Process.pid', timeout: 40)
    expect(r.stdout).to eq(">> Process.pid\n=> 1\n"), r.stderr
    expect(r.stderr).to include("*** injected rbtrace into process #{host_pid}")
  end

  it 'waits for a long C call that holds the GVL, and says so' do
    app = plain_app('a = Array.new(5_000_000) { rand }; puts "ready"; a.sort!; puts "sorted"; sleep')
    r = rbtrace('-p', app.pid, '--inject', '--timeout', '60', '-e', 'Process.pid', timeout: 90)
    expect(r.stdout).to eq(">> Process.pid\n=> #{app.pid}\n"), r.stderr
    expect(r.stderr).to include('reaches a safe point: it is in a C call that holds the GVL (waiting)')
    expect(app.wait_for('sorted')).to eq('sorted')
  end

  it 'works for a user who is not root but holds CAP_SYS_PTRACE, on an app of theirs' do
    skip 'needs root to act as nobody' unless Process.uid.zero?
    nobody = Etc.getpwnam('nobody')
    as = ['setpriv', "--reuid=#{nobody.uid}", "--regid=#{nobody.gid}", '--clear-groups']
    app = start_target('puts "ready"; loop { sleep 0.2 }', rbtrace: false, prefix: as).ready
    r = rbtrace(*as.drop(1), '--inh-caps=+sys_ptrace', '--ambient-caps=+sys_ptrace', RBTraceSpec::CLIENT,
                '-p', app.pid.to_s, '--inject', '--timeout', '20', '-e', 'Process.uid', client: '/usr/bin/setpriv')
    expect(r.stdout).to eq(">> Process.uid\n=> #{nobody.uid}\n"), r.stderr
  end

  describe 'without --inject' do
    it 'names --inject and what it needs' do
      app = plain_app('puts "ready"; sleep')
      r = rbtrace('-p', app.pid, '-e', '1')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include("process #{app.pid} has not loaded rbtrace: load it now with --inject",
                                  'as root or with CAP_SYS_PTRACE')
      expect_untouched(app)
    end
  end

  describe 'refusals, the process untouched' do
    it 'refuses a process that is not Ruby' do
      pid = Process.spawn('sleep', '60', pgroup: true)
      begin
        r = rbtrace('-p', pid, '--inject', '-e', '1')
        expect(r.exitstatus).to eq(1)
        expect(r.stderr).to include("process #{pid} is not a Ruby process")
        expect(tracers(pid)).to eq([0])
        expect(File.read("/proc/#{pid}/maps")).not_to include('rbtrace')
      ensure
        Process.kill(:KILL, pid)
        Process.wait(pid)
      end
    end

    it 'refuses a process a debugger already traces' do
      app = plain_app('puts "ready"; sleep')
      strace = start_client('-f', '-q', '-o', '/dev/null', '-p', app.pid.to_s, client: '/usr/bin/strace')
      Timeout.timeout(10) { sleep 0.05 until tracers(app.pid) != [0] }
      r = rbtrace('-p', app.pid, '--inject', '-e', '1')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to match(/thread \d+ of process #{app.pid} is already traced by process \d+ .*detach that one first/)
      strace.kill
      Timeout.timeout(10) { sleep 0.05 until tracers(app.pid) == [0] }
      expect_untouched(app)
    end

    it 'refuses an rbtrace built for another Ruby (--inject=DIR)' do
      app = plain_app('puts "ready"; sleep')
      Dir.mktmpdir do |dir|
        FileUtils.mkdir_p(File.join(dir, 'rbtrace'))
        File.write(File.join(dir, 'rbtrace.rb'), "raise 'never loaded'\n")
        File.write(File.join(dir, 'rbtrace', 'rbtrace.so'), "rbtrace-built-for-ruby: 2.7\n")
        r = rbtrace('-p', app.pid, "--inject=#{dir}", '-e', '1')
        expect(r.exitstatus).to eq(1)
        api = RUBY_VERSION[/\A\d+\.\d+/]
        expect(r.stderr).to include("its rbtrace/rbtrace.so is built for Ruby 2.7, and process #{app.pid} " \
                                    "runs Ruby #{RUBY_VERSION}: give the lib directory of an rbtrace built for Ruby #{api}")
      end
      expect_untouched(app)
    end

    it 'refuses a relative --inject=DIR, and --inject with --exec, on the command line' do
      r = rbtrace('-p', '1', '--inject=lib', '-e', '1')
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to include('an absolute directory')
      r = rbtrace('--inject', '-e', '1', '--exec', 'ruby', '-e', 'sleep')
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to include('--exec starts one with rbtrace loaded already: drop --inject')
    end

    # Blocked in open(2) of a FIFO: not a wait the thread may be taken from
    # (only listed waits are): retried for 2 s, then refused.
    it 'gives up when the main thread is never at a safe point, having changed nothing' do
      fifo = File.join(Dir.tmpdir, "rbtrace-spec-fifo-#{Process.pid}-#{rand(1 << 30)}")
      File.mkfifo(fifo)
      app = plain_app("puts 'ready'; File.open(#{fifo.inspect}, 'w') { |f| f.puts 'x' }; puts 'opened'; sleep")
      sleep 0.2
      r = rbtrace('-p', app.pid, '--inject', '-e', '1', timeout: 30)
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include("found no safe moment in process #{app.pid}'s main thread within 2000 ms " \
                                  '(it was in system call 257, not a wait it can be taken from): nothing was changed')
      expect_untouched(app)
      # its open(2) restarted and goes on
      expect(File.read(fifo)).to eq("x\n")
      expect(app.wait_for('opened')).to eq('opened')
    ensure
      FileUtils.rm_f(fifo) if fifo
    end

    it 'refuses a user without CAP_SYS_PTRACE' do
      skip 'needs root to act as nobody' unless Process.uid.zero?
      nobody = Etc.getpwnam('nobody')
      as = ['setpriv', "--reuid=#{nobody.uid}", "--regid=#{nobody.gid}", '--clear-groups']
      app = start_target('puts "ready"; sleep', rbtrace: false, prefix: as).ready
      r = rbtrace(*as.drop(1), RBTraceSpec::CLIENT, '-p', app.pid.to_s, '--inject', '-e', '1',
                  client: '/usr/bin/setpriv')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include('--inject needs root or the capability CAP_SYS_PTRACE')
      expect_untouched(app)
    end
  end

  # The client killed (SIGKILL, its whole process group) at random moments of
  # the injection: the tracer is a child of its own, which finishes and puts
  # the thread back, so the app never crashes nor hangs.
  it 'leaves the app running whenever the client is SIGKILLed during the injection' do
    runs = Integer(ENV.fetch('RBTRACE_INJECT_KILLS', '20'))
    outcomes = Hash.new(0)
    runs.times do
      app = plain_app('puts "ready"; loop { sleep 0.05; puts "tick" }')
      client = start_client('-p', app.pid, '--inject', '-e', 'Process.pid')
      sleep(rand * 0.015)
      Process.kill(:KILL, client.pid)
      client.wait
      app.drain
      # the injector finishes on its own (it never outlives its calls)
      Timeout.timeout(15) { sleep 0.02 until tracers(app.pid) == [0] }
      outcomes[mapped(app.pid)[:boot] ? :injected : :before] += 1
      before = app.lines.count('tick')
      Timeout.timeout(10) { sleep 0.05 until app.drain.count('tick') > before + 1 }
      expect(app).to be_alive
      # and it is attachable now, injected or not
      r = rbtrace('-p', app.pid, '--inject', '--timeout', '20', '-e', 'Process.pid', timeout: 40)
      expect(r.stdout).to eq(">> Process.pid\n=> #{app.pid}\n"), r.stderr
      app.kill
    end
    say "client killed #{runs} times: #{outcomes[:before]} before the injection, #{outcomes[:injected]} during or after it"
  end
end
