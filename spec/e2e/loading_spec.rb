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
end
