require_relative '../spec_helper'

# rbtrace --devmode -m ...: selectors follow their classes by name, as a
# development server reloads them (a new class object under the old name),
# and wait for classes that are not defined yet.
RSpec.describe 'dev mode (--devmode)' do
  # Reloads Widget (remove_const + a new class body) on SIGUSR1, like a
  # development server's code reloader; defines Late on SIGUSR2.
  APP_DEV = <<~'RUBY'.freeze
    SOURCE = <<~'SRC'
      class Widget
        def render(x); "<#{x}>"; end
      end
    SRC
    eval(SOURCE)
    Signal.trap('USR1') { $reload = true }
    Signal.trap('USR2') { $define_late = true }
    puts "ready"
    loop do
      if $reload
        $reload = false
        Object.send(:remove_const, :Widget)
        eval(SOURCE)
        puts "reloaded #{Widget.object_id}"
      end
      if $define_late
        $define_late = false
        eval("class Late; def run; :late; end; end")
        puts "late defined"
      end
      Widget.new.render(1)
      Late.new.run if defined?(Late)
      sleep 0.02
    end
  RUBY

  let(:app) { start_target(APP_DEV).ready }

  it 'keeps tracing a wrapped method after its class is reloaded' do
    r = trace(app, '--devmode', '-m', 'Widget#render') do |c|
      c.wait_for(/Widget#render </)
      Process.kill(:USR1, app.pid)
      app.wait_for(/^reloaded/)
      c.wait_for(/\(re\)defined: tracing Widget#render/, stream: :stderr)
      seen = c.stdout.scan('Widget#render <').size
      c.wait_for(->(out) { out.scan('Widget#render <').size > seen + 3 })
    end
    expect(r.stderr).to include('*** devmode: selectors follow their classes by name')
  end

  it 'keeps tracing a hooked selector (with expressions) after the reload' do
    trace(app, '--devmode', '-m', 'Widget#render(x)') do |c|
      c.wait_for(/Widget#render\(x=1\)/)
      Process.kill(:USR1, app.pid)
      app.wait_for(/^reloaded/)
      c.wait_for(/\(re\)defined/, stream: :stderr)
      seen = c.stdout.scan('Widget#render(x=1)').size
      c.wait_for(->(out) { out.scan('Widget#render(x=1)').size > seen + 3 })
    end
  end

  it 'without --devmode, loses the method after the reload (what --devmode is for)' do
    trace(app, '-m', 'Widget#render') do |c|
      c.wait_for(/Widget#render </)
      Process.kill(:USR1, app.pid)
      app.wait_for(/^reloaded/)
      sleep 0.3
      seen = c.stdout.scan('Widget#render <').size
      sleep 0.3
      expect(c.stdout.scan('Widget#render <').size).to eq(seen)
    end
  end

  it 'waits for a class that is not defined yet and traces it once it is' do
    r = trace(app, '--devmode', '-m', 'Late#run') do |c|
      c.wait_for(/Late#run: no such class or module Late yet; traced once it is defined/, stream: :stderr)
      Process.kill(:USR2, app.pid)
      c.wait_for(/^Late#run </)
    end
    expect(r.stderr).not_to include('*** error')
  end

  it 'refuses --devmode without -m' do
    r = rbtrace('-p', app.pid, '--devmode', '--gc')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include('--devmode applies to -m selectors')
  end

  # The notice of a reload is pushed by the app's thread, at the end of the
  # class body. With the ring full (a client that stopped reading), it is
  # dropped and counted, as the hooks' events are: it never waits for room
  # (it would stall the app, and a second such push waiting meanwhile
  # would land inside the first, or the rbtrace thread's, event).
  it 'never stalls a thread that reloads a class while the client reads nothing' do
    app = start_target(<<~'RUBY').ready
      SOURCE = "class Widget; def render(x); x; end; end"
      eval(SOURCE)
      puts "ready"
      Signal.trap('USR1') { $calm = true }
      # Fills the ring once the client stops; a call a millisecond once calm.
      Thread.new { loop { Process.pid; sleep 0.001 if $calm } }
      n = 0
      loop do
        Object.send(:remove_const, :Widget)
        eval(SOURCE)
        Widget.new.render(1)
        puts "reloaded #{n += 1}"
        sleep 0.1   # each reload wraps one more class: at most 256
      end
    RUBY
    client = start_client('-p', app.pid, '--devmode', '-m', 'Widget#render', 'Process.pid')
    client.attached
    client.wait_for(/\(re\)defined: tracing Widget#render/, stream: :stderr)
    while_client_stopped(app, client) do
      sleep 1.5 # the ring fills up
      before = app.drain.grep(/^reloaded/).size
      sleep 2
      after = app.drain.grep(/^reloaded/).size
      # Stalled, none (a push waited up to 10 s); running, a few a second
      # (the other thread holds the GVL for its time slices).
      expect(after - before).to be >= 2
    end
    expect(client.stderr).not_to match(/malformed|error/)
    expect(app).to be_alive
  end
end
