require_relative '../spec_helper'

# A selector naming one method of one class is traced by a TracePoint on
# its bytecode (a Ruby method) or by a prepended wrapper (a C method,
# ext/rbtrace/wrapper.c); the program must not notice.
RSpec.describe 'method wrappers' do
  APP_WRAPPED = <<~'RUBY'.freeze
    class Calc
      def add(a, b = 1, *rest, scale: 1, **opts, &blk)
        r = (a + b + rest.sum) * scale
        blk ? blk.call(r) : r
      end

      def fail!(msg); raise(ArgumentError, msg); end
      def each_item; [1, 2, 3].each { |i| yield i }; end
      private def secret; :hidden; end
      def reveal; secret; end
    end

    def check
      c = Calc.new
      results = []
      results << c.add(1)
      results << c.add(1, 2, 3, 4, scale: 2)
      results << c.add(2) { |r| r * 10 }
      results << c.add(1, 2, extra: true)
      results << (begin; c.fail!("bad"); rescue ArgumentError => e; e.message; end)
      results << c.each_item { |i| break i * 100 if i == 2 }
      results << catch(:done) { c.each_item { |i| throw :done, i if i == 3 }; :never }
      results << c.reveal
      results << (begin; c.secret; rescue NoMethodError; :private_kept; end)
      results << Process.pid.class
      results
    end

    EXPECTED = [2, 20, 30, 3, "bad", 200, 3, :hidden, :private_kept, Integer]
    puts "ready"
    loop do
      r = check
      puts(r == EXPECTED ? "ok" : "MISMATCH #{r.inspect}")
      sleep 0.05
    end
  RUBY

  let(:app) { start_target(APP_WRAPPED).ready }

  it 'passes blocks, keywords, results, exceptions, break and throw through unchanged' do
    out = trace(app, '-m', 'Calc#add', 'Calc#fail!', 'Calc#each_item', 'Calc#secret', 'Process.pid',
                until_output: /Process\.pid <.*Process\.pid </m) { sleep 0.3 }.stdout
    expect(out).to match(/^Calc#add <\d+\.\d{6}>$/)
    expect(out).to match(/^Calc#fail! <\d+\.\d{6}>$/)        # return recorded though it raised
    expect(out).to match(/^Calc#each_item <\d+\.\d{6}>$/)    # and though it was left by break/throw
    expect(out).to match(/^Calc#secret <\d+\.\d{6}>$/)
    expect(out).to match(/^Process\.pid <\d+\.\d{6}>$/)
    app.drain
    expect(app.lines.grep(/MISMATCH/)).to be_empty
    expect(app.lines.count('ok')).to be > 5
  end

  it 'installs no global hook, prepends nothing for a Ruby method, and removes a C method\'s wrapper on detach' do
    r = trace(app, '-m', 'Calc#add', 'Process.pid', until_output: /Calc#add <.*Process\.pid </m)
    expect(r.stderr).not_to include('global VM hooks')
    owner = rbtrace('-p', app.pid, '-e', '[Calc.instance_method(:add).owner, Calc.ancestors.first, ' \
                                         'Process.singleton_class.ancestors.first.instance_methods(false)]')
    expect(owner.stdout).to end_with("=> [Calc, Calc, []]\n")
  end

  it 'keeps tracing through a GC compaction, and detaches cleanly after it' do
    app = start_target(<<~'RUBY').ready
      class Foo
        def bar; 1; end
      end
      puts "ready"
      $stdin.read(0)
      Signal.trap('USR1') { $compact = true }
      loop do
        if $compact
          $compact = false
          GC.verify_compaction_references(double_heap: true, toward: :empty)
          puts "compacted"
        end
        Foo.new.bar
        "x".upcase
        sleep 0.01
      end
    RUBY
    client = start_client('-p', app.pid, '-m', 'Foo#bar', 'String#upcase(self)')
    client.attached
    client.wait_for(/Foo#bar </)
    Process.kill(:USR1, app.pid)
    app.wait_for('compacted')
    seen = client.stdout.scan('Foo#bar <').size
    client.wait_for(->(out) { out.scan('Foo#bar <').size > seen + 5 && out.scan('upcase(self=').size > seen + 5 })
    expect(client.stop).to be_success
    sleep 0.2
    expect(app).to be_alive
  end

  it 'falls back to the hook for core operators, and says so' do
    skip RBTraceSpec::NO_C_CALL_OF_OPERATORS unless RBTraceSpec::C_CALL_OF_OPERATORS
    r = trace(app, '-m', 'Integer#+', until_output: /Integer#\+ </)
    expect(r.stderr).to include('global VM hooks')
    out = rbtrace('-p', app.pid, '-e', 'Integer.ancestors.first').stdout
    expect(out).to end_with("=> Integer\n")
  end

  # A C method named by its own name and through an alias (as
  # tracers/pg.tracer names pg 1.4's PG::Connection#exec and #async_exec;
  # Array#append is an alias of #push): a wrapper of each name sees the calls
  # through it, shown under the original name, with no global hook. With a
  # bare name (`push`, the global hook's), the hook shows every call and the
  # wrapper passes them on unseen. Each call is shown once, whatever the order.
  it 'shows each call of a C method once, through its own name or an alias' do
    aliased = start_target(<<~'RUBY').ready
      class Probe
        def self.step(name); end
      end
      list = []
      puts "ready"
      loop do
        Probe.step("push"); list.push(1)
        Probe.step("append"); list.append(2)
        list.clear
        Probe.step("done")
        sleep 0.05
      end
    RUBY
    [%w[Array#push Array#append], %w[Array#append Array#push], %w[push Array#push], %w[Array#push push]].each do |selectors|
      result = trace(aliased, '-m', 'Probe.step(name)', *selectors, until_output: /name="done"(?m:.*)name="done"/)
      out = result.stdout
      t = '<\d+\.\d{6}>'
      expect(out).to match(/^Probe\.step\(name="push"\) #{t}\n+Array#push #{t}\n+Probe\.step\(name="append"\)/),
                     "#{selectors.join(' ')}:\n#{out}"
      expect(out).to match(/^Probe\.step\(name="append"\) #{t}\n+Array#push #{t}\n+Probe\.step\(name="done"\)/),
                     "#{selectors.join(' ')}:\n#{out}"
      hooked = selectors.include?('push')
      expect(result.stderr.include?('global VM hooks')).to eq(hooked), "#{selectors.join(' ')}:\n#{result.stderr}"
    end
  end
end
