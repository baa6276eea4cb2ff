require_relative '../spec_helper'

RSpec.describe 'loading rbtrace' do
  it "require 'rbtrace' loads it; until someone attaches: one parked helper thread, no queue, no fd, no hook" do
    plain = start_target("puts 'ready'\nsleep", rbtrace: false).ready
    app = start_target("puts 'ready'\nsleep").ready
    expect(Dir.children("/proc/#{app.pid}/fd").size).to eq(Dir.children("/proc/#{plain.pid}/fd").size)
    # one more task than a plain Ruby: the parked helper thread
    expect(Dir.children("/proc/#{app.pid}/task").size).to eq(Dir.children("/proc/#{plain.pid}/task").size + 1)
    expect(File.read('/proc/sysvipc/msg')).not_to match(/^\s*#{0x52000000 | app.pid}\s/)
    r = rbtrace('-p', app.pid, '-e', 'Thread.list.map(&:name)')
    expect(r.stdout).to eq(%(>> Thread.list.map(&:name)\n=> [nil, "rbtrace", "rbtrace eval"]\n))
  end

  # The app's threads run at 0 unless it says otherwise; so do rbtrace's,
  # also when the thread that loads rbtrace runs at another priority.
  it 'the helper and an eval run at Thread#priority 0, as the app\'s threads do by default' do
    app = start_target("puts 'ready'\nsleep").ready
    code = 'Thread.list.map { |t| [t.name, t.priority] }'
    expect(rbtrace('-p', app.pid, '-e', code).stdout)
      .to eq(%(>> #{code}\n=> [[nil, 0], ["rbtrace", 0], ["rbtrace eval", 0]]\n))
    raised = start_target("Thread.current.priority = 2\nrequire 'rbtrace'\nputs 'ready'\nsleep", rbtrace: false).ready
    expect(rbtrace('-p', raised.pid, '-e', code).stdout)
      .to eq(%(>> #{code}\n=> [[nil, 2], ["rbtrace", 0], ["rbtrace eval", 0]]\n))
  end

  it 'RUBYOPT=-rrbtrace loads it' do
    app = start_target("puts 'ready'\nsleep", rbtrace: false, env: { 'RUBYOPT' => '-rrbtrace' }).ready
    expect(rbtrace('-p', app.pid, '-e', 'defined?(RBTrace::VERSION)').stdout).to eq(%(>> defined?(RBTrace::VERSION)\n=> "constant"\n))
  end

  # Ruby 4.0's Ruby::Box (RUBY_BOX=1): the app's code runs in a box that
  # loads its own copy of each extension, TMPDIR/_ruby_box_p<pid>_<n>_rbtrace+rbtrace.so,
  # removed once loaded. The client took that deleted copy for the original
  # rbtrace gem's library, and would not attach.
  it 'attaches to an app run with RUBY_BOX=1 (Ruby 4.0), and traces it' do
    skip "this Ruby (#{RUBY_VERSION}) has no Ruby::Box" unless defined?(Ruby::Box)
    app = start_target(<<~'RUBY', env: { 'RUBY_BOX' => '1' }).ready
      STDOUT.sync = true # in a box Kernel#puts writes to STDOUT, not to the box's $stdout (4.0.0)
      class Work
        def meth(x) = x * 2
      end
      puts "ready"
      loop { Work.new.meth(2); (raise "boom" rescue nil); sleep 0.02 }
    RUBY
    r = rbtrace('-p', app.pid, '-e', '[Ruby::Box.enabled?, Ruby::Box.current.inspect[/main/]]')
    expect(r.stdout).to eq(">> [Ruby::Box.enabled?, Ruby::Box.current.inspect[/main/]]\n=> [true, \"main\"]\n"), r.stderr
    out = trace(app, '-m', 'Work#meth', until_output: /(^Work#meth <\d+\.\d{6}>\n){3}/).stdout
    expect(out.lines).to all(match(/^Work#meth <\d+\.\d{6}>$/))
    out = trace(app, '--raise', until_output: /(^raise RuntimeError: boom at .*\n){2}/).stdout
    expect(out.lines).to all(match(/^raise RuntimeError: boom at -e:\d+$/))
    expect(app).to be_alive
  end
end
