require_relative '../faults_helper'

# Faults (issue 5): a tracer killed or stopped, a target that dies, a
# thousand sessions, a storm of signals, many threads. Each example starts
# real processes and kills them all when it ends. Figures the issue asks
# for are printed (bounds asserted are generous: the machine is shared).
RSpec.describe 'faults' do
  include FaultsSpec

  def say(text) = RSpec.configuration.reporter.message("    #{text}")

  def monotonic = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # The target's own view of a session, printed every 10 ms: attached or
  # not, Work#meth's owner (a wrapper module while wrapped), the VM's
  # active global hooks, its Ruby threads.
  STATE_REPORTER = <<~'RUBY'.freeze
    class Work
      def meth = :done
    end
    def state_line
      "state attached=#{RBTrace.attached?} owner=#{Work.instance_method(:meth).owner} " \
        "hooks=#{TracePoint.stat.values.first&.first.to_i} threads=#{Thread.list.size}"
    end
    Thread.new { loop { puts state_line; sleep 0.01 } }
  RUBY

  def last_state(app) = app.drain.grep(/^state /).last

  def wait_state(app, pattern, timeout: 10)
    Timeout.timeout(timeout) do
      loop do
        line = last_state(app)
        return line if line&.match?(pattern)

        sleep 0.005
      end
    end
  end

  describe 'a tracer killed with SIGKILL mid-trace' do
    # Work#meth is called while it is traced, then never again: only the
    # writer seeing the socket hang up can end the session.
    def quiet_app
      start_target(<<~RUBY).ready
        #{STATE_REPORTER}
        puts "ready"
        sleep 0.005 until Work.instance_method(:meth).owner != Work || TracePoint.stat.values.first&.first.to_i > 0
        100.times { Work.new.meth; sleep 0.005 }
        puts "quiet"
        sleep
      RUBY
    end

    [['wrapped', ['Work#meth']], ['hooked (global VM hook)', ['meth']]].each do |how, selectors|
      it "#{how}: the target detaches by itself within a second, leaves nothing, and can be attached again at once" do
        app = quiet_app
        # The queue exists from the first session on: the baseline is taken
        # after a clean attach and detach, with the reporter thread running.
        expect(rbtrace('-p', app.pid, '-e', '1')).to be_success
        clean = wait_state(app, /attached=false owner=Work hooks=0/)
        before = footprint(app.pid)
        expect(before[:queues].size).to eq(1)

        client = start_client('-p', app.pid, '-m', *selectors)
        client.attached
        client.wait_for(/^Work#meth <\d/)
        app.wait_for('quiet')
        expect(last_state(app)).to match(/attached=true/)
        killed = monotonic
        Process.kill(:KILL, client.pid)
        client.wait
        after = wait_state(app, /attached=false owner=Work hooks=0/)
        detached_in = monotonic - killed
        say "#{how}: detached #{(detached_in * 1000).round} ms after the tracer's SIGKILL"
        expect(detached_in).to be < 3

        # the writer pthread gone, the socket closed, no new queue, no Ruby thread
        Timeout.timeout(5) { sleep 0.01 until tasks(app.pid) == before[:tasks] }
        expect(footprint(app.pid)).to eq(before)
        expect(after[/threads=\d+/]).to eq(clean[/threads=\d+/])

        started = monotonic
        r = rbtrace('-p', app.pid, '-e', 'RBTrace.attached?')
        say "#{how}: attached again in #{((monotonic - started) * 1000).round} ms (a whole -e run)"
        expect(r.stdout).to eq(">> RBTrace.attached?\n=> true\n")
        expect(r).to be_success
      end
    end
  end

  describe 'a target that dies while traced' do
    # The client's socket directory goes in a TMPDIR of the spec's own, so
    # that anything it leaves there is seen.
    def traced_until_gone(app)
      tmp = Dir.mktmpdir('rbtrace-faults')
      client = start_client('-p', app.pid, '-m', 'Process.pid', env: { 'TMPDIR' => tmp })
      client.attached
      client.wait_for(/^Process\.pid </)
      yield
      gone = monotonic
      status = client.wait(timeout: 10)
      [client, status, monotonic - gone, Dir.children(tmp)]
    ensure
      FileUtils.rm_rf(tmp) if tmp
    end

    it 'killed (SIGKILL): the client says so, exits 3 within a second, and leaves no socket directory and no queue' do
      app = start_target("puts 'ready'\nloop { Process.pid; sleep 0.01 }").ready
      client, status, took, left = traced_until_gone(app) { Process.kill(:KILL, app.pid) }
      say "the client noticed the SIGKILL and exited in #{(took * 1000).round} ms"
      expect(client.stderr).to include("*** process #{app.pid} exited")
      expect(status.exitstatus).to eq(3)
      expect(took).to be < 3
      expect(left).to eq([])
      expect(queues_of(app.pid)).to eq([])
    end

    it 'exits by itself: the same' do
      app = start_target(<<~'RUBY').ready
        puts 'ready'
        sleep 0.01 until Process.method(:pid).owner != Process.singleton_class
        20.times { Process.pid; sleep 0.01 }
        exit 0
      RUBY
      client, status, took, left = traced_until_gone(app) { app.wait(timeout: 10) }
      say "the client noticed the exit and exited in #{(took * 1000).round} ms"
      expect(client.stderr).to include("*** process #{app.pid} exited")
      expect(status.exitstatus).to eq(3)
      expect(took).to be < 3
      expect(left).to eq([])
      expect(queues_of(app.pid)).to eq([])
    end
  end
end
