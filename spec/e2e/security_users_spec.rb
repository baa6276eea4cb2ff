require_relative '../spec_helper'
require 'etc'
require 'open3'
require 'socket'

# Issue 5, items 1 and 3 (docs/DESIGN.md, "Security: who may attach"), with a real
# second user: `rbtrace-spec`, created here if missing (useradd, as root; CI
# runs the specs as root). `nobody` plays a third user. Clients and apps run
# as those users through setpriv; every process is killed after its example.
RSpec.describe 'security between users' do
  SECOND_USER = 'rbtrace-spec'
  TICKING = "puts 'ready'\nloop { Process.pid; sleep 0.02 }".freeze
  NOT_PERMITTED = 'it runs as another user (run rbtrace as that user, or as root)'.freeze

  # The second user: created once (idempotent), never removed.
  def self.second_user
    RBTraceSpec.system_user(SECOND_USER)
  end

  before { skip 'needs root to create and act as other users' unless Process.uid.zero? }

  let(:second) { self.class.second_user }
  let(:nobody) { Etc.getpwnam('nobody') }

  # A command prefix that runs the rest as user pw (no supplementary groups).
  def as(pw); ['setpriv', "--reuid=#{pw.uid}", "--regid=#{pw.gid}", '--clear-groups']; end

  # The real client, run to completion as user pw.
  def rbtrace_as(pw, *args, env: {})
    rbtrace(*as(pw).drop(1), RBTraceSpec::CLIENT, *args, client: '/usr/bin/setpriv', env: env)
  end

  # The real client, in the background, as user pw.
  def start_client_as(pw, *args)
    start_client(*as(pw).drop(1), RBTraceSpec::CLIENT, *args, client: '/usr/bin/setpriv')
  end

  # A short Ruby script run as user pw; its stdout and stderr together.
  def ruby_as(pw, code)
    out, status = Timeout.timeout(20) { Open3.capture2e(*as(pw), 'ruby', '-rsocket', '-e', code) }
    raise "ruby as #{pw.name} failed (#{status.inspect}):\n#{out}" unless status.success?

    out
  end

  def queue_key(pid); 0x52000000 | pid; end

  # key msqid perms cbytes qnum lspid lrpid uid gid cuid cgid, or nil.
  def queue_of(pid)
    File.readlines('/proc/sysvipc/msg').drop(1).map(&:split).find { |f| f[0].to_i == queue_key(pid) }
  end

  # A directory like /tmp: everyone may create entries, only their owner
  # may rename or remove them (sticky bit).
  def shared_tmp
    @shared_tmp ||= Dir.mktmpdir('rbtrace-shared').tap { |d| File.chmod(0o1777, d) }
  end

  after { FileUtils.rm_rf(@shared_tmp) if @shared_tmp }

  describe 'item 1: who may attach' do
    it "refuses another user's client: no attach, no eval, no events from root's app or a third user's, and says why" do
      marker = File.join(shared_tmp, 'eval-ran')
      apps = { 'root' => start_target(TICKING), 'nobody' => start_target(TICKING, prefix: as(nobody)) }
      apps.each_value(&:ready)
      apps.each do |owner, app|
        [['-e', "File.write(#{marker.inspect}, 'ran')"], ['-m', 'Process.pid'], ['-f'], ['--gc']].each do |mode|
          r = rbtrace_as(second, '-p', app.pid, *mode)
          expect(r.stderr).to include("rbtrace: not permitted to trace process #{app.pid}: #{NOT_PERMITTED}"),
                              "#{owner}'s app, #{mode.first}: #{r.stderr}"
          expect(r.exitstatus).to eq(1)
          expect(r.stdout).to be_empty
        end
        # The app was never even signalled: it makes its queue on the first SIGURG.
        expect(queue_of(app.pid)).to be_nil
        expect(app).to be_alive
      end
      expect(File.exist?(marker)).to be false
    end

    it 'gives a hand-made client of another user nothing: it can neither signal the app nor open, write or read its queue' do
      app = start_target(TICKING).ready
      expect(rbtrace('-p', app.pid, '-e', '1')).to be_success # the owner's attach made the queue
      expect(queue_of(app.pid)).not_to be_nil
      out = ruby_as(second, <<~RUBY)
        require 'fiddle'
        libc = Fiddle.dlopen(nil)
        msgget = Fiddle::Function.new(libc['msgget'], [Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
        begin
          Process.kill(:URG, #{app.pid})
          puts 'signal: sent'
        rescue SystemCallError => e
          puts "signal: \#{e.class}"
        end
        qid = msgget.call(#{queue_key(app.pid)}, 0)   # a bare id needs no permission
        snd = Fiddle::Function.new(libc['msgsnd'], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
        rcv = Fiddle::Function.new(libc['msgrcv'], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_LONG, Fiddle::TYPE_INT], Fiddle::TYPE_SSIZE_T)
        buf = Fiddle::Pointer.malloc(4096, Fiddle::RUBY_FREE)
        buf[0, 9] = [1].pack('q') + "\x02"
        no_wait = 0o4000
        def said(r); r < 0 ? SystemCallError.new(nil, Fiddle.last_error).class : r; end
        puts "msgget for writing: \#{said(msgget.call(#{queue_key(app.pid)}, 0o200))}"
        puts "msgget for reading: \#{said(msgget.call(#{queue_key(app.pid)}, 0o400))}"
        puts "msgsnd: \#{said(snd.call(qid, buf, 1, no_wait))}"
        puts "msgrcv: \#{said(rcv.call(qid, buf, 2048, 0, no_wait))}"
      RUBY
      expect(out).to include('signal: Errno::EPERM')
      ['msgget for writing', 'msgget for reading', 'msgsnd', 'msgrcv'].each do |call|
        expect(out).to match(/^#{call}: Errno::EACCES$/)
      end
      expect(queue_of(app.pid)[4]).to eq('0')   # qnum: nothing got in
      expect(rbtrace('-p', app.pid, '-e', '6 * 7').stdout).to include('=> 42')
    end

    it "lets the app's owner attach, evaluate and trace: a second user's client on its own app" do
      app = start_target(TICKING, prefix: as(second)).ready
      r = rbtrace_as(second, '-p', app.pid, '-e', '[Process.euid, 6 * 7]')
      expect(r.stdout).to include("=> [#{second.uid}, 42]")
      expect(r).to be_success
      client = start_client_as(second, '-p', app.pid, '-m', 'Process.pid')
      client.attached
      client.wait_for(/Process\.pid <\d+\.\d+>/)
      expect(client.stop).to be_success
      expect(client.stderr).to include("*** detached from process #{app.pid}")
    end

    it "lets root attach to another user's app, evaluate and trace, and leaves nothing behind" do
      app = start_target(TICKING, prefix: as(second)).ready
      tmp = shared_tmp
      r = rbtrace('-p', app.pid, '-e', '[Process.euid, 6 * 7]', env: { 'TMPDIR' => tmp })
      expect(r.stdout).to include("=> [#{second.uid}, 42]")
      expect(r).to be_success
      fields = queue_of(app.pid)
      expect([fields[2], fields[7].to_i, fields[9].to_i]).to eq(['600', second.uid, second.uid])
      result = trace(app, '-m', 'Process.pid', until_output: /Process\.pid <\d+\.\d+>/)
      expect(result.status).to be_success
      expect(Dir.children(tmp)).to be_empty
    end

    it "keeps the event stream from another user: the socket's directory is closed to it, and so is the client's /proc" do
      tmp = shared_tmp
      # An app that never answers keeps the client waiting with its socket open.
      stubborn = start_target("trap('URG') {}\nputs 'ready'\nsleep").ready
      waiting = RBTraceSpec::Client.new(['-p', stubborn.pid, '--timeout', '5', '-e', '1'], env: { 'TMPDIR' => tmp })
      @spec_processes << waiting
      dir = nil
      Timeout.timeout(5) { sleep 0.01 until (dir = Dir.glob(File.join(tmp, 'rbtrace-*')).first) }
      sock = File.join(dir, 'sock')
      Timeout.timeout(5) { sleep 0.01 until File.socket?(sock) }
      # And a session under way, its socket already connected.
      app = start_target(TICKING).ready
      traced = start_client('-p', app.pid, '-m', 'Process.pid')
      traced.attached
      out = ruby_as(second, <<~RUBY)
        def try(what)
          r = yield
          puts "\#{what}: allowed \#{r.inspect}"
        rescue SystemCallError => e
          puts "\#{what}: \#{e.class}"
        end
        try('connect') { UNIXSocket.new(#{sock.inspect}).close }
        try('list') { Dir.children(#{dir.inspect}) }
        try('fds') { Dir.children("/proc/#{traced.pid}/fd") }
        try('fd') { File.open("/proc/#{traced.pid}/fd/0").close }
      RUBY
      expect(out.lines.map(&:chomp)).to eq(['connect: Errno::EACCES', 'list: Errno::EACCES',
                                            'fds: Errno::EACCES', 'fd: Errno::EACCES'])
      traced.wait_for(/Process\.pid <\d+\.\d+>/)
      expect(traced.stop).to be_success
    end
  end

  describe 'item 3: nothing planted in a shared directory is trusted' do
    # A NOTICE event (protocol.h: [11, text]), as an intruder would forge it.
    def forged_notice(text); [0x92, 11, 0xa0 | text.bytesize].pack('C3') + text; end

    it "accepts the target's connection only: another process that connects to the client's socket first is refused, and what it wrote never shows" do
      tmp = shared_tmp
      app = start_target(TICKING).ready
      Process.kill(:STOP, app.pid)   # it connects only once we let it go on
      client = RBTraceSpec::Client.new(['-p', app.pid, '--timeout', '10', '-m', 'Process.pid'], env: { 'TMPDIR' => tmp })
      @spec_processes << client
      sock = nil
      Timeout.timeout(5) { sleep 0.01 until (sock = Dir.glob(File.join(tmp, 'rbtrace-*', 'sock')).first) }
      # This spec's own process (same user as the client: the directory lets
      # it in) connects first and writes an event. The socket's file exists
      # from bind(2) on, a moment before listen(2): refused until then.
      intruder = Timeout.timeout(5) do
        UNIXSocket.new(sock)
      rescue Errno::ECONNREFUSED
        sleep 0.005
        retry
      end
      intruder.write(forged_notice('FORGED BY AN INTRUDER'))
      Process.kill(:CONT, app.pid)
      client.attached
      expect(client.stderr).to include("*** ignored a connection from process #{Process.pid}: not process #{app.pid}")
      # The client hung up on it, unread (a reset, since its bytes were never read).
      hung_up = begin
        Timeout.timeout(5) { intruder.read }
      rescue Errno::ECONNRESET
        :reset
      end
      expect(['', :reset]).to include(hung_up)
      client.wait_for(/Process\.pid <\d+\.\d+>/)
      expect(client.stop).to be_success
      expect(client.stdout + client.stderr).not_to include('FORGED')
    ensure
      Process.kill(:CONT, app.pid) if app&.alive?
      intruder&.close
    end

    it "as root tracing another user's app, never goes back through the directory it gave that user: a symlink swapped in is not followed" do
      tmp = shared_tmp
      victim_dir = Dir.mktmpdir('rbtrace-victim')   # root's, 0700
      File.write(victim = File.join(victim_dir, 'sock'), 'precious')
      # An app of the second user that never answers: the client waits with
      # its directory, given to that user, until its --timeout.
      app = start_target("trap('URG') {}\nputs 'ready'\nsleep", prefix: as(second)).ready
      client = RBTraceSpec::Client.new(['-p', app.pid, '--timeout', '3', '-e', '1'], env: { 'TMPDIR' => tmp })
      @spec_processes << client
      dir = nil
      Timeout.timeout(5) do
        sleep 0.01 until (dir = Dir.glob(File.join(tmp, 'rbtrace-*')).first) && File.stat(dir).uid == second.uid
      end
      sock_uid = File.stat(File.join(dir, 'sock')).uid
      # The second user moves the directory away and puts a symlink to root's
      # victim directory at its path.
      ruby_as(second, "File.rename(#{dir.inspect}, #{File.join(tmp, 'moved').inspect}); " \
                      "File.symlink(#{victim_dir.inspect}, #{dir.inspect})")
      client.wait(timeout: 10)
      expect(client.stderr).to include("process #{app.pid} did not answer within 3 s")
      # (The client before this was fixed removed root's victim/sock here.)
      expect(File.read(victim)).to eq('precious')
      expect(File.symlink?(dir)).to be true   # rmdir does not follow it either
      expect(sock_uid).to eq(second.uid)      # the socket was the app's user's, so that it may connect
      expect(Dir.children(File.join(tmp, 'moved'))).to be_empty   # the socket was removed where it was
    ensure
      FileUtils.rm_rf(victim_dir) if victim_dir
    end

    it "leaves alone a symlink, a socket or a file another user planted at the default heap dump's name, and dumps to a new file" do
      tmp = shared_tmp
      victim_dir = Dir.mktmpdir('rbtrace-victim')
      File.write(victim = File.join(victim_dir, 'victim'), 'precious')
      app = start_target("puts 'ready'\nloop { sleep 0.02 }", env: { 'TMPDIR' => tmp }).ready
      { 'symlink' => "File.symlink(#{victim.inspect}, path)",
        'socket' => 'UNIXServer.new(path)',
        'file' => "File.write(path, 'planted')" }.each do |kind, plant|
        # The name has the app's pid and the time to the second: planted for
        # the next seconds, more than the dump can take to start.
        names = (-1..15).map do |s|
          File.join(tmp, "rbtrace-heapdump-#{app.pid}-#{(Time.now + s).strftime('%Y%m%d-%H%M%S')}.json")
        end
        ruby_as(second, "#{names.inspect}.each { |path| #{plant} }")
        r = rbtrace('-p', app.pid, '--heapdump')
        expect(r).to be_success, "#{kind}: #{r.stderr}"
        path = r.stdout[/^heap dump: (\S+)$/, 1]
        expect(names).not_to include(path)
        expect(path).to match(/rbtrace-heapdump-#{app.pid}-\d{8}-\d{6}-\h{12}\.json\z/)
        st = File.lstat(path)
        expect([st.file?, st.uid, st.mode & 0o777]).to eq([true, 0, 0o600])
        expect(File.read(path, 200)).to start_with('{')
        names.each do |planted|
          st = File.lstat(planted)
          expect(st.uid).to eq(second.uid)
          expect(st.ftype).to eq({ 'symlink' => 'link', 'socket' => 'socket', 'file' => 'file' }[kind])
        end
        expect(File.read(victim)).to eq('precious')
        File.unlink(path, *names)
      end
    ensure
      FileUtils.rm_rf(victim_dir) if victim_dir
    end

    it "is not disturbed by another user's entries named like its socket directories: each attach makes a fresh one" do
      tmp = shared_tmp
      theirs = File.join(tmp, 'theirs')
      ruby_as(second, <<~RUBY)
        Dir.mkdir(#{theirs.inspect}, 0o777)
        File.chmod(0o777, #{theirs.inspect})
        chars = [*'a'..'z', *'A'..'Z', *'0'..'9']
        30.times do |i|
          path = File.join(#{tmp.inspect}, 'rbtrace-' + Array.new(6) { chars.sample }.join)
          case i % 3
          when 0 then File.symlink(#{theirs.inspect}, path)
          when 1 then UNIXServer.new(path)
          else File.write(path, 'planted')
          end
        end
      RUBY
      planted = Dir.children(tmp).sort
      app = start_target(TICKING).ready
      3.times do
        r = rbtrace('-p', app.pid, '-e', '6 * 7', env: { 'TMPDIR' => tmp })
        expect(r.stdout).to include('=> 42')
        expect(r).to be_success
      end
      expect(Dir.children(tmp).sort).to eq(planted)   # nothing left, nothing of theirs touched
      expect(Dir.children(theirs)).to be_empty
    end
  end
end
