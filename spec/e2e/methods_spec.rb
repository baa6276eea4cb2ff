require_relative '../spec_helper'

# rbtrace -p PID -m SELECTOR...: every selector form, Ruby-defined and C
# methods, nesting and trace expressions, in the original output format.
RSpec.describe 'tracing methods (-m)' do
  APP = <<~'RUBY'.freeze
    class String
      def multiply_vowels(num)
        @test = 123
        gsub(/[aeiou]/) { |m| m * num }
      end
    end

    class Worker
      def outer
        Dir.chdir(__dir__ || "/") { Dir.pwd; inner }
      end

      def inner
        "inner".upcase
      end
    end

    puts "ready"
    loop do
      "hello".multiply_vowels(3)
      Process.pid
      Worker.new.outer
      sleep 0.05
    end
  RUBY

  let(:app) { start_target(APP).ready }

  it 'traces a C instance method (String#gsub) on one line with its duration' do
    out = trace(app, '-m', 'String#gsub', until_output: /String#gsub <\d+\.\d{6}>/).stdout
    expect(out).to match(/^String#gsub <\d+\.\d{6}>$/)
  end

  it 'traces a singleton method (Process.pid)' do
    out = trace(app, '-m', 'Process.pid', until_output: /Process\.pid </).stdout
    expect(out).to match(/^Process\.pid <\d+\.\d{6}>$/)
  end

  it 'traces every method of a name (sleep)' do
    out = trace(app, '-m', 'sleep', until_output: /Kernel#sleep </).stdout
    expect(out).to match(/^Kernel#sleep <0\.0[4-9]\d{4}>$/)
  end

  it 'traces every singleton method of a class (Dir.)' do
    out = trace(app, '-m', 'Dir.', until_output: /^Dir\.chdir <.*\n\n/m).stdout
    expect(out).to match(/^Dir\.chdir\n  Dir\.pwd <\d+\.\d{6}>\nDir\.chdir <\d+\.\d{6}>\n\n/m)
  end

  it 'traces every instance method of a class or module (Kernel#)' do
    out = trace(app, '-m', 'Kernel#', until_output: /Kernel#sleep </).stdout
    expect(out).to match(/^Kernel#sleep <\d+\.\d{6}>$/)
  end

  it 'nests traced calls: the parent line, its children indented, the parent again with the total' do
    out = trace(app, '-m', 'Worker#outer', 'Worker#inner', 'String#upcase',
                until_output: /^Worker#outer <.*\n/m).stdout
    expect(out).to match(/^Worker#outer\n  Worker#inner\n    String#upcase <\d+\.\d{6}>\n  Worker#inner <\d+\.\d{6}>\nWorker#outer <\d+\.\d{6}>\n\n/)
  end

  it 'shows trace expressions: self, method arguments, instance variables, any expression' do
    out = trace(app, '-m', 'String#multiply_vowels(self, self.length, num)', 'String#gsub(self, @test)',
                until_output: /String#gsub\(self=.*\n.*multiply_vowels <\d/m).stdout
    expect(out).to include('String#multiply_vowels(self="hello", self.length=5, num=3)')
    expect(out).to match(/^  String#gsub\(self="hello", @test=123\) <\d+\.\d{6}>$/)
  end

  it 'traces a method made by define_method with a block: its calls and returns, with and without expressions' do
    blocky = start_target(<<~'RUBY').ready
      class Blocky
        define_method(:twice) { |v| v * 2 }
        define_method(:half) { |v| v / 2 }
      end
      puts 'ready'
      loop { Blocky.new.twice(Blocky.new.half(8)); sleep 0.02 }
    RUBY
    out = trace(blocky, '-m', 'Blocky#twice', 'Blocky#half(v)', until_output: /Blocky#twice <.*\n.*Blocky#twice </m).stdout
    expect(out).to match(/^Blocky#half\(v=8\) <\d+\.\d{6}>$/)
    expect(out).to match(/^Blocky#twice <\d+\.\d{6}>$/)
  end

  it 'shows __source__ as the caller file:line' do
    out = trace(app, '-m', 'String#upcase(__source__)', until_output: /upcase\(/).stdout
    expect(out).to match(/String#upcase\(__source__="-e:15"\)/)
  end

  it 'shows an expression that raises as the class of the exception it raised' do
    out = trace(app, '-m', 'String#upcase(self.no_such_thing)', until_output: /upcase\(/).stdout
    expect(out).to match(/^ *String#upcase\(self\.no_such_thing=#<NoMethodError raised>\) <\d/)
  end

  # A NameError's message calls its receiver's #inspect: app code (a
  # Sidekiq::Processor's, 256 bytes of it on every call), never run. (A
  # bare `uow` the method does not have is left out at attach,
  # tracer_check_spec.rb; `self.uow` is a call, raising at each.)
  it "runs none of the app's code for an expression that raises, however its exception is made" do
    probe = start_target(<<~'RUBY').ready
      $calls = Hash.new(0)
      module Counting
        %i[inspect to_s message class name].each do |m|
          define_method(m) { |*a, **k| $calls[m] += 1; super(*a, **k) }
        end
      end
      class Probe
        include Counting
        def work(n); n; end
      end
      class Oops < StandardError; include Counting; end
      Oops.singleton_class.prepend(Counting)
      def Probe.boom; raise Oops, "secret"; end
      puts "ready"
      loop { Probe.new.work(1); puts "calls #{$calls.sort.inspect}"; sleep 0.05 }
    RUBY
    out = trace(probe, '-m', 'Probe#work(self.uow.queue_name, Probe.boom, n.nope, n)',
                until_output: /work\(.*\n(.*\n)*.*work\(/).stdout
    seen = probe.drain.size
    probe.wait_for(->(l) { probe.lines.size > seen + 2 && l.start_with?('calls') })
    expect(probe.drain.grep(/^calls/).uniq).to eq(['calls []'])
    expect(out).to match(/^Probe#work\(self\.uow\.queue_name=#<NoMethodError raised>, Probe\.boom=#<Oops raised>, n\.nope=#<NoMethodError raised>, n=1\) <\d/)
  end

  it 'truncates long values' do
    out = trace(app, '-m', 'String#upcase(self * 1000)', until_output: /upcase\(/).stdout
    value = out[/self \* 1000=(.*?)\) </, 1] || out[/self \* 1000=(.*)$/, 1]
    expect(value).to end_with('...')
    expect(value.bytesize).to be <= 256
  end

  it 'warns about a selector that names no such class or method and traces the rest' do
    result = trace(app, '-m', 'NoSuchClass#foo', 'String#no_such_method', 'Process.pid',
                   until_output: /Process\.pid </)
    expect(result.stderr).to include('NoSuchClass#foo: no such class or module NoSuchClass')
    expect(result.stderr).to include('String#no_such_method: no such method String#no_such_method')
    expect(result.stdout).to match(/^Process\.pid </)
  end

  it 'reports a C method that cannot be wrapped (frozen class), traces a Ruby one of such a class, and the others' do
    frozen = start_target(<<~'RUBY').ready
      Ice = Struct.new(:cube)     # Ice#cube: an accessor, not Ruby bytecode
      class Ice
        def melt; 1; end
      end
      Ice.freeze
      puts "ready"
      loop { Ice.new(1).cube; Ice.new(1).melt; sleep 0.02 }
    RUBY
    result = trace(frozen, '-m', 'sleep', 'Ice#cube', 'Ice#melt', until_output: /Ice#melt <.*Kernel#sleep </m)
    # Ruby's own FrozenError message: "frozen class" up to 3.4, "frozen Class" on 4.0.
    expect(result.stderr).to match(/^\*\*\* error: Ice#cube: can't modify frozen (class|Class): Ice \(not traced\)$/)
    expect(result.stdout).to match(/^Kernel#sleep </)
    expect(result.stdout).to match(/^Ice#melt </)
  end

  it 'never evaluates the class part of a selector' do
    marker = File.join(Dir.tmpdir, "rbtrace-pwned-#{Process.pid}")
    result = trace(app, '-m', "(File.write('#{marker}','x');String)#gsub", 'Process.pid',
                   until_output: /Process\.pid </)
    expect(File.exist?(marker)).to be false
    expect(result.stderr).to match(/not a selector/)
  end

  # ext/rbtrace/selector.c reads what lib/rbtrace/selector.rb answers by
  # member name, and checks it: an app that redefined it gets an error for
  # that selector (it read an Array by index, whatever it was, before).
  it 'reports a selector whose Ruby side answers something else (redefined by the app), and traces the rest' do
    odd = start_target(<<~'RUBY').ready
      module OddSelector
        def parse(text, check: false) = text.include?('Odd') ? nil : super
      end
      RBTrace::Selector.singleton_class.prepend(OddSelector)
      puts "ready"
      loop { Process.pid; sleep 0.02 }
    RUBY
    result = trace(odd, '-m', 'Odd#x', 'Process.pid', until_output: /Process\.pid </)
    expect(result.stderr).to include('Odd#x: RBTrace::Selector.parse gave a NilClass, not a ' \
                                     'RBTrace::Selector::Parsed')
    expect(result.stdout).to match(/^Process\.pid </)
    expect(odd).to be_alive
  end

  it 'survives a detach while a trace expression has given up the GVL' do
    slow = start_target(<<~'RUBY').ready
      class Slow
        def call; :done; end
      end
      puts "ready"
      loop { puts Slow.new.call }
    RUBY
    client = start_client('-p', slow.pid, '-m', 'Slow#call(sleep(0.3))')
    client.attached
    sleep 0.4
    expect(client.stop).to be_success
    sleep 0.5
    expect(slow).to be_alive
    expect(slow.drain.last).to eq('done')
  end

  it 'leaves the app running correctly after detach' do
    trace(app, '-m', 'String#gsub', until_output: /gsub/)
    n = app.lines.size
    sleep 0.3
    expect(app).to be_alive
    expect(app.drain.size).to be >= n
  end

  it "shows none of rbtrace's own calls: a hooked selector's hook goes on after the later selectors are parsed" do
    skip RBTraceSpec::NO_C_CALL_OF_OPERATORS unless RBTraceSpec::C_CALL_OF_OPERATORS
    # Integer#+ cannot be wrapped (an operator of a core class): the global
    # hook traces it. Parsing the selectors after it, in the app, makes
    # calls of Integer#+ of rbtrace's own that must not show.
    app = start_target(<<~'RUBY').ready
      puts "ready"
      loop { 3 + 4; "ab".upcase; sleep 0.05 }
    RUBY
    r = trace(app, '-m', 'Integer#+(self)', 'String#upcase(self)', 'Kernel#sleep',
              until_output: ->(out) { out.scan('Kernel#sleep <').size >= 3 })
    sums = r.stdout.lines.grep(/Integer#\+/)
    expect(sums).not_to be_empty
    expect(sums).to all(match(/\AInteger#\+\(self=3\) </))
  end

  it 'traces a Ruby method with expressions by a TracePoint on it alone, removed on detach' do
    enabled = 'ObjectSpace.each_object(TracePoint).count(&:enabled?)'
    r = trace(app, '-m', 'String#multiply_vowels(num)', until_output: /multiply_vowels\(num=3\)/)
    expect(r.stdout).to match(/^String#multiply_vowels\(num=3\) <\d+\.\d{6}>$/)
    expect(r.stderr).not_to include('global VM hooks')
    after = rbtrace('-p', app.pid, '-e', enabled)
    expect(after.stdout).to eq(">> #{enabled}\n=> 0\n")
  end
end
