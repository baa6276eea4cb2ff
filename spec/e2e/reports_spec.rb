require_relative '../spec_helper'
require 'json'

# The reports: rbtrace -p PID (-b [N] | --backtrace N | --memory |
# --heapdump [FILE] | --shapesdump [FILE] | --fork), and -h's old meaning.
RSpec.describe 'reports' do
  # Threads parked in known methods; main ticks so that we see it run.
  THREADS_APP = <<~'RUBY'.freeze
    module Parked
      def self.wait_here(q); q.pop; end
      def self.spin_here; loop { Math.sqrt(2) }; end
      def self.deep(n); n.zero? ? sleep : deep(n - 1); end
    end
    q = Queue.new
    threads = [
      Thread.new { Thread.current.name = 'waiter'; Parked.wait_here(q) },
      Thread.new { Thread.current.name = 'deep'; Parked.deep(40) },
    ]
    threads << Thread.new { Thread.current.name = 'spinner'; Parked.spin_here } if ENV['SPIN']
    sleep 0.01 until threads.all? { |t| t.backtrace.to_a.any?(/wait_here|spin_here|deep/) }
    puts "ready"
    sleep
  RUBY

  TICKING_APP = <<~'RUBY'.freeze
    $ticks = 0
    at_exit { File.write(ENV['AT_EXIT_MARK'], 'at_exit ran') if ENV['AT_EXIT_MARK'] }
    $keep = Array.new(2000) { |i| "object #{i}" }
    puts "ready"
    loop { $ticks += 1; puts "tick #{$ticks}"; sleep 0.02 }
  RUBY

  # The lines of one thread's section of a backtrace report.
  def section(out, header)
    out.split("\n\n").find { |s| s.start_with?(header) }&.lines&.map(&:chomp)
  end

  def frames(lines); lines.drop(1).select { |l| l.start_with?('  ') && !l.start_with?('  ...') }; end

  def tmpdir
    @tmpdir ||= Dir.mktmpdir('rbtrace-reports-spec')
  end

  # A process the test did not start as its child (the --fork copy): killed
  # after the example with the others.
  Stray = Struct.new(:pid) do
    def kill
      Process.kill(:KILL, pid)
    rescue Errno::ESRCH
      nil
    end
  end

  # Runs the client in dir (for relative file names); bounded like rbtrace().
  def rbtrace_in(dir, *args)
    out = File.join(tmpdir, 'client.out')
    err = File.join(tmpdir, 'client.err')
    pid = Process.spawn(RBTraceSpec::CLIENT, *args.map(&:to_s), out: out, err: err, in: :close, chdir: dir)
    @spec_processes << (client = Stray.new(pid))
    Timeout.timeout(20) { Process.wait(pid) }
    @spec_processes.delete(client)   # reaped: its pid may be reused
    RBTraceSpec::Result.new(File.read(out), File.read(err), $?)
  end

  # State (R, S, Z, ...) of a process, or nil once it is gone.
  def process_state(pid)
    File.read("/proc/#{pid}/stat")[/\) (\S)/, 1]
  rescue Errno::ENOENT, Errno::ESRCH
    nil
  end

  after { FileUtils.rm_rf(@tmpdir) if @tmpdir }

  describe '-b/--backtraces [N]' do
    let(:app) { start_target(THREADS_APP, env: { 'SPIN' => '1' }).ready }

    it "prints every app thread's name, status and frames, as text" do
      r = rbtrace('-p', app.pid, '-b')
      expect(r).to be_success
      expect(r.stdout).not_to match(/^(>>|=>) /)
      waiter = section(r.stdout, 'Thread "waiter" (sleep)')
      spinner = section(r.stdout, 'Thread "spinner" (run)')
      main = section(r.stdout, 'Thread main (sleep)')
      expect([waiter, spinner, main]).to all(be_an(Array))
      expect(frames(waiter).join("\n")).to match(/in [`'](Parked\.)?wait_here'/)
      expect(frames(spinner).join("\n")).to match(/in [`'](Parked\.)?spin_here'/)
      expect(frames(main).join("\n")).to match(/in [`'](Kernel#)?sleep'/)
      # all frames by default: 40 levels of deep, and no "more frames"
      expect(frames(section(r.stdout, 'Thread "deep"')).grep(/deep'/).size).to be > 40
      expect(r.stdout).not_to include('more frame')
      # rbtrace's own threads are left out
      expect(r.stdout).not_to include('"rbtrace')
      expect(r.stdout.scan(/^Thread /).size).to eq(4)
    end

    it 'limits each thread to N frames' do
      %w[-b2 --backtraces=2].each do |spelling|
        r = rbtrace('-p', app.pid, spelling)
        expect(r).to be_success
        deep = section(r.stdout, 'Thread "deep" (sleep)')
        expect(frames(deep).size).to eq(2)
        expect(deep.last).to match(/^  \.\.\. \d+ more frames$/)
        expect(deep.last[/\d+/].to_i).to be > 40
      end
      r = rbtrace('-p', app.pid, '--backtraces', '1')
      expect(r.stdout.split("\n\n").map { |s| frames(s.lines.map(&:chomp)).size }.uniq).to eq([1])
    end

    it 'delivers a report of any size (10,000 frames)' do
      deep = start_target(<<~'RUBY').ready
        def down(n); n.zero? ? sleep : down(n - 1); end
        t = Thread.new { down(10_000) }
        sleep 0.01 until t.backtrace.to_a.size > 10_000
        puts "ready"
        t.join
      RUBY
      r = rbtrace('-p', deep.pid, '--backtraces')
      expect(r).to be_success
      expect(r.stdout.lines.grep(/in [`'](Object#)?down'/).size).to be > 10_000
      expect(r.stdout.bytesize).to be > 150_000   # many socket reads
    end

    it 'refuses a value that is not a number of frames' do
      r = rbtrace('-p', app.pid, '--backtraces', 'x')
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to include("invalid value 'x'").and include('number of frames')
    end
  end

  describe '--backtrace N' do
    it 'prints the running app thread, N frames' do
      app = start_target(THREADS_APP, env: { 'SPIN' => '1' }).ready
      r = rbtrace('-p', app.pid, '--backtrace', '3')
      expect(r).to be_success
      expect(r.stdout).to start_with("Thread \"spinner\" (run)\n")
      expect(r.stdout.scan(/^Thread /).size).to eq(1)
      lines = r.stdout.lines.map(&:chomp)
      expect(frames(lines).size).to eq(3)
      expect(frames(lines).join("\n")).to match(/spin_here/)
    end

    it 'prints the main thread when no app thread is running' do
      app = start_target(THREADS_APP).ready
      r = rbtrace('-p', app.pid, '--backtrace', '5')
      expect(r).to be_success
      expect(r.stdout).to start_with("Thread main (sleep)\n")
      expect(r.stdout.scan(/^Thread /).size).to eq(1)
    end

    it 'needs N' do
      r = rbtrace('-p', '1', '--backtrace')
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to include('--backtrace needs a value')
    end
  end

  describe '--memory' do
    it "prints GC.stat, objects and memory by type, and the process's RSS" do
      app = start_target(TICKING_APP).ready
      r = rbtrace('-p', app.pid, '--memory')
      expect(r).to be_success
      out = r.stdout
      expect(out).to include("== GC.stat\n", "== objects by type, most first (ObjectSpace.count_objects)\n",
                             "== memory by type, largest first (ObjectSpace.count_objects_size)\n",
                             "== process (/proc/self/status)\n")
      expect(out).to match(/^  count +\d+$/).and match(/^  heap_live_slots +\d+$/)
      expect(out[/^  T_STRING +(\d+)$/, 1].to_i).to be > 2000
      sizes = out.split('== memory by type').last.split("\n==").first.scan(/^  (\w+) +(\d+) bytes/)
      expect(sizes.size).to be > 5
      expect(sizes.map { |_, n| n.to_i }).to eq(sizes.map { |_, n| n.to_i }.sort.reverse)
      rss = out[/^  VmRSS +(\d+) kB$/, 1].to_i
      actual = File.read("/proc/#{app.pid}/status")[/^VmRSS:\s+(\d+) kB/, 1].to_i
      expect(rss).to be_between(actual / 2, actual * 2)
      expect(rss).to be_between(5_000, 2_000_000)
    end

    it 'goes to the -o FILE' do
      app = start_target(TICKING_APP).ready
      out = File.join(tmpdir, 'memory.txt')
      r = rbtrace('-p', app.pid, '--memory', '-o', out)
      expect(r).to be_success
      expect(r.stdout).to eq('')
      expect(File.read(out)).to start_with("== GC.stat\n").and include('VmRSS')
    end
  end

  describe '--heapdump [FILE]' do
    let(:app) { start_target(TICKING_APP, env: { 'TMPDIR' => tmpdir }).ready }

    it 'writes a heap dump from a forked child and says where, how big, and the pause' do
      file = File.join(tmpdir, 'heap.json')
      threads_before = rbtrace('-p', app.pid, '-e', 'Thread.list.size').stdout
      ticks_before = app.drain.grep(/tick/).last[/\d+/].to_i
      r = rbtrace('-p', app.pid, '--heapdump', file)
      expect(r).to be_success
      expect(r.stdout).to include("heap dump: #{file}\n")
      expect(File.stat(file).mode & 0o777).to eq(0o600)
      lines = File.readlines(file)
      objects = lines.map { |l| JSON.parse(l) }
      expect(objects.count { |o| o['type'] == 'STRING' }).to be > 2000
      expect(r.stdout).to match(/^size: +#{File.size(file)} bytes/)
      expect(r.stdout[/^objects: +(\d+)/, 1].to_i).to eq(lines.size)
      expect(r.stdout).to match(/^pause: +\d+\.\d+ s \(the fork; child (\d+) wrote/)
      expect(r.stdout[/child (\d+)/, 1].to_i).not_to eq(app.pid)
      # the app went on, with no thread or child left behind
      expect(app).to be_alive
      app.wait_for(/tick #{ticks_before + 5}/)
      expect(rbtrace('-p', app.pid, '-e', 'Thread.list.size').stdout).to eq(threads_before)
      expect(rbtrace('-p', app.pid, '-e', 'Process.wait(-1, Process::WNOHANG) rescue $!.class').stdout)
        .to eq(">> Process.wait(-1, Process::WNOHANG) rescue $!.class\n=> Errno::ECHILD\n")
    end

    it "names the file after the pid and the time in the app's TMPDIR by default" do
      r = rbtrace('-p', app.pid, '--heapdump')
      expect(r).to be_success
      path = r.stdout[/^heap dump: (.+)$/, 1]
      expect(path).to match(%r{\A#{Regexp.escape(tmpdir)}/rbtrace-heapdump-#{app.pid}-\d{8}-\d{6}\.json\z})
      expect(File.size(path)).to be > 0
    end

    it "resolves a relative FILE against the client's directory" do
      Dir.mkdir(sub = File.join(tmpdir, 'here'))
      r = rbtrace_in(sub, '-p', app.pid, '--heapdump', 'rel.json')
      expect(r).to be_success
      expect(r.stdout).to include("heap dump: #{sub}/rel.json\n")
      expect(File.size(File.join(sub, 'rel.json'))).to be > 0
    end

    it 'refuses a file that exists, and leaves it alone' do
      file = File.join(tmpdir, 'exists.json')
      File.write(file, 'mine')
      r = rbtrace('-p', app.pid, '--heapdump', file)
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include("--heapdump failed in process #{app.pid}: #{file} exists already")
      expect(r.stdout).to eq('')
      expect(File.read(file)).to eq('mine')
    end

    it 'never follows a planted symlink, dangling or not' do
      victim = File.join(tmpdir, 'victim')
      File.write(victim, 'precious')
      [victim, File.join(tmpdir, 'nothing-yet')].each_with_index do |to, i|
        link = File.join(tmpdir, "planted-#{i}.json")
        File.symlink(to, link)
        r = rbtrace('-p', app.pid, '--heapdump', link)
        expect(r.exitstatus).to eq(1)
        expect(r.stderr).to include("#{link} is a symbolic link")
      end
      expect(File.read(victim)).to eq('precious')
      expect(File.exist?(File.join(tmpdir, 'nothing-yet'))).to be(false)
    end

    it 'works in an app that reaps every child (a Unicorn or Puma master)' do
      reaper = start_target(<<~'RUBY', env: { 'TMPDIR' => tmpdir }).ready
        $reaped = []
        Thread.new { loop { $reaped << Process.wait2(-1)[0] rescue sleep(0.005) } }
        puts "ready"
        sleep
      RUBY
      r = rbtrace('-p', reaper.pid, '--heapdump', file = File.join(tmpdir, 'reaped.json'))
      expect(r.stderr).not_to include('failed')
      expect(r).to be_success
      expect(r.stdout[/^objects: +(\d+)/, 1].to_i).to eq(File.readlines(file).size)
      r = rbtrace('-p', reaper.pid, '--fork')
      expect(r).to be_success
      @spec_processes << Stray.new(r.stdout[/pid (\d+)$/, 1].to_i)
    end

    # Ruby 4.0.0's Bug #21812: any SIGCHLD ends the main thread's untimed
    # sleep, and the app exits (lib/rbtrace/quiet_children.rb).
    it 'leaves asleep an app whose main thread sleeps untimed, the dump\'s child and --fork\'s gone' do
      sleeper = start_target(<<~'RUBY', env: { 'TMPDIR' => tmpdir }).ready
        puts "ready"
        sleep
        puts "woke up"
      RUBY
      r = rbtrace('-p', sleeper.pid, '--heapdump', File.join(tmpdir, 'sleeper.json'))
      expect(r).to be_success
      r = rbtrace('-p', sleeper.pid, '--fork')
      expect(r).to be_success
      @spec_processes << Stray.new(r.stdout[/pid (\d+)$/, 1].to_i)
      sleep 0.3 # a woken main thread prints and exits at once
      expect(sleeper.drain).not_to include('woke up')
      expect(sleeper).to be_alive
    end

    it 'says why it cannot create the file' do
      r = rbtrace('-p', app.pid, '--heapdump', File.join(tmpdir, 'no-such-dir', 'heap.json'))
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to match(/cannot create .*no-such-dir.*No such file or directory/)
      expect(app).to be_alive
    end
  end

  describe '--shapesdump [FILE]' do
    let(:app) { start_target(TICKING_APP, env: { 'TMPDIR' => tmpdir }).ready }

    if RUBY_VERSION >= '3.3'
      it 'writes the object shapes from a forked child' do
        file = File.join(tmpdir, 'shapes.json')
        r = rbtrace('-p', app.pid, '--shapesdump', file)
        expect(r).to be_success
        expect(r.stdout).to include("shapes dump: #{file}\n")
        expect(File.stat(file).mode & 0o777).to eq(0o600)
        shapes = File.readlines(file).map { |l| JSON.parse(l) }
        expect(shapes.first).to include('type' => 'SHAPE')
        expect(r.stdout[/^objects: +(\d+)/, 1].to_i).to eq(shapes.size)
        r = rbtrace('-p', app.pid, '--shapesdump')
        expect(r.stdout).to match(/^shapes dump: .*rbtrace-shapesdump-#{app.pid}-\d{8}-\d{6}\.json$/)
      end
    else
      it 'says that this Ruby has no object shapes to dump' do
        r = rbtrace('-p', app.pid, '--shapesdump', File.join(tmpdir, 'shapes.json'))
        expect(r.exitstatus).to eq(1)
        expect(r.stderr).to include("--shapesdump failed in process #{app.pid}: this Ruby (#{RUBY_VERSION}) " \
                                    'cannot dump object shapes')
        expect(Dir.children(tmpdir)).to eq([])
      end
    end
  end

  describe '--fork' do
    it 'forks an idle copy in its own session, attachable, and leaves the app as it was' do
      skip RBTraceSpec::NO_FORK_HOOK unless RBTraceSpec::FORK_HOOK
      mark = File.join(tmpdir, 'at_exit')
      app = start_target(TICKING_APP, env: { 'AT_EXIT_MARK' => mark }).ready
      threads_before = rbtrace('-p', app.pid, '-e', 'Thread.list.size').stdout
      r = rbtrace('-p', app.pid, '--fork')
      expect(r).to be_success
      copy = r.stdout[/^forked an idle copy of process #{app.pid}: pid (\d+)$/, 1].to_i
      expect(copy).to be > 0
      @spec_processes << (stray = Stray.new(copy))
      expect(r.stdout).to include("gdb -p #{copy}", "kill #{copy}")

      expect(process_state(copy)).to match(/[SR]/)
      expect(Process.getsid(copy)).to eq(copy)
      expect(Process.getpgid(copy)).to eq(copy)
      expect(Process.getsid(copy)).not_to eq(Process.getsid(app.pid))
      expect(Process.getpgid(copy)).not_to eq(Process.getpgid(app.pid))
      expect(File.read("/proc/#{copy}/stat")[/\) \S (\d+)/, 1].to_i).not_to eq(app.pid) # not the app's child

      expect(rbtrace('-p', copy, '-e', 'Process.pid').stdout).to eq(">> Process.pid\n=> #{copy}\n")
      expect(rbtrace('-p', app.pid, '-e', 'Process.pid').stdout).to eq(">> Process.pid\n=> #{app.pid}\n")
      expect(rbtrace('-p', app.pid, '-e', 'Thread.list.size').stdout).to eq(threads_before)
      ticks = app.wait_for(/tick/)
      app.wait_for(/tick #{ticks[/\d+/].to_i + 3}/)

      # kill as printed: it exits without running the app's at_exit handlers
      Process.kill(:TERM, copy)
      Timeout.timeout(10) { sleep 0.02 until [nil, 'Z'].include?(process_state(copy)) }
      @spec_processes.delete(stray) unless process_state(copy)   # reaped: its pid may be reused
      expect(File.exist?(mark)).to be(false)
    end
  end

  describe '-h' do
    it 'is help alone, and with anything else points to --heapdump' do
      expect(rbtrace('-h')).to be_success
      [%w[-p 123 -h], %w[-h /tmp/heap.json], %w[-p 123 -h heap.json]].each do |args|
        r = rbtrace(*args)
        expect(r.exitstatus).to eq(2)
        expect(r.stderr).to start_with("rbtrace: -h is --help; for a heap dump use --heapdump [FILE]\n")
      end
      r = rbtrace('--help')
      %w[--backtraces --backtrace --memory --heapdump --shapesdump --fork].each do |opt|
        expect(r.stdout).to include(opt)
      end
    end

    it 'refuses reports with other modes' do
      r = rbtrace('-p', '1', '--memory', '-e', '1')
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to include('--memory and -e cannot be combined')
    end
  end
end
