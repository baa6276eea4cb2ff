require_relative '../spec_helper'
require 'fiddle'
require 'socket'

# Issue 20, item 10: once a client is attached, its commands travel over
# its own socket (the app connected to it and checked who listens); the
# message queue, which any process of the app's user can write, only wakes
# the app and names a socket. Here a second process of the same user (this
# spec's own) writes into the app's queue while a client is attached.
RSpec.describe 'commands of an attached session' do
  let(:ticker) { "puts 'ready'\nloop { Process.pid; sleep 0.02 }" }
  # The version this build speaks (an ATTACH must name it).
  let(:protocol) { File.read(File.join(RBTraceSpec::ROOT, 'ext/rbtrace/protocol.h'))[/RBTRACE_PROTOCOL_VERSION (\d+)/, 1].to_i }

  # Just enough msgpack for commands (protocol.h): arrays, uints, strings.
  def pack(obj)
    case obj
    when Array then [0xdd, obj.size].pack('CN') + obj.map { |o| pack(o) }.join.b
    when Integer then [0xce, obj].pack('CN')
    when String then [0xdb, obj.bytesize].pack('CN') + obj.b
    end
  end

  def libc_fn(name, args)
    Fiddle::Function.new(Fiddle.dlopen(nil)[name], args, Fiddle::TYPE_INT)
  end

  # One whole command into pid's queue, as the client chunks it (flags FIRST).
  def enqueue(pid, command)
    qid = libc_fn('msgget', [Fiddle::TYPE_INT, Fiddle::TYPE_INT]).call(0x52000000 | pid, 0)
    raise "no queue for #{pid}: errno #{Fiddle.last_error}" if qid.negative?

    msg = [1].pack('q') + "\x02".b + pack(command)
    sent = libc_fn('msgsnd', [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT])
           .call(qid, msg, msg.bytesize - 8, 0)
    raise "msgsnd: errno #{Fiddle.last_error}" unless sent.zero?
  end

  # A socket of ours the app may connect to; yields its path and then the
  # first bytes the app writes there.
  def probe_socket(dir, name)
    server = UNIXServer.new(path = File.join(dir, name))
    answer = yield path
    conn = Timeout.timeout(10) { server.accept }
    answer.replace(Timeout.timeout(10) { conn.readpartial(4096) }.b)
  ensure
    conn&.close
    server&.close
  end

  it 'a second process of the same user cannot get a command run in an attached session (eval, selectors, detach)' do
    app = start_target(ticker).ready
    client = start_client('-p', app.pid, '-m', 'Process.pid')
    client.attached
    client.wait_for(/^Process\.pid </)
    Dir.mktmpdir('rbtrace-spec-') do |dir|
      marker = File.join(dir, 'injected')
      busy = +''
      again = +''
      # In the queue, in this order: an eval and more selectors that name
      # the attached client, a probe ATTACH of our own (answered once the
      # ones before it were carried out: the app reads its queue in order),
      # a DETACH naming the client, and a second probe after it.
      probe_socket(dir, 'probe1') do |probe1|
        probe_socket(dir, 'probe2') do |probe2|
          enqueue(app.pid, [5, client.pid, 77, "File.write(#{marker.inspect}, 'x')", 5000])
          enqueue(app.pid, [3, client.pid, ['Kernel#sleep']])
          enqueue(app.pid, [1, Process.pid, protocol, probe1])
          enqueue(app.pid, [2, client.pid])
          enqueue(app.pid, [1, Process.pid, protocol, probe2])
          Process.kill(:URG, app.pid)
          again
        end
        busy
      end
      # Both probes refused: the client stayed attached (REFUSED, BUSY).
      [busy, again].each do |answer|
        expect(answer.bytes.first(3)).to eq([0x94, 0x02, 0x01]), answer.inspect
        expect(answer).to include("already traced by rbtrace pid #{client.pid}")
      end
      expect(File.exist?(marker)).to be false
    end
    mark = client.stdout.scan(/^Process\.pid </).size
    client.wait_for(/(?:^Process\.pid <.*\n){#{mark + 3}}/)
    expect(client.stdout).not_to include('sleep')
    expect(client.stderr).not_to include('detached')
    expect(client.stop).to be_success
    expect(app).to be_alive
  end
  # A client of our own, in this process: ATTACH through the queue, then
  # the connection the app makes to our socket, ATTACHED read off it.
  def fake_client(app, dir)
    server = UNIXServer.new(path = File.join(dir, 'sock'))
    Process.kill(:URG, app.pid)   # the app makes its queue on the first signal
    Timeout.timeout(10) { sleep 0.01 while RBTraceSpec::Queues.of(app.pid).empty? }
    enqueue(app.pid, [1, Process.pid, protocol, path])
    Process.kill(:URG, app.pid)
    conn = Timeout.timeout(10) { server.accept }
    # ATTACHED: an array of 7 (protocol.h; the 7th, features, since protocol 6)
    expect(read_until(conn, +'', /\A\x97\x01/n)).to start_with("\x97\x01".b)
    conn
  ensure
    server&.close
  end

  # Reads conn into buf until it matches pattern (or the app hangs up).
  def read_until(conn, buf, pattern)
    Timeout.timeout(10) do
      buf << conn.readpartial(65_536).b until buf.match?(pattern)
    end
    buf
  rescue EOFError
    buf
  end

  def frame(bytes)
    [bytes.bytesize].pack('N') + bytes.b
  end

  it 'reads a command that comes in pieces without holding up the app, reports malformed ones, and detaches on a length past the limit' do
    app = start_target("$n = 0\nputs 'ready'\nloop { $n += 1; sleep 0.005 }").ready
    Dir.mktmpdir('rbtrace-spec-') do |dir|
      conn = fake_client(app, dir)
      buf = +''
      # EVAL [5, pid, id, code, timeout_ms]: $n, in three pieces 0.3 s apart;
      # the app's loop goes on meanwhile (the helper thread never waits on the socket).
      before = frame(pack([5, Process.pid, 1, '$n', 5000]))
      conn.write(before)
      n0 = read_until(conn, buf, /\x94\x09\x01\x00.{1,2}\d+/n)[/\x94\x09\x01\x00.(\d+)/n, 1].to_i
      slow = frame(pack([5, Process.pid, 2, '$n', 5000]))
      [slow[0, 2], slow[2, 10], slow[12..]].each do |piece|
        conn.write(piece)
        sleep 0.3
      end
      n1 = read_until(conn, buf, /\x94\x09\x02\x00.(\d+)/n)[/\x94\x09\x02\x00.(\d+)/n, 1].to_i
      expect(n1 - n0).to be > 20
      # not msgpack; a truncated EVAL; an ATTACH (not a socket's command,
      # ignored): two errors, and the next eval still runs
      conn.write(frame("\xc1") + frame(pack([5, Process.pid])[0, 3]) + frame(pack([1, Process.pid, protocol, 'x'])))
      conn.write(frame(pack([5, Process.pid, 3, '40 + 2', 5000])))
      read_until(conn, buf, /\x94\x09\x03\x00.42/n)
      expect(buf.scan(/malformed command/).size).to eq(2), buf.inspect
      # A length past RBTRACE_COMMAND_MAX: said so, then DETACHED ([3]) and the end.
      conn.write([(4 * 1024 * 1024) + 1].pack('N'))
      read_until(conn, buf, /\x91\x03\z/n)
      expect(buf).to include('a command of 4194305 bytes on the socket (at most 4194304)')
      expect(buf).to end_with("\x91\x03".b)
      expect(Timeout.timeout(10) { conn.read }).to eq('')
      conn.close
    end
    expect(app).to be_alive
    expect(rbtrace('-p', app.pid, '-e', '40 + 2').stdout).to eq(">> 40 + 2\n=> 42\n")
  end
end
