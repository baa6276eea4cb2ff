require_relative '../spec_helper'

# rbtrace --gvl [MS] (Ruby 3.2+'s thread event hooks): each thread's waits
# for the GVL, from asking for it (READY) to getting it (RESUMED); those
# longer than MS on a line of their own, and on each traced call's line the
# waits of its thread inside it. Without the hooks (Ruby 3.1) a clear
# message, and the rest traced. docs/DESIGN.md, "GVL waits".
RSpec.describe 'GVL waits (--gvl)' do
  # Asked of a child Ruby with the extension under test: a feature, not a
  # version (extconf.rb's check).
  GVL_SUPPORTED = IO.popen([RbConfig.ruby, '-I', RBTraceSpec::LIB, '-rrbtrace', '-e',
                            'print RBTrace.gvl_supported?'], &:read) == 'true'
  NO_GVL = "this Ruby (#{RUBY_VERSION}) has no thread event hooks (Ruby 3.2+)".freeze

  # Worker#crunch(n), CPU-bound Ruby; with SPIN set, a second thread spins
  # too and notes its CPU time as it goes. Each crunch prints how much CPU
  # time that thread got while it ran, and its own.
  APP_GVL = <<~'RUBY'.freeze
    $other_cpu = 0.0
    class Worker
      def crunch(n)
        other = $other_cpu
        own = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
        x = 0
        1_500_000.times { |i| x += i }
        own = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - own
        puts "crunch #{n} other #{format('%.6f', $other_cpu - other)} own #{format('%.6f', own)}"
        x
      end
    end
    if ENV['SPIN'] == '1'
      Thread.new do
        loop do
          y = 0
          20_000.times { |i| y += i }
          $other_cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
        end
      end
    end
    # USR1: fork, from the loop (a fork in the trap could catch the main
    # thread inside puts, whose lock the child would then hold for good).
    trap('USR1') { $fork = true }
    puts "ready"
    n = 0
    loop do
      Worker.new.crunch(n += 1)
      next unless $fork
      $fork = false
      fork do
        before = RBTrace.gvl_stats
        2.times.map { Thread.new { 200_000.times { |i| i * i } } }.each(&:join)
        puts "child #{before.inspect} #{RBTrace.gvl_stats.inspect}"
      end
    end
  RUBY

  # A thread that takes work from a Queue, woken by the main thread, which
  # then runs on for a while: the woken one waits for the GVL meanwhile.
  APP_QUEUE = <<~'RUBY'.freeze
    class Waiter
      def take(queue) = queue.pop
    end
    queue = Queue.new
    Thread.new do
      waiter = Waiter.new
      loop { waiter.take(queue) }
    end
    puts "ready"
    loop do
      queue << 1
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      x = 0
      x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < 0.3
    end
  RUBY

  let(:secs) { '(\d+\.\d{6})' }

  def start_app(spin:)
    start_target(APP_GVL, env: { 'SPIN' => spin ? '1' : '0' }).ready
  end

  # Output that shows count calls whole (until_output).
  def calls_done(count)
    ->(out) { out.scan(/Worker#crunch(?:\(n=\d+\))? </).size >= count }
  end

  # [[n, duration, gvl], ...] of the calls the trace shows whole: the
  # return's line ("Worker#crunch <d> gvl <g>") is the call's line, or one
  # of its own after the GVL wait lines inside.
  def calls(out)
    n = nil
    out.lines.filter_map do |line|
      call, d, g = line.match(/^(?:\[t\d+\] )?Worker#crunch(?:\(n=(\d+)\))?(?: <#{secs}> gvl <#{secs}>)?$/)&.captures
      n = Integer(call) if call
      [n, Float(d), Float(g)] if d && n
    end
  end

  # {n => [the other thread's CPU time during crunch n, crunch n's own]}, as the app said.
  def cpu_times(app)
    app.drain
    app.lines.grep(/^crunch \d+ other /).to_h do |l|
      n, other, own = l.split.values_at(1, 3, 5)
      [Integer(n), [Float(other), Float(own)]]
    end
  end

  # RBTrace.gvl_stats in the app: [hooked, hook runs ever, unmeasured].
  def gvl_stats(app)
    r = rbtrace('-p', app.pid, '-e', 'RBTrace.gvl_stats')
    expect(r).to be_success, r.stderr
    eval(r.stdout[/^=> (.*)$/, 1]) # rubocop:disable Security/Eval: an Array literal of ours
  end

  context 'with the thread event hooks' do
    before { skip NO_GVL unless GVL_SUPPORTED }

    it "puts a call's GVL wait on its line: with a second busy thread, about that thread's running time" do
      app = start_app(spin: true)
      out = trace(app, '-m', 'Worker#crunch(n)', '--gvl', until_output: calls_done(4)).stdout
      seen = calls(out)
      expect(seen.size).to be >= 4
      app.wait_for(/^crunch #{seen.last[0]} other/)
      cpu = cpu_times(app)
      total_d = seen.sum { |_n, d, _g| d }
      total_g = seen.sum { |_n, _d, g| g }
      total_other = seen.sum { |n, _d, _g| cpu.fetch(n)[0] }
      total_own = seen.sum { |n, _d, _g| cpu.fetch(n)[1] }
      slack = 0.005 * seen.size # the other notes its CPU time every ~1 ms of its work
      # Two CPU-bound threads share the GVL: the traced one waits about half
      # of each call, while the other runs. At least the other's CPU time
      # (more on a busy machine, where the thread holding the GVL also waits
      # for a CPU), and at most the time the call did not run itself.
      expect(total_g).to be > 0.3 * total_d
      expect(total_g).to be >= total_other - slack
      expect(total_g).to be <= total_d - total_own + slack
      seen.each { |_n, d, g| expect(g).to be <= d }
    end

    it 'shows no GVL wait in a call when its thread is the only one running Ruby' do
      app = start_app(spin: false)
      out = trace(app, '-m', 'Worker#crunch(n)', '--gvl', until_output: calls_done(4)).stdout
      seen = calls(out)
      expect(seen.size).to be >= 4
      expect(seen.sum { |_n, _d, g| g }).to be < 0.02 * seen.sum { |_n, d, _g| d }
      # From the first call on: before it, the attach's commands run on
      # rbtrace's helper thread, which the app's thread may wait for (over
      # 1 ms on a loaded machine: seen in CI under YJIT).
      expect(out[/^Worker#crunch.*/m]).not_to match(/GVL wait/)
    end

    # Ruby 3.3+ says a thread woken from Queue#pop is ready from the thread
    # that woke it (and under M:N from the scheduler's): a READY time kept
    # by native thread would be the waker's, and the woken one's wait lost.
    it "measures the wait of a thread woken by another (Queue#pop) in the woken one's call" do
      app = start_target(APP_QUEUE).ready
      take = /^(?:\[t\d+\] )?Waiter#take <#{secs}> gvl <#{secs}>$/
      out = trace(app, '-m', 'Waiter#take', '--gvl', '1000',
                  until_output: ->(o) { o.scan(take).size >= 6 }).stdout
      seen = out.scan(take).map { |d, g| [Float(d), Float(g)] }
      expect(seen.size).to be >= 6
      seen.each { |d, g| expect(g).to be <= d }
      # Each push leaves the woken thread waiting until the main thread's
      # time slice ends (0 to 100 ms on), within its 300 ms of work: about
      # a sixth of each take's time on average (0 where the wait was lost).
      expect(seen.sum(&:last)).to be > 0.05 * seen.sum(&:first)
    end

    it 'shows the waits longer than MS on lines of their own, of each thread' do
      app = start_app(spin: true)
      out = trace(app, '--gvl', '20', until_output: ->(o) { o.scan('GVL wait').size >= 6 }).stdout
      waits = out.scan(/^(?:\[t(\d+)\] )?GVL wait <#{secs}>$/)
      expect(waits.size).to eq(out.lines.size)
      expect(waits.map { |_t, w| Float(w) }).to all(be > 0.020)
      # Both busy threads wait their turn (the first line may come before
      # the second thread is seen, without [tN]).
      expect(waits.map(&:first).compact.uniq.sort).to eq(%w[1 2])
    end

    # --summary with --gvl alone (and --alloc, as in the trial): the waits
    # make the threads and the span, and a line counts the long ones (was
    # "0 threads, 0.000000 s traced": the waits were dropped).
    it '--summary without -m: the threads, the span and a line of the waits longer than MS' do
      app = start_app(spin: true)
      r = trace(app, '--gvl', '5', '--alloc', '--summary', seconds: 1.5)
      expect(r).to be_success
      head = r.stdout[/\A\*\*\* (\d+) threads?, #{secs} s traced.*\n/]
      expect(head).not_to be_nil, r.stdout
      threads, span = head.match(/(\d+) threads?, #{secs}/).captures
      expect(Integer(threads)).to be >= 2 # both busy threads (rbtrace's own may wait too)
      expect(Float(span)).to be > 0.5
      waits = r.stdout.match(/^\*\*\* GVL waits longer than 5 ms: (\d+), #{secs} s in all, longest #{secs} s$/)
      expect(waits).not_to be_nil, r.stdout
      count, all, longest = waits.captures
      expect(Integer(count)).to be >= 2
      expect(Float(all)).to be >= Float(longest)
      expect(Float(longest)).to be > 0.005
    end

    it 'reaches --format json (a "gvl" per call, "gvl" lines) and chrome ("GVL wait" slices)' do
      require 'json'
      app = start_app(spin: true)
      out = trace(app, '-m', 'Worker#crunch(n)', '--gvl', '20', '--format', 'json',
                  until_output: ->(o) { o.scan('"kind":"call"').size >= 2 }).stdout
      lines = out.lines.map { |l| JSON.parse(l) }
      calls = lines.select { |l| l['kind'] == 'call' }
      expect(calls.size).to be >= 2
      calls.each { |c| expect(c['gvl']).to be_between(0, c['duration']) }
      expect(calls.sum { |c| c['gvl'] }).to be > 0.3 * calls.sum { |c| c['duration'] }
      waits = lines.select { |l| l['kind'] == 'gvl' }
      expect(waits).not_to be_empty
      waits.each { |w| expect(w['duration']).to be > 20_000_000 }
      expect(waits).to all(include('thread', 'start', 'end'))

      out = trace(app, '--gvl', '20', '--format', 'chrome', until_output: /GVL wait(.*\n)*.*GVL wait/).stdout
      slices = JSON.parse(out).fetch('traceEvents').select { |e| e['cat'] == 'gvl' }
      expect(slices.size).to be >= 2
      slices.each { |e| expect(e).to include('ph' => 'X', 'name' => 'GVL wait', 'pid' => app.pid) }
      expect(slices.map { |e| e['dur'] }).to all(be > 20_000)
    end

    it 'leaves nothing behind: the hook is removed at the detach, costs no call after' do
      app = start_app(spin: true)
      trace(app, '--gvl', until_output: /GVL wait/)
      hooked, runs, = gvl_stats(app)
      expect(hooked).to be(false)
      expect(runs).to be > 0
      sleep 0.5 # two busy threads: ~5 GVL hand-offs, and an attach and a detach next
      expect(gvl_stats(app)[0..1]).to eq([false, runs])
      # Without --gvl: output as ever, and the hook never installed.
      out = trace(app, '-m', 'Worker#crunch(n)', until_output: /Worker#crunch\(n=\d+\) </).stdout
      expect(out).to match(/^Worker#crunch\(n=\d+\) <#{secs}>$/)
      expect(out).not_to match(/gvl|GVL/)
      expect(gvl_stats(app)[0..1]).to eq([false, runs])
    end

    it 'removes the hook when the client dies' do
      app = start_app(spin: true)
      client = start_client('-p', app.pid, '--gvl')
      client.wait_for(/GVL wait/)
      Process.kill(:KILL, client.pid)
      client.wait
      # The target notices the socket hang up and detaches by itself (or at
      # the latest when the next client attaches: the dead one no longer counts).
      sleep 0.5
      hooked, runs, = gvl_stats(app)
      expect(hooked).to be(false)
      sleep 0.3
      expect(gvl_stats(app)[0..1]).to eq([false, runs])
    end

    it 'a child forked while traced has no hook' do
      app = start_app(spin: true)
      trace(app, '--gvl', until_output: /GVL wait/) do
        Process.kill(:USR1, app.pid)
        app.wait_for(/^child /)
      end
      line = app.lines.grep(/^child /).first
      # [hooked, runs, unmeasured] as the child started, and after two threads took turns.
      before, after = line.scan(/\[[^\]]*\]/).map { |a| eval(a) } # rubocop:disable Security/Eval
      expect(before[0]).to be(false)
      expect(after[0..1]).to eq(before[0..1])
    end
  end

  context 'without them' do
    before { skip "this Ruby (#{RUBY_VERSION}) has the thread event hooks" if GVL_SUPPORTED }

    it 'says --gvl needs Ruby 3.2 and, with nothing else asked, exits with status 1' do
      app = start_app(spin: false)
      r = rbtrace('-p', app.pid, '--gvl')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include('rbtrace: --gvl needs Ruby 3.2 or newer (its thread event hooks), and ' \
                                  "process #{app.pid} runs an older Ruby: nothing to trace")
      expect(r.stdout).to eq('')
      expect(app).to be_alive
    end

    # --alloc was not counted as something else asked: the run failed
    # "nothing to trace" while allocations could be counted.
    it 'with --alloc, counts the allocations without gvl' do
      app = start_app(spin: false)
      res = trace(app, '--gvl', '--alloc', seconds: 0.3)
      expect(res.status).to be_success, res.stderr
      expect(res.stderr).to include('*** --gvl needs Ruby 3.2 or newer (its thread event hooks), and process ' \
                                    "#{app.pid} runs an older Ruby: tracing without GVL waits")
      expect(res.stderr).not_to include('nothing to trace')
      expect(res.stderr).to include("*** attached to process #{app.pid}")
    end

    it 'says so once and traces the rest, without gvl' do
      app = start_app(spin: false)
      res = trace(app, '-m', 'Worker#crunch(n)', '--gvl', until_output: calls_done(2))
      expect(res.stderr.scan(/--gvl needs Ruby 3.2/).size).to eq(1)
      expect(res.stderr).to include('*** --gvl needs Ruby 3.2 or newer (its thread event hooks), and process ' \
                                    "#{app.pid} runs an older Ruby: tracing without GVL waits")
      expect(res.stdout).to match(/^Worker#crunch\(n=\d+\) <#{secs}>$/)
      expect(res.stdout).not_to include('gvl')
    end
  end
end
