require_relative '../spec_helper'

# A process that replaces itself (exec) runs neither Ruby's end procs nor
# atexit: rbtrace removes its message queue before the exec instead, and
# the app's exec is the same method as untraced (issue 20, item 10).
RSpec.describe 'exec' do
  def queues(pid)
    RBTraceSpec::Queues.of(pid)
  end

  it 'leaves no queue behind when the app execs another program' do
    Dir.mktmpdir('rbtrace-exec') do |dir|
      flag = File.join(dir, 'go')
      app = start_target(<<~RUBY).ready
        puts "ready"
        sleep 0.01 until File.exist?(#{flag.inspect})
        exec('sleep', '30')
      RUBY
      expect(rbtrace('-p', app.pid, '-e', 'Process.pid').stdout).to eq(">> Process.pid\n=> #{app.pid}\n")
      expect(queues(app.pid).size).to eq(1)
      FileUtils.touch(flag)
      Timeout.timeout(10) { sleep 0.01 until File.readlink("/proc/#{app.pid}/exe").end_with?('/sleep') }
      expect(queues(app.pid)).to eq([])
    end
  end

  # What the app can see of exec, untraced and traced: the methods, and an
  # exec that fails (its exception and backtrace). After the failure the
  # traced app is attached to again: a new queue.
  PROBE = <<~'RUBY'.freeze
    shape = ->(m) { [m.owner, m.arity, m.parameters, m.source_location] }
    p [shape[method(:exec)], shape[Kernel.method(:exec)], shape[Process.method(:exec)],
       Kernel.private_instance_methods(false).include?(:exec)]
    %w[Kernel#exec Kernel.exec Process.exec].each do |how|
      begin
        case how
        when 'Kernel#exec' then exec('/nonexistent/rbtrace-spec')
        when 'Kernel.exec' then Kernel.exec('/nonexistent/rbtrace-spec', 'x')
        else Process.exec({ 'A' => '1' }, '/nonexistent/rbtrace-spec')
        end
      rescue SystemCallError => e
        p [how, e.class, e.message, e.backtrace]
      end
    end
    puts "ready"
    sleep
  RUBY

  it 'is the same method as untraced, and a failed exec fails the same way and keeps the app traceable' do
    plain = start_target(PROBE, rbtrace: false, ruby_args: ['-W2']).ready
    app = start_target(PROBE, ruby_args: ['-W2']).ready
    # ruby -e names its script "-e" in both; the lines are the same.
    expect(app.lines).to eq(plain.lines)
    expect(app.lines.size).to eq(5)
    expect(app.stderr).to eq(plain.stderr)
    expect(rbtrace('-p', app.pid, '-e', 'Process.pid').stdout).to eq(">> Process.pid\n=> #{app.pid}\n")
  end

  it 'leaves an exec the app defined before loading rbtrace as it is' do
    app = start_target(<<~'RUBY', rbtrace: false).ready
      module Kernel
        def exec(*args); puts "app's exec #{args.inspect}"; end
      end
      require 'rbtrace'
      exec('x')
      p method(:exec).source_location[1]
      puts "ready"
      sleep
    RUBY
    expect(app.lines.first(2)).to eq(['app\'s exec ["x"]', '3'])
  end

  it 'removes the queue before a failed exec, and the next attach makes a new one' do
    app = start_target(<<~'RUBY').ready
      Signal.trap('USR1') { exec('/nonexistent/rbtrace-spec') rescue puts "failed #{$!.class}" }
      puts "ready"
      loop { sleep } # Ruby 4.0.0 ends an untimed sleep after a trap's handler (Bug #21812)
    RUBY
    expect(rbtrace('-p', app.pid, '-e', '1').stdout).to eq(">> 1\n=> 1\n")
    before = queues(app.pid)
    expect(before.size).to eq(1)
    Process.kill(:USR1, app.pid)
    app.wait_for('failed Errno::ENOENT')
    expect(queues(app.pid)).to eq([])
    expect(rbtrace('-p', app.pid, '-e', '2').stdout).to eq(">> 2\n=> 2\n")
    expect(queues(app.pid).size).to eq(1)
    expect(queues(app.pid)).not_to eq(before)
  end
end
