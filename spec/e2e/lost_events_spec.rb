require_relative '../spec_helper'

RSpec.describe 'a client that falls behind' do
  it 'never blocks the app: events are dropped, counted and reported' do
    app = start_target(<<~'RUBY').ready
      $n = 0
      puts "ready"
      Thread.new { loop { sleep 0.1; puts "progress #{$n}" } }
      loop { $n += 1; Process.pid }
    RUBY
    client = start_client('-p', app.pid, '-m', 'Process.pid')
    client.attached
    Process.kill(:STOP, client.pid)
    begin
      # While the client is stopped the app keeps going.
      first = app.wait_for(/progress/)[/\d+/].to_i
      sleep 1
      last = app.drain.grep(/progress/).last[/\d+/].to_i
      expect(last).to be > first
    ensure
      Process.kill(:CONT, client.pid)
    end
    client.wait_for(/\*\*\* \d+ events lost/)
    expect(client.stop).to be_success
  end
end
