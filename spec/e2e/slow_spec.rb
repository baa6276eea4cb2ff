require_relative '../spec_helper'

# rbtrace --slow MS / --slowcpu MS / --slow-methods: only the calls that took
# at least MS milliseconds, innermost first, each indented by the number of
# watched calls open around it.
RSpec.describe 'slow calls (--slow, --slowcpu)' do
  APP_SLOW = <<~'RUBY'.freeze
    class Worker
      def run
        fast
        step
        burn
      end

      def fast; 1; end
      def step; sleep(0.15); end

      # About 60 ms of CPU, without sleeping.
      def burn
        t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
        x = 0
        x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t < 0.06
        x
      end

      def failing
        sleep 0.12
        raise ArgumentError, "no"
      end
    end

    puts "ready"
    loop do
      Worker.new.run
      begin
        Worker.new.failing
      rescue ArgumentError
      end
      puts "tick"
    end
  RUBY

  let(:app) { start_target(APP_SLOW).ready }
  let(:time) { '<\d+\.\d{6}>' }

  it 'shows the slow calls with the nesting of the slow calls around them, and not the fast ones' do
    out = trace(app, '--slow', '100', until_output: /^Worker#run </).stdout
    expect(out).to match(/^    Kernel#sleep <0\.1[5-9]\d{4}>\n  Worker#step <0\.1[5-9]\d{4}>\n/)
    expect(out).to match(/^Worker#run <0\.[2-9]\d{5}>$/)
    expect(out).not_to include('Worker#fast')
  end

  it 'reports a slow call that raised, and keeps the nesting right after it' do
    out = trace(app, '-s', '100', until_output: /Worker#failing <.*Worker#run </m).stdout
    expect(out).to match(/^  Kernel#sleep <0\.1[2-9]\d{4}>\nWorker#failing <0\.1[2-9]\d{4}>\n/)
    after = out[out.index('Worker#failing <')..]
    expect(after).to match(/^Worker#run #{time}$/)
  end

  it 'measures CPU time with --slowcpu: a busy call shows, a sleeping one does not' do
    out = trace(app, '--slowcpu', '40', until_output: /^(  )?Worker#burn </).stdout
    expect(out).to match(/^(  )?Worker#burn <0\.0[4-9]\d{4}>$/)
    expect(out).not_to include('Kernel#sleep')
    expect(out).not_to include('Worker#step')
  end

  it 'watches only --slow-methods, with the depth counted among them' do
    out = trace(app, '--slow', '100', '--slow-methods', 'Worker#run', 'Kernel#sleep',
                until_output: /^Worker#run </).stdout
    expect(out).to match(/^  Kernel#sleep <0\.1[5-9]\d{4}>\nWorker#run #{time}$/)
    expect(out).not_to include('Worker#step')
    expect(out).not_to include('Worker#failing')
  end

  it 'combines with -m, --gc and -t' do
    app = start_target(<<~'RUBY').ready
      def work; sleep(0.12); end
      def quick; Array.new(50_000) { "x" * 20 }.size; end
      puts "ready"
      loop { work; quick; GC.start }
    RUBY
    out = trace(app, '--slow=100', '-m', 'Object#quick', '--gc', '-t',
                until_output: /Object#work <.*Object#quick <.*GC major/m).stdout
    # A GC the attach's own allocations start runs on rbtrace's helper thread
    # (on 3.3+ under load): then two threads are seen and every line has its [tN].
    stamp = '(\[t\d+\] )?\d\d:\d\d:\d\d\.\d{6} '
    expect(out).to match(/^#{stamp}Object#work <0\.1[2-9]\d{4}>$/)
    # One line, or (when a GC ran inside it) its closing line, with blanks
    # where the start time was.
    expect(out).to match(/^(\[t\d+\] )?(\d\d:\d\d:\d\d\.\d{6} | {16})Object#quick #{time}$/)
    expect(out).to match(/^#{stamp}GC major \(force\) by method #{time}/)
  end

  it 'reports a bad --slow-methods selector and watches the others' do
    r = trace(app, '--slow', '100', '--slow-methods', 'NoSuchClass#x', 'Kernel#sleep',
              until_output: /Kernel#sleep </)
    expect(r.stderr).to include('*** error: NoSuchClass#x')
    expect(r.stdout).to match(/^Kernel#sleep <0\.1\d{5}>$/)
  end

  it 'says so when no --slow-methods selector can be used, and exits 1: nothing to trace' do
    r = rbtrace('-p', app.pid, '--slow', '100', '--slow-methods', 'NoSuchClass#x', timeout: 10)
    expect(r.stderr).to include('*** error: no --slow-methods selector could be used: slow calls are not watched')
    expect(r.stderr).to include("rbtrace: nothing to trace in process #{app.pid}")
    expect(r.exitstatus).to eq(1)
    expect(r.stdout).to eq('')
  end

  it 'leaves the app running normally after the detach' do
    trace(app, '--slow', '100', until_output: /Worker#run </)
    seen = app.drain.count('tick')
    app.wait_for(->(_) { app.lines.count('tick') >= seen + 2 })
    expect(app).to be_alive
  end

  # An app calling String#upcase, and the methods a trace of it shows.
  UPCASE_LOOP = <<~'RUBY'.freeze
    puts "ready"
    loop { "abc".upcase; sleep 0.01 }
  RUBY

  def methods_shown(out); out.lines.map { |l| l[/([A-Z]\w*(?:::\w+)*[#.][^\s(<]+)/, 1] }.compact.uniq; end

  # --slow's hook is on before -m's selectors are parsed (the client sends
  # --slow first), in Ruby, by rbtrace's thread: those calls are not the app's.
  it 'shows none of rbtrace\'s own calls made while it parses the selectors that follow' do
    app = start_target(UPCASE_LOOP).ready
    out = trace(app, '--slow', '0', '-m', 'String#upcase(self)',
                until_output: /upcase\(self="abc"\)(.*\n)+(.*\n)*.*upcase\(self="abc"\)/).stdout
    expect(out).to include('String#upcase(self="abc")')
    expect(methods_shown(out) - ['String#upcase', 'Kernel#sleep']).to eq([]), out
  end

  # -m 'String#upcase' is a wrapper (a prepended module's C method): --slow's
  # global hook must not show that method, which is rbtrace's, as the app's.
  it 'shows a wrapped method\'s calls, not the wrapper\'s own' do
    app = start_target(UPCASE_LOOP).ready
    out = trace(app, '--slow', '0', '-m', 'String#upcase',
                until_output: /(String#upcase <[^\n]*\n(.*\n)*){4}/).stdout
    expect(out).not_to include('#<Module:'), out
    expect(methods_shown(out) - ['String#upcase', 'Kernel#sleep']).to eq([]), out
  end
end

# Every thread's watched calls have a stack of their own in the app, freed
# when the thread is gone: short-lived threads (every Timeout.timeout
# starts one on Ruby 3.1) never run it out of room.
RSpec.describe 'slow calls of many short-lived threads' do
  SHORT_THREADS = 6000

  it "reports the slow call of each of #{SHORT_THREADS} threads that ran one after another" do
    app = start_target(<<~RUBY).ready
      class Probe
        def slow; sleep 0.002; end
        def warm; slow; end
      end
      Signal.trap('USR1') { $go = true }
      puts "ready"
      Probe.new.warm until $go
      # A few at a time, each batch ending before the next one starts. The
      # dead threads are kept: none of their addresses is reused (as the GC
      # would, on some Rubies more than others), each is a new thread.
      kept = []
      (#{SHORT_THREADS} / 8).times do
        kept.concat(8.times.map { Thread.new { Probe.new.slow } }.each(&:join))
      end
      puts "done"
      sleep
    RUBY
    r = trace(app, '--slow', '1', '--slow-methods', 'Probe#slow', 'Probe#warm') do |c|
      c.wait_for(/Probe#warm </)
      Process.kill(:USR1, app.pid)
      app.wait_for('done', timeout: 120)
      # Until all came, or none came for 2 s.
      count = -> { c.stdout.scan(/^\[t\d+\]\s*Probe#slow </).size }
      seen = -1
      until (now = count.call) >= SHORT_THREADS || now == seen
        seen = now
        sleep 2
      end
    end
    expect(r.stdout.scan(/^\[t\d+\]\s*Probe#slow </).size).to eq(SHORT_THREADS)
    expect(r.stderr).not_to match(/not watched|error/)
  end
end

RSpec.describe 'slow calls nested deeper than --slow keeps' do
  it 'says once that the calls past 10,000 levels in a thread are not watched' do
    app = start_target(<<~'RUBY', env: { 'RUBY_THREAD_VM_STACK_SIZE' => '8000000' }).ready
      class Probe
        def deep(n) = n.zero? ? 0 : 1 + deep(n - 1)
      end
      puts "ready"
      loop do
        puts Thread.new { Probe.new.deep(10_100) }.value
        sleep 0.05
      end
    RUBY
    r = trace(app, '--slow', '1000', '--slow-methods', 'Probe#deep') do |c|
      c.wait_for(/calls nested more than 10000 deep in a thread are not watched/, stream: :stderr)
      seen = app.drain.count('10100')
      app.wait_for(->(_) { app.lines.count('10100') >= seen + 3 })
    end
    expect(r.stderr.scan('nested more than').size).to eq(1), r.stderr
  end
end

# A Rails request's slow calls nest a hundred deep: the indentation stops at
# 40 levels, and deeper lines say their depth.
RSpec.describe 'slow calls nested deeper than the indentation shows' do
  it 'indents at most 40 levels and marks deeper lines with [dN]' do
    app = start_target(<<~'RUBY').ready
      class Probe
        def deep(n) = n.zero? ? sleep(0.06) : deep(n - 1)
      end
      puts "ready"
      loop { Probe.new.deep(60); puts "tick" }
    RUBY
    out = trace(app, '--slow', '50', '--slow-methods', 'Probe#deep', until_output: /^Probe#deep </).stdout
    # 61 calls, innermost first: depths 60 to 0
    block = out[/^ *\[d60\].*?^Probe#deep <[^\n]*\n/m]
    expect(block).not_to be_nil, out
    lines = block.lines
    expect(lines.size).to eq(61)
    expect(lines.map { |l| l[/\A */].size }.max).to eq(80)
    expect(lines.first).to match(/\A {80}\[d60\] Probe#deep <0\.0[6-9]\d{4}>\n\z/)
    expect(lines[19]).to match(/\A {80}\[d41\] Probe#deep </)
    expect(lines[20]).to match(/\A {80}Probe#deep </)
    expect(lines[21]).to match(/\A {78}Probe#deep </)
  end
end
