require_relative '../spec_helper'

RSpec.describe 'fork' do
  def queue_exists?(pid)
    File.readlines('/proc/sysvipc/msg').drop(1).any? { |l| l.split[0].to_i == (0x52000000 | pid) }
  end

  it 'a forked child is traceable on its own, and its exit leaves the parent\'s queue' do
    skip RBTraceSpec::NO_FORK_HOOK unless RBTraceSpec::FORK_HOOK
    app = start_target(<<~'RUBY').ready
      child = fork { $stdout.puts "child #{Process.pid}"; loop { Process.pid; sleep 0.02 } }
      puts "ready"
      $stdin.read(0)
      Signal.trap('USR1') { Process.kill(:TERM, child); Process.wait(child); puts "reaped" }
      loop { sleep 0.05 }
    RUBY
    child = app.wait_for(/child \d+/)[/\d+/].to_i
    expect(rbtrace('-p', app.pid, '-e', 'Process.pid').stdout).to eq(">> Process.pid\n=> #{app.pid}\n")
    r = rbtrace('-p', child, '-e', '[Process.pid, RBTrace.helper.alive?]')
    expect(r.stdout).to eq(">> [Process.pid, RBTrace.helper.alive?]\n=> [#{child}, true]\n")
    expect(queue_exists?(child)).to be true
    Process.kill(:USR1, app.pid)
    app.wait_for('reaped')
    expect(queue_exists?(child)).to be false
    expect(queue_exists?(app.pid)).to be true
    expect(rbtrace('-p', app.pid, '-e', '1').stdout).to eq(">> 1\n=> 1\n")
  end

  it 'a child forked while its parent is traced starts detached, without the writer\'s eventfd' do
    skip RBTraceSpec::NO_FORK_HOOK unless RBTraceSpec::FORK_HOOK
    app = start_target(<<~'RUBY').ready
      def eventfds
        Dir.children('/proc/self/fd').count { |fd| File.readlink("/proc/self/fd/#{fd}").include?('eventfd') rescue false }
      end
      puts "ready"
      puts "eventfds untraced=#{eventfds}"
      $stdin.read(0)
      Signal.trap('USR1') { $go = true }
      loop do
        if $go
          $go = false
          puts "eventfds traced=#{eventfds}"
          pid = fork { puts "eventfds child=#{eventfds}"; 5.times { Process.pid; sleep 0.02 }; exit!(RBTrace.attached? ? 1 : 0) }
          Process.wait(pid)
          puts "child attached=#{!$?.success?}"
        end
        Process.pid
        sleep 0.02
      end
    RUBY
    r = trace(app, '-m', 'Process.pid', until_output: /Process\.pid </) do
      Process.kill(:USR1, app.pid)
      app.wait_for(/child attached=/)
    end
    expect(app.lines).to include('child attached=false')
    expect(r).to be_success
    counts = app.lines.grep(/^eventfds /).to_h { |l| l.split.last.split('=').then { |k, v| [k, Integer(v)] } }
    # The writer's eventfd (writer.c) is open while traced, and the child closes its copy.
    expect(counts['traced']).to eq(counts['untraced'] + 1)
    expect(counts['child']).to eq(counts['untraced'])
  end

  it 'a child forked without a helper (--fork\'s middle process) has none, and its own child has one' do
    skip RBTraceSpec::NO_FORK_HOOK unless RBTraceSpec::FORK_HOOK
    app = start_target(<<~'RUBY').ready
      r, w = IO.pipe
      middle = RBTrace.fork_without_helper do
        r.close
        w.puts "middle #{Thread.list.size} #{RBTrace.helper.inspect}"
        copy = fork { w.puts "copy #{Thread.list.size} #{RBTrace.helper.alive?}"; exit!(0) }
        Process.wait(copy)
        exit!(0)
      end
      w.close
      Process.wait(middle)
      puts r.read, "parent #{Thread.current[:rbtrace_fork_without_helper].inspect}"
      puts "ready"
      loop { sleep 0.05 }
    RUBY
    expect(app.lines).to include('middle 1 nil', 'copy 2 true', 'parent nil')
    expect(rbtrace('-p', app.pid, '-e', 'RBTrace.helper.alive?').stdout).to end_with("=> true\n")
  end

  it 'a daemonized process (Process.daemon) is traceable' do
    pidfile = File.join(Dir.tmpdir, "rbtrace-daemon-#{Process.pid}")
    FileUtils.rm_f(pidfile)
    start_target(<<~RUBY)
      Process.daemon(true, true)
      File.write(#{pidfile.inspect}, Process.pid.to_s)
      sleep 30
    RUBY
    Timeout.timeout(10) { sleep 0.05 until File.size?(pidfile) }
    daemon = File.read(pidfile).to_i
    begin
      r = rbtrace('-p', daemon, '-e', '[Process.pid, RBTrace.helper.alive?]')
      expect(r.stdout).to eq(">> [Process.pid, RBTrace.helper.alive?]\n=> [#{daemon}, true]\n")
    ensure
      Process.kill(:KILL, daemon) rescue nil
      FileUtils.rm_f(pidfile)
    end
  end
end
