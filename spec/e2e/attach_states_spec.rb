require_relative '../spec_helper'

# Attach works whatever the target is doing
# (docs/DESIGN.md, "Getting the job to run").
# Each state: attach, evaluate, get the answer.
RSpec.describe 'attaching whatever the target is doing' do
  STATES = {
    'busy in Ruby' => 'puts "ready"; x = 0; loop { x += 1 }',
    'in sleep' => 'puts "ready"; sleep',
    'blocked in an IO read' => 'r, _w = IO.pipe; puts "ready"; r.read',
    'blocked in IO.select' => 'r, _w = IO.pipe; puts "ready"; IO.select([r])',
    'waiting on Queue#pop' => 'q = Queue.new; puts "ready"; q.pop',
    'waiting on ConditionVariable#wait' => 'm = Mutex.new; c = ConditionVariable.new; puts "ready"; m.synchronize { c.wait(m) }',
    'in Thread#join' => 'puts "ready"; Thread.new { sleep }.join',
    'with many threads alive' => '50.times { Thread.new { sleep } }; 10.times { Thread.new { loop { 1 + 1 } } }; puts "ready"; sleep'
  }.freeze

  STATES.each do |state, code|
    it "answers an eval while #{state}" do
      app = start_target(code).ready
      sleep 0.1
      r = rbtrace('-p', app.pid, '-e', 'Process.pid')
      expect(r.stdout).to eq(">> Process.pid\n=> #{app.pid}\n"), "stderr: #{r.stderr}"
      expect(app).to be_alive
    end
  end

  # An eval's thread is marked as rbtrace's, and, where a busy thread is
  # asked for the GVL (Ruby 3.3+, RBTrace.handoff_asks?), has started (its
  # native thread sleeps, waiting for the GVL) before the helper lets the
  # GVL go (lib/rbtrace/evaluator.rb, ext/rbtrace/handoff.c): what those
  # two calls say, checked in a real process. (Its state cannot be read
  # afterwards: reading /proc lets the GVL go, and the new thread runs.)
  # Where nothing is asked, there is nothing to wait for: false at once.
  it 'an eval thread is rbtrace\'s and has started before the helper lets the GVL go' do
    app = start_target("puts 'ready'\nx = 0\nloop { x += 1 }").ready
    # Without Thread#native_thread_id (before Ruby 3.1) it cannot tell: false.
    code = 't = Thread.new { sleep }; RBTrace.handoff_own_thread(t); ' \
           'n = t.respond_to?(:native_thread_id) && RBTrace.handoff_asks?; ' \
           '[RBTrace.handoff_wait_started(t) == n, !n || t.native_thread_id.is_a?(Integer), t[:__rbtrace_own_thread]]'
    r = rbtrace('-p', app.pid, '-e', code)
    expect(r.stdout).to end_with("=> [true, true, true]\n"), "stdout: #{r.stdout}\nstderr: #{r.stderr}"
    r = rbtrace('-p', app.pid, '-e', 'RBTrace.handoff_own_thread(1)')
    expect(r.stdout).to include('TypeError: RBTrace.handoff_own_thread: expected a Thread')
  end

  # While another thread keeps the GVL, rbtrace (3.3+) asks the busy
  # thread to pass it on (ext/rbtrace/handoff.c); a main thread that sleeps
  # must never be woken for that, or its ConditionVariable#wait returns early.
  it 'never wakes a main thread waiting on a ConditionVariable, even while another thread is busy' do
    app = start_target(<<~'RUBY').ready
      Thread.new { x = 0; loop { x += 1 } }
      m = Mutex.new
      c = ConditionVariable.new
      puts "ready"
      m.synchronize { c.wait(m) }
      puts "woken"
    RUBY
    8.times do
      r = rbtrace('-p', app.pid, '-e', 'Process.pid')
      expect(r.stdout).to eq(">> Process.pid\n=> #{app.pid}\n"), "stderr: #{r.stderr}"
    end
    expect(app).to be_alive
    expect(app.drain).not_to include('woken')
  end

  # The GVL hand-off (3.3+) asks a busy thread to pass the GVL on: a
  # postponed job on whichever thread holds it (ext/rbtrace/handoff.c). It
  # may not swallow or delay that thread's own Thread#raise (here Timeout's).
  TIMEOUT_LOOP = <<~'RUBY'
    loop do
      begin
        Timeout.timeout(0.05) { x = 0; loop { x += 1 } }
      rescue Timeout::Error
        puts "timeout"
      end
    end
  RUBY

  {
    'main thread' => "require 'timeout'\nputs 'ready'\n#{TIMEOUT_LOOP}",
    'thread other than main' => "require 'timeout'\nThread.new do\n#{TIMEOUT_LOOP}end\nputs 'ready'\nsleep"
  }.each do |which, code|
    it "keeps a busy #{which}'s Timeout working while it attaches again and again" do
      app = start_target(code).ready
      5.times do
        r = rbtrace('-p', app.pid, '-e', '1 + 1')
        expect(r.stdout).to eq(">> 1 + 1\n=> 2\n"), "stderr: #{r.stderr}"
      end
      seen = app.drain.count('timeout')
      app.wait_for(->(_) { app.lines.count('timeout') >= seen + 5 }, timeout: 10)
      expect(app).to be_alive
    end
  end

  it 'traces while the main thread is blocked in a read and another thread works' do
    app = start_target(<<~'RUBY').ready
      r, _w = IO.pipe
      Thread.new { loop { Process.pid; sleep 0.02 } }
      puts "ready"
      r.read
    RUBY
    out = trace(app, '-m', 'Process.pid', until_output: /Process\.pid </).stdout
    expect(out).to match(/^Process\.pid <\d+\.\d{6}>$/)
  end
  # A C extension that keeps the GVL through a long call (sqlite3 1.4
  # waiting on a database lock), built into dir: read_holding_the_gvl(fd), a
  # read of one byte with the GVL held, and hold_once_attached(fd), the same
  # once RBTrace.attached? (till then it lets Ruby run interrupts: a
  # postponed job, a switch to another thread), which then raises "first"
  # at once (no other thread can run in between). Returns the .so's path.
  def build_gvl_holder(dir)
    require 'rbconfig'
    src = File.join(dir, 'hold_gvl.c')
    File.write(src, <<~'C')
      #include <ruby.h>
      #include <errno.h>
      #include <unistd.h>
      /* reads one byte, keeping the GVL; a signal does not end the wait */
      static VALUE hold(VALUE self, VALUE fd)
      {
          char c;
          while (read(NUM2INT(fd), &c, 1) < 0 && errno == EINTR) {}
          return Qnil;
      }
      static VALUE hold_once_attached(VALUE self, VALUE fd)
      {
          VALUE rbtrace = rb_const_get(rb_cObject, rb_intern("RBTrace"));
          while (!RTEST(rb_funcall(rbtrace, rb_intern("attached?"), 0))) rb_thread_check_ints();
          hold(self, fd);
          rb_raise(rb_eRuntimeError, "first");
      }
      void Init_hold_gvl(void)
      {
          rb_define_global_function("read_holding_the_gvl", hold, 1);
          rb_define_global_function("hold_once_attached", hold_once_attached, 1);
      }
    C
    so = File.join(dir, 'hold_gvl.so')
    cc = (RbConfig::CONFIG['CC'] || 'cc').split
    built = system(*cc, '-shared', '-fPIC', "-I#{RbConfig::CONFIG['rubyhdrdir']}",
                   "-I#{RbConfig::CONFIG['rubyarchhdrdir']}", '-o', so, src)
    expect(built).to be(true)
    so
  end

  # No Ruby code runs while such a call lasts, rbtrace's neither: the
  # attach cannot succeed. The client says what is likely, naming the
  # thread, instead of a bare timeout. The read is of a pipe nobody writes to.
  it 'names the thread that holds the GVL in a C call when the attach times out' do
    Dir.mktmpdir('rbtrace-gvl') do |dir|
      so = build_gvl_holder(dir)
      app = start_target(<<~RUBY).ready
        require #{so.inspect}
        r, _w = IO.pipe
        r.fcntl(4, 0) # F_SETFL: blocking, as a C library's own descriptor is
        Thread.new { loop { sleep 0.05 } }
        puts "ready"
        read_holding_the_gvl(r.fileno)
      RUBY
      sleep 0.2
      # The client's signals wake the read a moment (it restarts): the
      # thread may be seen on a CPU then, which the message says as such.
      # The sleeping thread, caught awake on a loaded machine, is named after
      # it (seen on Ruby 3.4 in CI).
      r = rbtrace('-p', app.pid, '--timeout', '1', '-e', '1')
      expect(r.exitstatus).to eq(1)
      state = '(is in the kernel, in \w+|is in system call \d+|is running on a CPU)'
      expect(r.stderr).to match(/process #{app.pid} did not (answer|connect back) within 1 s\. Likely cause: thread #{app.pid} \(ruby\) #{state}(; thread \d+ \(ruby\) #{state})*, while rbtrace's thread waits for Ruby's lock \(the GVL\): a C extension may hold it/)
      expect(r.stderr).to include("gdb -p #{app.pid}")
      expect(r.stderr).not_to include('(rbtrace)')
    end
  end

  # "attached" means the trace's modes are on: what the app does after the
  # line is traced (docs/DESIGN.md, "The wire protocol"). Here the app takes
  # the GVL for a C call the moment it is attached, until the spec lets go.
  # Mostly that is before rbtrace's thread has taken the modes: the client
  # says it has not started tracing, and says "attached" only once the call
  # ended and the modes were taken. When rbtrace's thread got the commands
  # first (it may, on any Ruby: both threads want the GVL as the attach
  # ends), "attached" comes at once, and the raise that ends the call must
  # be traced. The client used to say "attached" at the attach, and that
  # raise went unseen.
  it 'says "attached" only once the modes are on, and says why it waits when a C call holds the GVL' do
    Dir.mktmpdir('rbtrace-gvl') do |dir|
      so = build_gvl_holder(dir)
      fifo = File.join(dir, 'release')
      File.mkfifo(fifo)
      app = start_target(<<~RUBY).ready
        require #{so.inspect}
        release = File.open(#{fifo.inspect}, File::RDWR)
        puts "ready"
        begin; hold_once_attached(release.fileno); rescue RuntimeError; end
        1.step { |i| begin; raise "late \#{i}"; rescue RuntimeError; end; sleep 0.05 }
      RUBY
      client = start_client('-p', app.pid, '--raise', '--timeout', '1')
      waits = "process #{app.pid} has not started tracing within 1 s: rbtrace's thread waits for Ruby's lock " \
              '(the GVL), which a long C call may hold; still waiting (^C gives up)'
      client.wait_for(->(err) { err.include?(waits) || err.include?('*** attached') }, stream: :stderr)
      held_up = client.stderr.include?(waits)
      say held_up ? 'the C call held the modes up: the client said so' : "rbtrace's thread took the modes first"
      expect(client.stderr).not_to include('*** attached') if held_up
      File.open(fifo, File::WRONLY | File::NONBLOCK) { |f| f.write('!') }
      client.attached
      client.wait_for(/^raise RuntimeError: late \d+ at -e:\d+$/)
      expect(client.stop).to be_success
      expect(client.stdout).to include('raise RuntimeError: first at') unless held_up
      expect(client.stderr.lines.grep(/\*\*\* attached/).size).to eq(1)
    end
  end
end
