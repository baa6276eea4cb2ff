require_relative '../spec_helper'
require 'json'

# --duration SECS: a trace that ends by itself SECS seconds after the
# attach, as ^C ends it: the same "*** detached" line, the same end of the
# output (a --summary table, a whole chrome document), exit status 0; the
# app goes on untraced. Refused (exit 2) with a bad value, and with the
# modes that end by themselves (-e, -i, reports, --convert).
RSpec.describe '--duration SECS' do
  # Each tick says whether a client is attached (RBTrace.attached?), so the
  # spec sees the app go on, untraced, after the trace.
  DURATION_APP = <<~'RUBY'.freeze
    class Shop
      def buy(n); n * 2; end
    end
    puts "ready"
    i = 0
    loop do
      Shop.new.buy(i += 1)
      puts "tick #{i} attached=#{RBTrace.attached?}"
      sleep 0.05
    end
  RUBY

  let(:app) { start_target(DURATION_APP).ready }

  # Runs the client to its end, which --duration alone brings; returns the
  # Result and the seconds it ran. Generous bound: a loaded machine.
  def timed(*args)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    r = rbtrace(*args, timeout: 30)
    [r, Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0]
  end

  # The app ticked attached during the trace, and ticks on with no client
  # attached after it.
  def expect_untraced_after(target)
    seen = target.drain.size
    expect(target.lines.grep(/attached=true\z/)).not_to be_empty
    target.wait_for(->(_) { target.lines.size > seen + 3 }, timeout: 30)
    expect(target.lines.last).to match(/\Atick \d+ attached=false\z/)
    expect(target).to be_alive
  end

  it 'traces for SECS seconds from the attach, then detaches as ^C does (exit 0), and the app goes on untraced' do
    r, secs = timed('-p', app.pid, '-m', 'Shop#buy(n)', '--duration', '1')
    expect(r.exitstatus).to eq(0), r.stderr
    expect(secs).to be >= 1.0
    expect(r.stderr).to start_with("*** attached to process #{app.pid}\n")
    expect(r.stderr).to end_with("*** detached from process #{app.pid}\n")
    calls = r.stdout.scan(/^Shop#buy\(n=\d+\) <\d+\.\d{6}>$/)
    expect(calls.size).to be >= 2 # a tick every 50 ms for a second
    expect(r.stdout.lines).to all(match(/\AShop#buy\(n=\d+\) <\d+\.\d{6}>\n\z/))
    expect_untraced_after(app)
    # Detached for good: the next trace attaches as to an untraced app.
    again, = timed('-p', app.pid, '-m', 'Shop#buy', '--duration', '0.5')
    expect(again.exitstatus).to eq(0), again.stderr
    expect(again.stdout).to match(/^Shop#buy <\d+\.\d{6}>$/)
  end

  it 'takes decimals, counts from the attach (not before --wait), and ends with --stats\'s counts, as ^C does' do
    r, secs = timed('-p', app.pid, '--wait', '0.5', '--gc', '-m', 'Shop#buy', '--duration', '0.3', '--stats')
    expect(r.exitstatus).to eq(0), r.stderr
    expect(secs).to be >= 0.8
    expect(r.stderr).to match(/^\*\*\* attached to process #{app.pid}\n(.*\n)*\*\*\* \d+ events received, 0 lost\n\*\*\* detached from process #{app.pid}\n\z/)
  end

  it 'prints the --summary table at the end' do
    r, secs = timed('-p', app.pid, '-m', 'Shop#buy', '--summary', '--duration', '1')
    expect(r.exitstatus).to eq(0), r.stderr
    expect(secs).to be >= 1.0
    expect(r.stderr).to end_with("*** detached from process #{app.pid}\n")
    expect(r.stdout).to match(/^method +calls +total/)
    expect(r.stdout).to match(/^Shop#buy +\d+ /)
  end

  it 'closes the --format chrome document whole' do
    Dir.mktmpdir('rbtrace-duration') do |dir|
      out = File.join(dir, 'trace.json')
      r, = timed('-p', app.pid, '-m', 'Shop#buy', '--format', 'chrome', '-o', out, '--duration', '0.5')
      expect(r.exitstatus).to eq(0), r.stderr
      events = JSON.parse(File.read(out)).fetch('traceEvents')
      expect(events.map { |e| e['name'] }).to include('Shop#buy')
    end
  end

  it 'ends every session of -p PID PID, each after its own attach' do
    other = start_target(DURATION_APP).ready
    r, secs = timed('-p', app.pid, other.pid, '-m', 'Shop#buy', '--duration', '1')
    expect(r.exitstatus).to eq(0), r.stderr
    expect(secs).to be >= 1.0
    [app, other].each do |t|
      expect(r.stderr).to include("*** detached from process #{t.pid}")
      expect(r.stdout).to match(/^\[#{t.pid}\] Shop#buy <\d+\.\d{6}>$/)
    end
    [app, other].each { |t| expect_untraced_after(t) }
  end

  it 'is cut short by ^C as before' do
    c = start_client('-p', app.pid, '-m', 'Shop#buy', '--duration', '600')
    c.attached
    c.wait_for(/^Shop#buy </)
    expect(c.stop(:INT, timeout: 20).exitstatus).to eq(0)
    expect(c.stderr).to end_with("*** detached from process #{app.pid}\n")
  end

  # --exec: the client ends as a ^C sent to it alone does: it detaches and
  # exits 0, and the program goes on, untraced.
  it 'with --exec, leaves the program running untraced' do
    Dir.mktmpdir('rbtrace-duration') do |dir|
      pid_file = File.join(dir, 'pid')
      script = File.join(dir, 'prog.rb')
      File.write(script, <<~RUBY)
        File.write(#{pid_file.inspect}, Process.pid.to_s)
        def step(i); i; end
        i = 0
        loop do
          step(i += 1)
          File.write(#{pid_file.inspect} + ".new", "\#{i} \#{RBTrace.attached?}")
          File.rename(#{pid_file.inspect} + ".new", #{pid_file.inspect} + ".tick") # whole, for the reader
          sleep 0.05
        end
      RUBY
      prog = nil
      begin
        r, secs = timed('-m', 'step(i)', '--duration', '1', '--exec', 'ruby', script)
        prog = File.read(pid_file).to_i
        expect(r.exitstatus).to eq(0), r.stderr
        expect(secs).to be >= 1.0
        expect(r.stderr).to end_with("*** detached from process #{prog}\n")
        expect(r.stdout).to match(/^Object#step\(i=\d+\) <\d+\.\d{6}>$/)
        tick = -> { File.read("#{pid_file}.tick").split }
        first = tick.call.first.to_i
        Timeout.timeout(30) { sleep 0.05 until tick.call.first.to_i > first + 3 }
        expect(tick.call.last).to eq('false')
      ensure
        # The program outlives the client: killed here, whatever happened above.
        prog ||= File.read(pid_file).to_i if File.exist?(pid_file)
        Process.kill(:KILL, prog) if prog&.positive? rescue nil
      end
    end
  end

  describe 'refused (exit 2)' do
    it 'a value that is not a number of seconds above 0, saying what to give' do
      ['0', '-1', 'x', '1s', '', 'nan', 'inf', '1e9'].each do |bad|
        r = rbtrace('-p', Process.pid, '-m', 'Shop#buy', '--duration', bad)
        expect(r.exitstatus).to eq(2), bad
        expect(r.stderr).to eq("rbtrace: invalid value '#{bad}' for --duration: expected a number of seconds " \
                               "above 0 to trace for, e.g. 10 or 0.5\ntry rbtrace --help\n")
      end
      r = rbtrace('-p', Process.pid, '-m', 'Shop#buy', '--duration')
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to start_with('rbtrace: option --duration needs a value')
    end

    it 'with the modes that end by themselves: -e, -i, a report, --convert' do
      { %w[-e 1] => '-e', %w[-i] => '-i', %w[-b] => '-b', %w[--heapdump] => '--heapdump',
        %w[--memory] => '--memory' }.each do |mode, name|
        r = rbtrace('-p', Process.pid, *mode, '--duration', '1')
        expect(r.exitstatus).to eq(2), mode.join(' ')
        expect(r.stderr).to start_with('rbtrace: --duration SECS ends a trace (-m, -c, -f, --slow, --gc, ' \
                                       "--raise, --gvl, --alloc); #{name} is not one, and ends by itself: " \
                                       'drop --duration')
      end
      r = rbtrace('--convert', 'json', '--duration', '1')
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to start_with('rbtrace: --convert FORMAT [FILE] reads a saved trace, not a process')
    end
  end
end
