require_relative '../spec_helper'

RSpec.describe 'firehose (-f)' do
  # The hook's quick way (a method met lately, the TSC) and the way where the
  # clock needs a call (no TSC, or its anchor due) must give the same trace.
  [{}, { 'RBTRACE_CLOCK' => 'clock_gettime' }].each do |env|
    it "shows every method call in the process, nested#{env.empty? ? '' : ' (clock_gettime)'}" do
      skip RBTraceSpec::NO_C_CALL_OF_OPERATORS unless RBTraceSpec::C_CALL_OF_OPERATORS
      app = start_target(<<~'RUBY', env: env).ready
        class Shop
          def buy(n); price(n) * 2; end
          def price(n); n.to_s.size; end
        end
        puts "ready"
        loop { Shop.new.buy(42); sleep 0.05 }
      RUBY
      out = trace(app, '-f', until_output: /^Shop#buy <.*^Kernel#sleep <0\.0/m).stdout
      expect(out).to match(/^Shop#buy\n  Shop#price\n    Integer#to_s <\d+\.\d{6}>\n    String#size <\d+\.\d{6}>\n  Shop#price <\d+\.\d{6}>\n  Integer#\* <\d+\.\d{6}>\nShop#buy <\d+\.\d{6}>\n/)
      expect(out).to match(/^Kernel#sleep <0\.0/)
    end
  end

  # Operators' IDs are their characters (+ 43, - 45, * 42, / 47): they must
  # each keep their own name among the recent methods.
  it 'names each operator of a loop right' do
    skip RBTraceSpec::NO_C_CALL_OF_OPERATORS unless RBTraceSpec::C_CALL_OF_OPERATORS
    app = start_target(<<~'RUBY').ready
      def calc(a); (a[0] + 7 - 3) * 2 / 4 % 5; end
      puts "ready"
      loop { calc([1]); sleep 0.02 }
    RUBY
    out = trace(app, '-f', until_output: /^Object#calc <.*^Object#calc </m).stdout
    expect(out).to match(%r{^Object#calc\n  Array#\[\] <[\d.]+>\n  Integer#\+ <[\d.]+>\n  Integer#- <[\d.]+>\n  Integer#\* <[\d.]+>\n  Integer#/ <[\d.]+>\n  Integer#% <[\d.]+>\nObject#calc <})
  end
end

# The examples below have the app make its calls only once the client is
# attached: after setup, the app waits for a file the client's side makes.
module FirehoseGate
  def gated_target(body, setup: '')
    go = File.join(Dir.mktmpdir('rbtrace-gate'), 'go')
    app = start_target(<<~RUBY).ready
      #{setup}
      puts "ready"
      sleep 0.01 until File.exist?(#{go.inspect})
      #{body}
    RUBY
    [app, go]
  end

  # `rbtrace -f -n` attached to app, then the app let go.
  def start_firehose(app, go)
    client = start_client('-p', app.pid, '-f', '-n')
    client.attached
    FileUtils.touch(go)
    client
  end
end

RSpec.describe 'firehose over more methods than the method table holds' do
  include FirehoseGate

  # The target names each (class, method) once and keeps up to 24,576 pairs
  # (RBTRACE_METHOD_SLOTS_MAX x 3/4); past that it starts afresh and tells
  # the client to drop the old names. 30,000 methods called in order must
  # still each show under its own name, once, in order.
  it 'names every method right after the table starts afresh' do
    app, go = gated_target(<<~'RUBY', setup: <<~'SETUP')
      i = 0
      while i < 30_000
        b.__send__(names[i])
        i += 1
        sleep 0.002 if i % 500 == 0   # the client keeps up: nothing lost
      end
      puts "done"
      sleep
    RUBY
      class Big; end
      names = Array.new(30_000) { |i| :"m#{i}" }
      names.each { |n| Big.class_eval("def #{n}; nil; end") }
      b = Big.new
    SETUP
    client = start_firehose(app, go)
    app.wait_for('done', timeout: 60)
    client.wait_for(/Big#m29999\b/, timeout: 30)
    client.stop(:INT)
    out = client.stdout
    expect(out).not_to match(/events lost/)
    expect(out).not_to match(/\(unknown\)/)
    expect(out.scan(/Big#m(\d+)\b/).flatten.map(&:to_i)).to eq((0...30_000).to_a)
  end
end

RSpec.describe 'firehose over classes that come and go' do
  include FirehoseGate

  # The target names a (class, method) pair once, by the class's address.
  # A class freed while traced must not leave its name to a class that GC
  # later puts at the same address: each is named by its own (this showed
  # K1#go for K3, K5, K7... before the session kept its named classes).
  it 'names each class by its own name, though freed ones leave their addresses' do
    app, go = gated_target(<<~'RUBY')
      60.times do |i|
        k = Class.new { def go; nil; end }
        Object.const_set("K#{i}", k)
        k.new.go
        Object.send(:remove_const, "K#{i}")
        k = nil
        GC.start
      end
      puts "done"
      sleep
    RUBY
    client = start_firehose(app, go)
    app.wait_for('done', timeout: 60)
    client.wait_for(/K59#go\b/, timeout: 30)
    client.stop(:INT)
    expect(client.stdout.scan(/^\s*(\S+)#go\b/).flatten).to eq(Array.new(60) { |i| "K#{i}" })
  end
end

RSpec.describe 'firehose over objects with singleton methods' do
  include FirehoseGate

  # A method defined on one object belongs to its singleton class, which
  # holds the object: the target must not keep such classes (and so their
  # objects, with all they hold) for the names it sent.
  it 'names them after their class and lets the objects go' do
    app, go = gated_target(<<~'RUBY', setup: 'class Payload; def initialize; @data = "x" * 100_000; end; end')
      200.times do
        o = Payload.new
        def o.hi; nil; end
        o.hi
      end
      GC.start
      puts "live #{ObjectSpace.each_object(Payload).count}"
      sleep
    RUBY
    client = start_firehose(app, go)
    live = Integer(app.wait_for(/^live \d+/, timeout: 60)[/live (\d+)/, 1])
    client.stop(:INT)
    expect(client.stdout.scan(/^\s*Payload\.hi$/).size).to be >= 200
    expect(live).to be < 20
  end
end
