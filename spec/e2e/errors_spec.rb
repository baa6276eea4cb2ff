require_relative '../spec_helper'
require_relative '../faults_helper'
require 'tempfile'

# Each error: a clear message and a non-zero exit, within the timeout.
RSpec.describe 'errors' do
  let(:app) { start_target("puts 'ready'\nloop { Process.pid; sleep 0.02 }").ready }

  BUSY_JOB = "class Job; def run; 1; end; end\nputs 'ready'\nloop { Job.new.run; sleep 0.001 }".freeze

  # The client on targets with its stdout a pipe read for 2 lines, then
  # closed (rbtrace ... | head -2): [exit status, stderr].
  def head2(*targets)
    err = Tempfile.new('rbtrace-epipe')
    rd, wr = IO.pipe
    pid = Process.spawn(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '-p', *targets.map { |t| t.pid.to_s },
                        '-m', 'Job#run', out: wr, err: err.path)
    wr.close
    begin
      2.times { expect(rd.gets).to match(/^(\[\d+\] )?Job#run </) }
      rd.close
      _, status = Timeout.timeout(20) { Process.wait2(pid) }
      pid = nil
      [status, File.read(err.path)]
    ensure
      Process.kill(:KILL, pid) if pid
      Process.wait(pid) if pid
      err.close!
    end
  end

  # rbtrace ... | head -2: the reader goes away; the client says so once
  # (not again when it finishes the format at the end), and detaches.
  it 'a closed pipe on stdout is said once; the client detaches and exits 1' do
    busy = start_target(BUSY_JOB).ready
    status, stderr = head2(busy)
    expect(status.exitstatus).to eq(1)
    expect(stderr.scan('could not write the output: Broken pipe').size).to eq(1), stderr
    expect(stderr).to include("*** detached from process #{busy.pid}")
    expect(busy).to be_alive
  end

  # The same with several processes: the client was killed by SIGPIPE
  # (status 141 in a shell), silent, its sessions left to find out alone.
  it 'a closed pipe on stdout with several processes: said once, each detached, exit 1' do
    busy = [start_target(BUSY_JOB).ready, start_target(BUSY_JOB).ready]
    status, stderr = head2(*busy)
    expect(status.exitstatus).to eq(1), status.inspect
    expect(stderr.scan('Broken pipe').size).to eq(1), stderr
    busy.each { |t| expect(stderr).to include("*** detached from process #{t.pid}") }
    expect(busy).to all(be_alive)
  end

  it 'no such pid' do
    r = rbtrace('-p', '4194300', '-e', '1')
    expect(r.stderr).to include('no process with pid 4194300')
    expect(r).not_to be_success
  end

  it 'not permitted (another user)' do
    skip 'needs root to run the client as nobody' unless Process.uid.zero?
    r = rbtrace('--reuid=65534', '--regid=65534', '--clear-groups', RBTraceSpec::CLIENT,
                '-p', app.pid, '-e', '1', client: '/usr/bin/setpriv')
    expect(r.stderr).to match(/not permitted to trace process #{app.pid}/)
    expect(r).not_to be_success
  end

  it 'a process without rbtrace is named at once' do
    plain = start_target("puts 'ready'\nsleep", rbtrace: false).ready
    started = Time.now
    r = rbtrace('-p', plain.pid, '-e', '1')
    expect(Time.now - started).to be < 2
    expect(r.stderr).to include("process #{plain.pid} has not loaded rbtrace")
    expect(r).not_to be_success
  end

  # The writer thread needs an eventfd (ext/rbtrace/writer.c): a target
  # with one descriptor left connects back to the client, then has none.
  it 'a target that cannot start its writer refuses with the reason, and attaches once it can' do
    short = start_target(<<~'RUBY').ready
      Process.setrlimit(:NOFILE, 64)
      held = []
      begin
        loop { held << File.open(File::NULL) }
      rescue Errno::EMFILE
        held.pop.close
      end
      Signal.trap('USR1') { held.each(&:close); held.clear; puts 'freed' }
      puts "ready"
      loop { sleep 0.02 }
    RUBY
    r = rbtrace('-p', short.pid, '-e', '1 + 1')
    expect(r.stderr).to include("process #{short.pid} cannot start its writer thread: Too many open files")
    expect(r.stderr).to include('try again')
    expect(r.stdout).not_to include('=> 2')
    expect(r).not_to be_success
    # one line in the app's own log for this one failure
    expect(short.stderr).to eq("rbtrace: cannot start the writer thread: Too many open files\n")
    Process.kill(:USR1, short.pid)
    short.wait_for('freed')
    expect(rbtrace('-p', short.pid, '-e', '1 + 1').stdout).to eq(">> 1 + 1\n=> 2\n")
  end

  it 'another tracer is attached: the second is refused with the first one\'s pid, its code never runs' do
    first = start_client('-p', app.pid, '-m', 'Process.pid')
    first.attached
    # -e's code goes into the queue right behind its ATTACH (cli/session.c,
    # session_attach): refused, the target must drop it.
    marker = File.join(Dir.tmpdir, "rbtrace-spec-refused-#{Process.pid}")
    FileUtils.rm_f(marker)
    r = rbtrace('-p', app.pid, '-e', "File.write(#{marker.inspect}, 'ran')")
    expect(r.stderr).to include("already traced by rbtrace (pid #{first.pid})")
    expect(r).not_to be_success
    # the first session is untouched
    before = first.stdout.size
    sleep 0.3
    expect(first.stdout.size).to be > before
    expect(first.stop).to be_success
    expect(File.exist?(marker)).to be(false)
  end

  it 'the target exits while traced' do
    short = start_target("puts 'ready'\n20.times { Process.pid; sleep 0.05 }\nexit 0").ready
    client = start_client('-p', short.pid, '-m', 'Process.pid')
    client.attached
    status = client.wait(timeout: 10)
    expect(client.stderr).to include("*** process #{short.pid} exited")
    expect(status).not_to be_success
  end

  it 'the target is killed while traced: the client notices within a second or so' do
    client = start_client('-p', app.pid, '-m', 'Process.pid')
    client.attached
    Process.kill(:KILL, app.pid)
    killed = Time.now
    client.wait(timeout: 5)
    expect(Time.now - killed).to be < 3
    expect(client.stderr).to include("*** process #{app.pid} exited")
  end

  it 'a tracer killed with SIGKILL: the target detaches itself and can be attached again at once' do
    threads_and_fds = -> { FaultsSpec.footprint(app.pid).slice(:tasks, :fds) }
    before = threads_and_fds.call
    client = start_client('-p', app.pid, '-m', 'Process.pid')
    client.attached
    client.wait_for(/Process\.pid </)
    Process.kill(:KILL, client.pid)
    client.wait
    # threads (rbtrace's writer; on 3.3+ the GVL hand-off's kicker, which
    # ends 0.2 s after its last use) and fds as before the attach
    deadline = Time.now + 5
    sleep 0.02 until threads_and_fds.call == before || Time.now > deadline
    expect(threads_and_fds.call).to eq(before)
    r = rbtrace('-p', app.pid, '-e', 'RBTrace.attached?')
    expect(r.stdout).to eq(">> RBTrace.attached?\n=> true\n")
  end

  it 'the app still exits on SIGTERM after a tracer detached (nothing holds its threads)' do
    3.times do
      busy = start_target("def f; 'x'.upcase; end\nputs 'ready'\nloop { f }").ready
      expect(rbtrace('-p', busy.pid, '-e', '1')).to be_success
      Process.kill(:TERM, busy.pid)
      expect { busy.wait(timeout: 5) }.not_to raise_error
    end
  end

  it 'a malformed command in the queue is ignored; the app lives and stays attachable' do
    # Written straight into the target's queue, as its owner could.
    require 'fiddle'
    libc = Fiddle.dlopen(nil)
    msgget = Fiddle::Function.new(libc['msgget'], [Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    msgsnd = Fiddle::Function.new(libc['msgsnd'], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    expect(rbtrace('-p', app.pid, '-e', '1')).to be_success # creates the queue
    qid = msgget.call(0x52000000 | app.pid, 0)
    expect(qid).to be >= 0
    # flags byte (0x02 first chunk, 0x01 more follow), then msgpack bytes
    ["\x02\x93\x05", "\x02\xff\xff\xff", "\x02\x92\x01\xa1x", "\x02\x94\x05\x01\x01\x01",
     "\x00orphan", "\x03#{'a' * 100}"].each do |junk|
      msg = [1].pack('q') + junk.b
      expect(msgsnd.call(qid, msg, junk.bytesize, 0)).to eq(0)
    end
    Process.kill(:URG, app.pid)
    sleep 0.2
    expect(app).to be_alive
    expect(rbtrace('-p', app.pid, '-e', '40 + 2').stdout).to eq(">> 40 + 2\n=> 42\n")
  end

  it 'an ATTACH of another protocol version is refused on its socket, saying why; the app stays attachable' do
    require 'fiddle'
    require 'socket'
    libc = Fiddle.dlopen(nil)
    msgget = Fiddle::Function.new(libc['msgget'], [Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    msgsnd = Fiddle::Function.new(libc['msgsnd'], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    expect(rbtrace('-p', app.pid, '-e', '1')).to be_success # creates the queue
    qid = msgget.call(0x52000000 | app.pid, 0)
    expect(qid).to be >= 0
    Dir.mktmpdir('rbtrace-spec-') do |dir| # 0700, as the client makes it
      path = File.join(dir, 'sock')
      server = UNIXServer.new(path)
      # [ATTACH, our pid, protocol 99, socket path], as the client encodes it
      attach = [0x94, 0x01, 0xce, *[Process.pid].pack('N').bytes, 0x63, 0xd9, path.bytesize].pack('C*') + path
      msg = [1].pack('q') + "\x02".b + attach.b
      expect(msgsnd.call(qid, msg, attach.bytesize + 1, 0)).to eq(0)
      Process.kill(:URG, app.pid)
      conn = Timeout.timeout(10) { server.accept }
      answer = Timeout.timeout(10) { conn.read }.b
      conn.close
      server.close
      # REFUSED (2), reason VERSION (2), tracer pid 0, then the message
      expect(answer.bytes.first(4)).to eq([0x94, 0x02, 0x02, 0x00])
      protocol = File.read(File.join(RBTraceSpec::ROOT, 'ext/rbtrace/protocol.h'))[/RBTRACE_PROTOCOL_VERSION (\d+)/, 1]
      expect(answer).to include("protocol version 99, but this process speaks #{protocol}")
      expect(answer).to include("the gem version the app loaded (rbtrace #{RBTrace::VERSION})")
    end
    expect(app).to be_alive
    expect(rbtrace('-p', app.pid, '-e', 'RBTrace.attached?').stdout).to eq(">> RBTrace.attached?\n=> true\n")
  end

  it 'commands in the queue while a client is attached are not its: none is carried out or reported to it, the trace goes on' do
    require 'fiddle'
    libc = Fiddle.dlopen(nil)
    msgget = Fiddle::Function.new(libc['msgget'], [Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    msgsnd = Fiddle::Function.new(libc['msgsnd'], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    client = start_client('-p', app.pid, '-m', 'Process.pid')
    client.attached
    client.wait_for(/^Process\.pid </)
    qid = msgget.call(0x52000000 | app.pid, 0)
    expect(qid).to be >= 0
    cpid = client.pid
    # truncated; not an array; selectors of the wrong type; an unknown command;
    # a selector list that announces 2^32 - 1 elements in 5 bytes; a GC
    # command naming the client; the start of a longer one (protocol 3's chunks)
    [[0x02, 0x93, 0x03], [0x02, 0xc3], [0x02, 0x93, 0x03, 0xce, *[cpid].pack('N').bytes, 0x2a], [0x02, 0x92, 0x63, 0x01],
     [0x02, 0x93, 0x03, 0xce, *[cpid].pack('N').bytes, 0xdd, 0xff, 0xff, 0xff, 0xff],
     [0x02, 0x92, 0x07, 0xce, *[cpid].pack('N').bytes], [0x03, 0x92, 0x07]].each do |bytes|
      msg = [1].pack('q') + bytes.pack('C*')
      expect(msgsnd.call(qid, msg, bytes.size, 0o4000)).to eq(0) # IPC_NOWAIT
    end
    Process.kill(:URG, app.pid)
    # read: the queue is empty again
    Timeout.timeout(5) do
      sleep 0.01 until File.readlines('/proc/sysvipc/msg').map(&:split).find { |f| f[1].to_i == qid }[4] == '0'
    end
    mark = client.stdout.scan(/^Process\.pid </).size
    client.wait_for(/(?:^Process\.pid <.*\n){#{mark + 2}}/)
    expect(client.stop).to be_success
    expect(client.stderr).not_to include('error')
    expect(client.stdout).not_to include('GC')
    expect(app).to be_alive
  end

  # A trace whose every mode came to nothing (a typo, a tracer of a gem the
  # app lacks) fails at once, as --gvl alone on Ruby 3.1 does, rather than
  # stay attached showing nothing until ^C and then exit 0. Not "nothing":
  # another mode that runs (--gc), or --devmode, which waits for the class.
  describe 'a trace with nothing to trace' do
    let(:app) do
      start_target(<<~'RUBY').ready
        class Post; def headline; 'h'; end; end
        puts 'ready'
        loop { Post.new.headline; GC.start; sleep 0.05 }
      RUBY
    end

    def expect_nothing(result, app)
      expect(result.exitstatus).to eq(1), result.stderr
      expect(result.stderr).to include("rbtrace: nothing to trace in process #{app.pid}: no selector could be " \
                                       'traced (the errors above say why). Check the names; for a class the ' \
                                       'app has not loaded yet')
      expect(result.stderr).to include('--devmode traces it once it is defined')
      expect(result.stderr).not_to include('*** attached')
      expect(result.stderr).to end_with("*** detached from process #{app.pid}\n")
      expect(result.stdout).to eq('')
      expect(app).to be_alive
    end

    it 'a misspelt class: says so and exits 1, detached; the app takes the next trace' do
      r = rbtrace('-p', app.pid, '-m', 'Psot#headline', timeout: 10)
      expect(r.stderr).to include('*** error: Psot#headline: no such class or module Psot (not traced)')
      expect_nothing(r, app)
      # the detach was whole: the right name traces
      again = trace(app, '-m', 'Post#headline', until_output: /^Post#headline </)
      expect(again.status).to be_success, again.stderr
    end

    it 'a tracer of a library the app has not loaded (-c net_http): exits 1' do
      r = rbtrace('-p', app.pid, '-c', 'net_http', timeout: 10, env: { 'RBTRACE_TRACERS_DIR' => nil })
      expect(r.stderr).to include("*** error: Net::HTTP is not loaded in process #{app.pid}")
      expect_nothing(r, app)
    end

    it 'a failed selector beside a mode that runs (--gc) traces the mode' do
      r = trace(app, '-m', 'Psot#headline', '--gc', until_output: /^GC /)
      expect(r.status).to be_success, r.stderr
      expect(r.stderr).to include('Psot#headline: no such class or module Psot (not traced)')
      expect(r.stderr).not_to include('nothing to trace')
    end

    it 'with --devmode, waits for the class to be defined' do
      r = trace(app, '--devmode', '-m', 'Psot#headline', seconds: 0.3)
      expect(r.status).to be_success, r.stderr
      expect(r.stderr).to include('traced once it is defined')
      expect(r.stderr).not_to include('nothing to trace')
    end
  end
end
