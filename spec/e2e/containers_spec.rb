require_relative '../spec_helper'
require 'etc'
require 'json'

# Issue 25, item 3 (docs/DESIGN.md, "Containers"): an app in PID, IPC and
# mount namespaces of its own, with a private tmpfs on /tmp (as in a
# container: Docker, Kubernetes, systemd-nspawn), traced from outside by its
# host pid. Its queue exists only in its IPC namespace, under the key of
# the pid it sees (1); our /tmp is not its /tmp. The apps are started with
# unshare(1), as root (CI runs the specs as root), one with a user namespace
# of its own started by an unprivileged user; each in a process group
# killed after its example (unshare, and the app, its child).
RSpec.describe 'containers' do
  CONTAINERS_SECOND_USER = 'rbtrace-spec'
  # The app: it calls Object#work (traced by -m) and counts its calls.
  CONTAINERS_APP = <<~RUBY.freeze
    $calls = 0
    def work(i) = $calls += i
    puts 'ready'
    loop { work(1); sleep 0.02 }
  RUBY
  # Namespaces of its own, a tmpfs on /tmp, then the app ("$@"). A checkout
  # under /tmp (a clone made there) is put back at its path on that tmpfs,
  # for the app to load rbtrace from.
  CONTAINERS_UNSHARE = %w[unshare --kill-child --pid --ipc --mount --fork --mount-proc].freeze
  CONTAINERS_TMPFS = ['sh', '-c', <<~'SH', 'sh', RBTraceSpec::ROOT].freeze
    root=$1; shift
    case $root in
      /tmp/*) mount --bind "$root" /mnt && mount -t tmpfs tmpfs /tmp && mkdir -p "$root" &&
              mount --bind /mnt "$root" ;;
      *) mount -t tmpfs tmpfs /tmp ;;
    esac && exec "$@"
  SH
  # What the app's /tmp holds but for rbtrace's: that checkout's top directory.
  CONTAINERS_CHECKOUT = RBTraceSpec::ROOT[%r{\A/tmp/([^/]+)}, 1]
  CONTAINERS_REFUSAL = 'runs in a container (its own PID namespace; pid 1 inside it): tracing ' \
                       'it from outside needs root, or the capabilities CAP_SYS_ADMIN and CAP_SYS_PTRACE. Run ' \
                       'rbtrace as root'.freeze

  before { skip 'needs root to make namespaces and act as other users' unless Process.uid.zero? }

  # The second user (spec/e2e/security_users_spec.rb makes it the same way).
  def second_user
    RBTraceSpec.system_user(CONTAINERS_SECOND_USER)
  end

  # A command prefix that runs the rest as user pw (no supplementary groups).
  def as(pw); ['setpriv', "--reuid=#{pw.uid}", "--regid=#{pw.gid}", '--clear-groups']; end

  # A Target in its own namespaces; app_user: the user it runs as inside.
  def start_contained(code = CONTAINERS_APP, app_user: nil)
    start_target(code, prefix: [*CONTAINERS_UNSHARE, *CONTAINERS_TMPFS, *(app_user ? as(app_user) : [])])
  end

  # The app's pid on the host: the child of unshare (Target#pid), which
  # knows itself as pid 1 (the last field of NSpid).
  def host_pid(target)
    target.ready
    pid = File.read("/proc/#{target.pid}/task/#{target.pid}/children").split.map(&:to_i).first
    expect(File.read("/proc/#{pid}/status")[/^NSpid:.*$/].split.last).to eq('1')
    pid
  end

  # The client's own TMPDIR, private to the example: nothing may be left in
  # it, and the socket must not be made there (the app could not reach it).
  def client_tmp
    @client_tmp ||= Dir.mktmpdir('rbtrace-containers-client')
  end

  after { FileUtils.rm_rf(@client_tmp) if @client_tmp }

  def rbtrace_host(*args)
    rbtrace(*args, env: { 'TMPDIR' => client_tmp })
  end

  # What the client left in the app's /tmp and in its own TMPDIR.
  def leftovers(pid)
    app_tmp = Dir.children("/proc/#{pid}/root/tmp") - [CONTAINERS_CHECKOUT]
    app_tmp.grep(/\Arbtrace-(?!heapdump)/) + Dir.children(client_tmp)
  end

  it 'evaluates code in the app (-e) by its host pid; the socket goes in the app\'s /tmp, and nothing is left' do
    pid = host_pid(app = start_contained)
    r = rbtrace_host('-p', pid, '-e', '[Process.pid, File.exist?("/proc/1/status"), $calls > 0]')
    expect(r.stderr).to include("*** attached to process #{pid}")
    expect(r.stdout).to eq(">> [Process.pid, File.exist?(\"/proc/1/status\"), $calls > 0]\n=> [1, true, true]\n")
    expect(r.exitstatus).to eq(0)
    expect(leftovers(pid)).to be_empty
    expect(app.stderr).to be_empty
  end

  it 'traces method calls (-m) and every call (-f), then the app goes on untraced' do
    pid = host_pid(app = start_contained)
    %w[-m -f].each do |mode|
      client = start_client('-p', pid, mode, *('Object#work' if mode == '-m'), env: { 'TMPDIR' => client_tmp })
      client.attached
      client.wait_for(/^Object#work <0\.\d+>\n.*^Object#work <0\.\d+>\n/m)
      expect(client.stop).to be_success
      expect(client.stderr).to include("*** detached from process #{pid}")
    end
    expect(rbtrace_host('-p', pid, '-e', 'c = $calls; sleep 0.2; $calls > c').stdout).to end_with("=> true\n")
    expect(leftovers(pid)).to be_empty
    expect(app.stderr).to be_empty
  end

  it 'evaluates what is typed (-i)' do
    pid = host_pid(start_contained)
    out = "#{client_tmp}/repl.out"
    reader, writer = IO.pipe
    client = Process.spawn({ 'TMPDIR' => client_tmp }, RBTraceSpec::CLIENT, '-p', pid.to_s, '-i',
                           in: reader, out: out, err: File::NULL, pgroup: true)
    reader.close
    writer.write("x = Process.pid\nx + 41\n")
    writer.close
    Timeout.timeout(20) { Process.wait(client) }
    client = nil
    expect($?.exitstatus).to eq(0)
    expect(File.read(out)).to eq("=> 1\n=> 42\n")
  ensure
    writer&.close unless writer&.closed?
    Process.kill(:KILL, -client) if client rescue nil
    Process.wait(client) if client rescue nil
  end

  it 'writes --heapdump inside the container and says where the host sees it' do
    pid = host_pid(start_contained)
    r = rbtrace_host('-p', pid, '--heapdump')
    expect(r.exitstatus).to eq(0)
    inside = r.stdout[%r{\Aheap dump: (/tmp/rbtrace-heapdump-1-\S+\.json)$}, 1]
    expect(inside).not_to be_nil, r.stdout
    host = "/proc/#{pid}/root#{inside}"
    expect(r.stderr).to include("*** the file is in the container of process #{pid}; from the host: #{host}\n")
    expect(JSON.parse(File.foreach(host).first)).to be_a(Hash)
    expect(File.stat(host).mode & 0o777).to eq(0o600)
    expect(File.exist?(inside)).to be(false)   # not in the host's /tmp
    expect(leftovers(pid)).to be_empty
  end

  it 'gives the socket to the app\'s user when it is not root inside the container' do
    pid = host_pid(app = start_contained(app_user: Etc.getpwnam('nobody')))
    r = rbtrace_host('-p', pid, '-e', '[Process.pid, Process.euid]')
    expect(r.stdout).to end_with("=> [1, #{Etc.getpwnam('nobody').uid}]\n")
    expect(leftovers(pid)).to be_empty
    expect(app.stderr).to be_empty
  end

  it 'refuses a second tracer while one traces, and accepts one once it was killed' do
    pid = host_pid(start_contained)
    first = start_client('-p', pid, '-m', 'Object#work', env: { 'TMPDIR' => client_tmp })
    first.wait_for(/^Object#work </)
    r = rbtrace_host('-p', pid, '-e', '1 + 1')
    expect(r.stderr).to include("rbtrace: process #{pid} is already traced by an rbtrace outside its " \
                                'container; stop that tracer first')
    expect(r.exitstatus).to eq(1)
    Process.kill(:KILL, first.pid)
    first.wait
    expect(rbtrace_host('-p', pid, '-e', '1 + 1').stdout).to end_with("=> 2\n")
  end

  it "follows no symbolic link in the app's TMPDIR, which would lead out of the container" do
    # /tmp/link, in the container, names a directory of the host's /tmp
    # (hidden in the container by its tmpfs): followed from the host through
    # /proc/PID/root, it would resolve against the host's root.
    linked = ['sh', '-c', "ln -s #{client_tmp} /tmp/link && exec \"$@\"", 'sh']
    app = start_target(CONTAINERS_APP, env: { 'TMPDIR' => '/tmp/link' },
                                       prefix: [*CONTAINERS_UNSHARE, *CONTAINERS_TMPFS, *linked])
    pid = host_pid(app)
    r = rbtrace_host('-p', pid, '-e', '1')
    expect(r.stderr).to eq("rbtrace: the temporary directory of process #{pid} (/tmp/link, in its container) " \
                           'is reached through a symbolic link or "..", which rbtrace does not follow inside ' \
                           'a container: give the app a TMPDIR that is a real directory, or run rbtrace ' \
                           "inside the container\n")
    expect(r.exitstatus).to eq(1)
    expect(Dir.children(client_tmp)).to be_empty
    expect(Dir.children("/proc/#{pid}/root/tmp") - [CONTAINERS_CHECKOUT]).to eq(['link'])
  end

  it 'refuses a user who is not root, saying what to do, and runs nothing' do
    pid = host_pid(app = start_contained)
    [['-e', '$ran = true'], ['-m', 'Object#work'], ['--heapdump']].each do |mode|
      r = rbtrace(*as(second_user).drop(1), RBTraceSpec::CLIENT, '-p', pid, *mode, client: '/usr/bin/setpriv')
      expect(r.stderr).to eq("rbtrace: process #{pid} #{CONTAINERS_REFUSAL} (sudo rbtrace -p #{pid}), or inside " \
                             'the container (docker exec -it CONTAINER rbtrace -p 1, kubectl exec -it ' \
                             "POD -- rbtrace -p 1)\n"), mode.first
      expect(r.exitstatus).to eq(1)
      expect(r.stdout).to be_empty
    end
    expect(rbtrace_host('-p', pid, '-e', '$ran').stdout).to end_with("=> nil\n")
    expect(Dir.children("/proc/#{pid}/root/tmp") - [CONTAINERS_CHECKOUT]).to be_empty
    expect(app.stderr).to be_empty
  end

  # Issue 30, item 3: an app of an unprivileged user in its own mount
  # namespace, but ours user namespace (Docker without userns-remap). The
  # client, root, makes the socket's directory as the app's user (its uid,
  # gid and groups): never where that user could not, and what the app puts
  # in it goes with it.
  describe "as the app's user, when the app is not root in a mount namespace of its own" do
    # Groups of no user: one the client is given, one the app is.
    ROOTS_GROUP = 4242
    APPS_GROUP = 4343
    # Directories in the container's /tmp (made as root before the app
    # starts as the second user, in the group APPS_GROUP): root's 0755, a
    # group's 0770 for root's group and for the app's.
    CONTAINERS_DIRS = ['sh', '-c', <<~SH, 'sh'].freeze
      mkdir -m 0755 /tmp/rootonly && mkdir -m 0770 /tmp/rootsgroup /tmp/appsgroup &&
        chgrp #{ROOTS_GROUP} /tmp/rootsgroup && chgrp #{APPS_GROUP} /tmp/appsgroup && exec "$@"
    SH
    # An app that never answers (its SIGURG taken), so the client waits
    # with its directory made, until its --timeout. It sleeps in a loop: on
    # Ruby 4.0.0 a trapped signal ends an untimed sleep (Bug #21812).
    STUBBORN_APP = "trap('URG') {}\nputs 'ready'\nloop { sleep }"

    def start_app(tmpdir, code = CONTAINERS_APP)
      user = ['setpriv', "--reuid=#{second_user.uid}", "--regid=#{second_user.gid}", "--groups=#{APPS_GROUP}"]
      start_target(code, env: { 'TMPDIR' => tmpdir },
                         prefix: [*CONTAINERS_UNSHARE, *CONTAINERS_TMPFS, *CONTAINERS_DIRS, *user])
    end

    # The client's directories in the app's /tmp and below, as the host sees them.
    def socket_dirs(pid)
      Dir.glob("/proc/#{pid}/root/tmp/{,rootonly/,rootsgroup/,appsgroup/}rbtrace-*").reject { |d| File.basename(d) == CONTAINERS_CHECKOUT }
    end

    # Where a client that waits for a stubborn app (TMPDIR tmpdir) makes
    # its directory, as the app sees it; the client run with groups.
    def dir_made(tmpdir, groups: [])
      pid = host_pid(start_app(tmpdir, STUBBORN_APP))
      args = ['-p', pid, '--timeout', '3', '-e', '1']
      client = if groups.empty?
                 start_client(*args, env: { 'TMPDIR' => client_tmp })
               else
                 start_client("--groups=#{groups.join(',')}", RBTraceSpec::CLIENT, *args,
                              client: '/usr/bin/setpriv', env: { 'TMPDIR' => client_tmp })
               end
      dirs = []
      Timeout.timeout(10) { sleep 0.01 while (dirs = socket_dirs(pid)).empty? }
      expect(dirs.size).to eq(1)
      expect(File.stat(dirs.first).uid).to eq(second_user.uid)
      expect(client.wait.exitstatus).to eq(1)
      expect(client.stderr).not_to include('could not remove')
      expect(leftovers(pid)).to be_empty
      File.dirname(dirs.first.delete_prefix("/proc/#{pid}/root"))
    end

    it "makes no directory in a TMPDIR its user cannot write: it uses the app's /tmp, as Ruby's Dir.tmpdir" do
      expect(dir_made('/tmp/rootonly')).to eq('/tmp')
      pid = host_pid(app = start_app('/tmp/rootonly'))
      r = rbtrace_host('-p', pid, '-e', 'Process.euid')
      expect(r.stdout).to end_with("=> #{second_user.uid}\n")
      expect(r.exitstatus).to eq(0)
      expect(Dir.children("/proc/#{pid}/root/tmp/rootonly")).to be_empty
      expect(leftovers(pid)).to be_empty
      expect(app.stderr).to be_empty
    end

    it 'says what to do when neither TMPDIR nor /tmp will do' do
      read_only = ['sh', '-c', 'mount -o remount,ro /tmp && exec "$@"', 'sh']
      app = start_target(CONTAINERS_APP, env: { 'TMPDIR' => '/nonexistent' },
                                         prefix: [*CONTAINERS_UNSHARE, *CONTAINERS_TMPFS, *read_only,
                                                  *as(second_user)])
      pid = host_pid(app)
      r = rbtrace_host('-p', pid, '-e', '1')
      expect(r.stderr).to eq("rbtrace: could not create a directory, as the app's user, in the temporary " \
                             "directory of process #{pid} (/nonexistent, in its container; from the host " \
                             "/proc/#{pid}/root/nonexistent): No such file or directory, nor in its /tmp: " \
                             'Read-only file system (give the app a TMPDIR its user can write, or run ' \
                             "rbtrace inside the container)\n")
      expect(r.exitstatus).to eq(1)
      expect(leftovers(pid)).to be_empty
    end

    it "takes the app's groups, not root's" do
      expect(dir_made('/tmp/rootsgroup', groups: [ROOTS_GROUP])).to eq('/tmp')
      expect(dir_made('/tmp/appsgroup')).to eq('/tmp/appsgroup')
    end

    it 'removes what the app put in the directory with it, following no link' do
      # The app fills each directory of the client's it sees with a file, a
      # link to a file of its own and an empty directory, until the client
      # gave up waiting (the app never answers).
      pid = host_pid(app = start_app('/tmp', <<~RUBY))
        trap('URG') {}
        File.write('/tmp/mine', 'kept')
        puts 'ready'
        loop do
          Dir.glob('/tmp/rbtrace-*/').each do |d|
            File.write("\#{d}file", 'x')
            File.symlink('/tmp/mine', "\#{d}link")
            Dir.mkdir("\#{d}dir")
            puts 'dropped'
          rescue SystemCallError
            nil
          end
          sleep 0.01
        end
      RUBY
      r = rbtrace_host('-p', pid, '--timeout', '2', '-e', '1')
      expect(app.wait_for('dropped')).to eq('dropped')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).not_to include('could not remove')
      expect(leftovers(pid)).to be_empty
      expect(File.read("/proc/#{pid}/root/tmp/mine")).to eq('kept')
    end
  end

  # Issue 30, item 2: an app in a PID namespace of its own that shares our
  # IPC namespace (docker --ipc=host, unshare --pid) keys its queue by the
  # pid it sees, which names no process here. Its pid there is chosen free
  # here (ns_last_pid): the sweep of stale queues that any rbtrace run makes
  # took the key's pid for one of ours, found it gone and removed the live
  # app's queue. It must leave it, and the app stay attachable.
  describe 'an app in a PID namespace of its own, sharing our IPC namespace' do
    # The pid the app will see, free here: the sweep would look it up here.
    def free_pid
      (30_000..32_000).to_a.reverse.find { |p| !File.exist?("/proc/#{p}") && !File.exist?("/proc/#{p - 1}") }
    end

    # The app as pid ns_pid of a new PID namespace (under a shell, its pid 1).
    def start_pid_ns(ns_pid)
      start_target(CONTAINERS_APP, prefix: ['unshare', '--kill-child', '--pid', '--fork', 'sh', '-c',
                                            "echo #{ns_pid - 1} > /proc/sys/kernel/ns_last_pid; \"$@\" & wait",
                                            'sh'])
    end

    def children(pid)
      File.read("/proc/#{pid}/task/#{pid}/children").split.map(&:to_i)
    end

    it 'leaves its queue to it when rbtrace runs against another process, and it stays attachable' do
      ns_pid = free_pid
      app = start_pid_ns(ns_pid).ready
      pid = children(children(app.pid).first).first
      expect(File.read("/proc/#{pid}/status")[/^NSpid:.*$/].split.last).to eq(ns_pid.to_s)
      expect(rbtrace_host('-p', pid, '-e', 'Process.pid').stdout).to end_with("=> #{ns_pid}\n")
      queue = RBTraceSpec::Queues.of(ns_pid)
      expect(queue.size).to eq(1)
      other = start_target("puts 'ready'\nsleep").ready
      expect(rbtrace('-p', other.pid, '-e', '1')).to be_success # sweeps the stale queues
      expect(RBTraceSpec::Queues.of(ns_pid)).to eq(queue)
      expect(rbtrace_host('-p', pid, '-e', 'Process.pid').stdout).to end_with("=> #{ns_pid}\n")
      expect(RBTraceSpec::Queues.of(ns_pid)).to eq(queue)
      expect(app.stderr).to be_empty
    ensure
      app&.kill
      RBTraceSpec::Queues.remove_left_by(ns_pid) if ns_pid # keyed by a pid not of this namespace
    end
  end

  describe 'with a user namespace of its own, made by an unprivileged user' do
    # Root inside is the second user outside: our root is nobody there.
    def start_userns
      start_target(CONTAINERS_APP, prefix: [*as(second_user), 'unshare', '--user', '--map-root-user',
                                            *CONTAINERS_UNSHARE.drop(1), *CONTAINERS_TMPFS])
    end

    it 'attaches as the app\'s user, whom the app sees as its root: -e and -m' do
      pid = host_pid(app = start_userns)
      expect(File.read("/proc/#{pid}/uid_map").split).to eq(['0', second_user.uid.to_s, '1'])
      r = rbtrace_host('-p', pid, '-e', '[Process.pid, Process.euid]')
      expect(r.stdout).to end_with("=> [1, 0]\n")
      client = start_client('-p', pid, '-m', 'Object#work', env: { 'TMPDIR' => client_tmp })
      client.wait_for(/^Object#work </)
      expect(client.stop).to be_success
      expect(leftovers(pid)).to be_empty
      expect(app.stderr).to be_empty
    end
  end
end
