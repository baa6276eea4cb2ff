require_relative '../spec_helper'

# The writer thread (ext/rbtrace/writer.c) of a session whose traced code
# does not run: it dozes, a hundred milliseconds at a time, until the next
# event wakes it, instead of looking at the ring every millisecond (an
# idle session cost the app 1.5-2.6 % of its CPU: bench/RESULTS.md, "The
# writer's doze"). Its wake-ups are the kernel's count of its voluntary
# context switches: a count, bounded generously, not a time.
RSpec.describe 'the writer thread of an idle session' do
  def tasks(pid)
    Dir.children("/proc/#{pid}/task").map(&:to_i)
  end

  def wakeups(pid, tid)
    File.read("/proc/#{pid}/task/#{tid}/status")[/^voluntary_ctxt_switches:\s+(\d+)/, 1].to_i
  end

  # The app sleeps; each SIGUSR1 makes it call poke and run a collection
  # (a call event through the hot path's reserve, a GC event pushed).
  let(:app) do
    start_target(<<~'RUBY').ready
      def poke; :poked; end
      trap('USR1') { poke; GC.start }
      puts 'ready'
      sleep
    RUBY
  end

  it 'sleeps while nothing fires, and each event it dozed through still wakes it' do
    before = tasks(app.pid)
    client = start_client('-p', app.pid, '-m', 'Object#poke', '--gc')
    client.attached
    writer = tasks(app.pid) - before
    expect(writer.size).to eq(1), "the attach started #{writer.size} threads: #{writer}"
    sleep 0.5 # events stopped with the attach's answer: it dozes now
    start = wakeups(app.pid, writer.first)
    sleep 2
    idle = wakeups(app.pid, writer.first) - start
    say "the writer woke #{idle} times in 2 s of an idle session"
    # About 20 (a doze is 100 ms); 2,000 when it looked every millisecond.
    expect(idle).to be < 200
    3.times do |i|
      Process.kill(:USR1, app.pid)
      client.wait_for(/(^Object#poke <\d+\.\d+>\n(.*\n)*?GC major \(force\).*\n(.*\n)*){#{i + 1}}/)
      sleep 0.3 # dozing again before the next
    end
    expect(client.stop).to be_success
    expect(app).to be_alive
  end
end
