require_relative '../spec_helper'

# Attach works whatever the target is doing (DESIGN.md, "Getting the job
# to run"). Each state: attach, evaluate, get the answer.
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
end
