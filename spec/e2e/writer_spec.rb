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

  # nil for a thread gone (Ruby's own come and go).
  def wakeups(pid, tid)
    File.read("/proc/#{pid}/task/#{tid}/status")[/^voluntary_ctxt_switches:\s+(\d+)/, 1].to_i
  rescue Errno::ENOENT
    nil
  end

  # The app sleeps; each SIGUSR1 makes it call poke and run a collection
  # (a call event through the hot path's reserve, a GC event pushed: a
  # major one, forced, or on 3.4 nofree).
  let(:app) do
    start_target(<<~'RUBY').ready
      def poke; :poked; end
      trap('USR1') { poke; GC.start }
      puts 'ready'
      loop { sleep } # on 4.0.0 a trapped signal ends an untimed sleep
    RUBY
  end

  it 'sleeps while nothing fires, and each event it dozed through still wakes it' do
    before = tasks(app.pid)
    client = start_client('-p', app.pid, '-m', 'Object#poke', '--gc')
    client.attached
    started = tasks(app.pid) - before # the writer, and any thread Ruby started meanwhile
    sleep 0.5 # events stopped with the attach's answer: it dozes now
    start = started.to_h { |tid| [tid, wakeups(app.pid, tid)] }
    sleep 2
    idle = started.to_h { |tid| [tid, start[tid] && wakeups(app.pid, tid)&.-(start[tid])] }
    3.times do |i|
      Process.kill(:USR1, app.pid)
      client.wait_for(/(^Object#poke <\d+\.\d+>\n(.*\n)*?GC major .*\n(.*\n)*){#{i + 1}}/)
      sleep 0.3 # dozing again before the next
    end
    expect(client.stop).to be_success
    # The writer: the thread the attach started, alive throughout, that the
    # detach ended (3.4 starts and ends one of its own at the attach).
    writer = started.select { |tid| idle[tid] } - tasks(app.pid)
    expect(writer.size).to eq(1), "threads started by the attach and gone after the detach: #{writer}"
    say "the writer woke #{idle[writer.first]} times in 2 s of an idle session"
    # About 20 (a doze is 100 ms); 2,000 when it looked every millisecond.
    expect(idle[writer.first]).to be < 200
    expect(app).to be_alive
  end
end
