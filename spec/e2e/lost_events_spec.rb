require_relative '../spec_helper'

RSpec.describe 'a client that falls behind' do
  it 'never blocks the app: events are dropped, counted and reported' do
    # Flat out until told (USR1), then a call a millisecond: the client,
    # once it reads again, renders a bounded trace (flat out it would be
    # ~100 MB a second) that still goes on, so the loss is reported.
    app = start_target(<<~'RUBY').ready
      $n = 0
      Signal.trap('USR1') { $calm = true }
      puts "ready"
      Thread.new { loop { sleep 0.1; puts "progress #{$n}" } }
      loop { $n += 1; Process.pid; sleep 0.001 if $calm }
    RUBY
    client = start_client('-p', app.pid, '-m', 'Process.pid')
    client.attached
    while_client_stopped(app, client) do
      # While the client is stopped the app keeps going.
      first = app.wait_for(/progress/)[/\d+/].to_i
      sleep 1
      last = app.drain.grep(/progress/).last[/\d+/].to_i
      expect(last).to be > first
    end
  end
end

RSpec.describe 'counting events (--stats)' do
  # Once Hash#key? is traced (wrapped: its owner is then rbtrace's module)
  # and the spec says go (a file appears), the app makes exactly 600,000
  # traced calls, two events each; what the client could not take must be
  # counted.
  def counted_app(go)
    start_target(<<~RUBY).ready
      h = { 1 => 2 }
      puts "ready"
      sleep 0.01 while Hash.instance_method(:key?).owner == Hash
      puts "tracing"
      sleep 0.01 until File.exist?(#{go.inspect})
      i = 0
      while i < 600_000
        h.key?(1)
        i += 1
      end
      puts "done"
      sleep
    RUBY
  end

  # (Whether a client that keeps reading loses nothing depends on the
  # machine's load: bench/throughput.rb measures it, no spec asserts it.)
  def counted_run_with_client_stopped
    go = File.join(Dir.mktmpdir('rbtrace-stats'), 'go')
    app = counted_app(go)
    client = start_client('-p', app.pid, '-m', 'Hash#key?', '--stats')
    app.wait_for('tracing')
    Process.kill(:STOP, client.pid)
    FileUtils.touch(go)
    app.wait_for('done', timeout: 60)
    Process.kill(:CONT, client.pid)
    expect(client.stop(timeout: 30)).to be_success
    client.stderr.match(/^\*\*\* (\d+) events received, (\d+) lost$/)&.captures&.map(&:to_i)
  ensure
    FileUtils.rm_rf(File.dirname(go)) if go
  end

  it 'accounts for every event: received + lost = generated, with the client stopped meanwhile' do
    received, lost = counted_run_with_client_stopped
    expect(lost).to be > 0
    expect(received + lost).to eq(1_200_000)
  end
end

# On Ruby 3.3+ a command is first read by a postponed job, on whichever app
# thread runs: a malformed one is reported from there. With the ring full
# (a client that stopped reading) the report is dropped and counted: the
# job never waits for room, for an interrupt that ended the wait (the
# app's Timeout) could only be re-raised inside the job, whose runner
# swallows it, and the app's Timeout.timeout would never fire. (Before
# 3.3 the rbtrace thread reads commands; it may wait: the app runs on.)
RSpec.describe 'a malformed command while the client reads nothing' do
  it "leaves the app's Timeout to fire" do
    require 'fiddle'
    app = start_target(<<~'RUBY').ready
      require 'timeout'
      Signal.trap('USR1') { $calm = true }
      puts "ready"
      n = 0
      loop do
        Timeout.timeout(0.2) { loop { Process.pid; sleep 0.001 if $calm } }
      rescue Timeout::Error
        puts "timed out #{n += 1}"
      end
    RUBY
    client = start_client('-p', app.pid, '-m', 'Process.pid')
    client.attached
    while_client_stopped(app, client) do
      sleep 1 # the ring fills up
      libc = Fiddle.dlopen(nil)
      msgget = Fiddle::Function.new(libc['msgget'], [Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
      msgsnd = Fiddle::Function.new(libc['msgsnd'], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T,
                                                     Fiddle::TYPE_INT], Fiddle::TYPE_INT)
      qid = msgget.call(0x52000000 | app.pid, 0)
      expect(qid).to be >= 0
      junk = "\x02\xc3".b # a first and last chunk: not an array
      expect(msgsnd.call(qid, [1].pack('q') + junk, junk.bytesize, 0)).to eq(0)
      Process.kill(:URG, app.pid)
      sleep 0.5
      before = app.drain.grep(/^timed out/).size
      sleep 1.5
      after = app.drain.grep(/^timed out/).size
      # Five a second; swallowed, the block runs on for good (none).
      expect(after - before).to be >= 3
    end
    expect(app).to be_alive
  end
end
