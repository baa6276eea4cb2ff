require_relative '../spec_helper'

# Selectors and trace expressions checked once, at attach, against the
# methods the process defines (lib/rbtrace/expression_check.rb): an
# expression naming a local the method does not have is reported with the
# library's version and left out, never evaluated per call; a missing
# method is reported with its class's library's version.
RSpec.describe 'selectors and expressions checked at attach' do
  # A gem of the app's, activated as RubyGems does (Gem.loaded_specs).
  MYLIB_SOURCE = <<~'RUBY'.freeze
    module Mylib
      class Worker
        def run(job, retries = 0); job; end
      end
    end
  RUBY

  CHECK_APP = <<~'RUBY'.freeze
    Gem::Specification.load(ENV.fetch('MYLIB_SPEC')).activate
    require 'mylib'

    class Foo
      def bar(x); tmp = x * 10; tmp; end
      def helper; :helped; end
    end
    class Sub < Foo
      def only_sub; :sub; end
    end
    class Ghost
      def method_missing(name, *args)
        name == :phantom ? :boo : super
      end

      def respond_to_missing?(name, priv = false)
        name == :phantom || super
      end

      def go(a); a; end
    end
    module Mixin
      def mixed(a); a; end
    end
    class Mixer
      include Mixin
      def from_includer; :mixer; end
    end

    puts "ready"
    said = false
    loop do
      Sub.new.bar(1)
      Ghost.new.go(2)
      Mixer.new.mixed(3)
      Mylib::Worker.new.run(:job)
      "a".upcase
      if $evaluated && !said
        puts "evaluated"
        said = true
      end
      sleep 0.02
    end
  RUBY

  let(:dir) { Dir.mktmpdir('rbtrace-check') }
  let(:app) do
    FileUtils.mkdir_p(File.join(dir, 'gems', 'mylib-1.2.3', 'lib'))
    FileUtils.mkdir_p(File.join(dir, 'specifications'))
    File.write(File.join(dir, 'gems', 'mylib-1.2.3', 'lib', 'mylib.rb'), MYLIB_SOURCE)
    spec = File.join(dir, 'specifications', 'mylib-1.2.3.gemspec')
    File.write(spec, <<~SPEC)
      Gem::Specification.new do |s|
        s.name = 'mylib'
        s.version = '1.2.3'
        s.summary = 'a library of the app'
        s.authors = ['rbtrace specs']
        s.files = ['lib/mylib.rb']
      end
    SPEC
    start_target(CHECK_APP, env: { 'MYLIB_SPEC' => spec }).ready
  end

  after { FileUtils.rm_rf(dir) }

  def tracer_file(text)
    path = File.join(dir, 'check.tracer')
    File.write(path, text)
    path
  end

  # Traces until the stdout shows pattern count times, then stops like ^C.
  def trace_calls(*args, pattern:, count: 3)
    client = start_client('-p', app.pid, *args)
    client.attached
    client.wait_for(->(out) { out.scan(pattern).size >= count })
    status = client.stop(:INT)
    RBTraceSpec::Result.new(client.stdout, client.stderr, status)
  end

  it 'leaves out, and reports once, an expression naming a parameter the method does not have' do
    path = tracer_file("Foo#bar(y, x)\nMixin#mixed(gone)\n")
    result = trace_calls('-c', path, pattern: /^Foo#bar/, count: 5)
    message = '*** error: Foo#bar: y is neither a parameter of Foo#bar(x) nor a method of its receiver: ' \
              'expression "y" left out (Foo#bar is traced without it); correct it to use the method\'s parameters'
    expect(result.stderr).to include(message)
    expect(result.stderr.scan('expression "y"').size).to eq(1)
    expect(result.stdout).to match(/^Foo#bar\(x=1\) <\d+\.\d{6}>$/)
    # A module's method: no class that includes it has the name either.
    expect(result.stderr).to include('*** error: Mixin#mixed: gone is neither a parameter of Mixin#mixed(a) nor')
    expect(result.stdout).to match(/^Mixin#mixed <\d+\.\d{6}>$/)
    expect(result.stdout).not_to include('y=')
    expect(result.stdout).not_to include('NameError')
  end

  it 'never evaluates an expression it left out' do
    # On its own, ($evaluated = true) would run before y raised.
    result = trace_calls('-m', 'Foo#bar(($evaluated = true) && y)', pattern: /^Foo#bar/, count: 5)
    # The app says "evaluated" within one loop (20 ms) of the first evaluation.
    sleep 0.2
    expect(app.drain).not_to include('evaluated')
    expect(result.stdout).to match(/^Foo#bar <\d+\.\d{6}>$/)
    expect(result.stderr).to include('*** error: Foo#bar: y is neither a parameter of Foo#bar(x)')
  end

  it "names the version of the gem that defines the method, and the method's parameters" do
    path = tracer_file("Mylib::Worker#run(uow.queue, job)\nMylib::Worker#nope\n")
    result = trace_calls('-c', path, pattern: /^Mylib::Worker#run/)
    expect(result.stderr).to include('*** error: Mylib::Worker#run: uow is neither a parameter of ' \
                                     'Mylib::Worker#run(job, retries = ...) in mylib 1.2.3 nor a method of its receiver: ' \
                                     'expression "uow.queue" left out')
    expect(result.stderr).to include('*** error: Mylib::Worker#nope: no such method Mylib::Worker#nope ' \
                                     'in mylib 1.2.3 (not traced)')
    expect(result.stdout).to match(/^Mylib::Worker#run\(job=:job\) <\d+\.\d{6}>$/)
  end

  it "names Ruby's version for a core class, and what a C method's expressions can use" do
    result = trace_calls('-m', 'String#upcase(zzz, length)', 'String#nope', pattern: /^String#upcase/)
    expect(result.stderr).to include("*** error: String#upcase: zzz is not a method of String#upcase's receiver " \
                                     "(a C method in Ruby #{RUBY_VERSION}: its arguments have no names, its " \
                                     'expressions run on the receiver): expression "zzz" left out (String#upcase ' \
                                     'is traced without it); correct it to use the methods of its receiver')
    expect(result.stderr).to include("*** error: String#nope: no such method String#nope in Ruby #{RUBY_VERSION} " \
                                     '(not traced)')
    expect(result.stdout).to match(/^String#upcase\(length=1\) <\d+\.\d{6}>$/)
  end

  it "keeps what may work: the method's locals, methods of its receivers below it, method_missing, the rest" do
    path = tracer_file(<<~TRACER)
      Foo#bar(x, tmp, helper, only_sub, @none, self.class, Foo, __source__, x.nope)
      Ghost#go(a, phantom)
      Mixin#mixed(a, from_includer)
    TRACER
    result = trace_calls('-c', path, pattern: /^Mixin#mixed/)
    expect(result.stderr).not_to include('error')
    expect(result.stdout).to match(/^Foo#bar\(x=1, tmp=nil, helper=:helped, only_sub=:sub, @none=nil, self\.class=Sub, /)
    expect(result.stdout).to include('x.nope=#<NoMethodError raised>')
    expect(result.stdout).to match(/^Ghost#go\(a=2, phantom=:boo\) <\d+\.\d{6}>$/)
    expect(result.stdout).to match(/^Mixin#mixed\(a=3, from_includer=:mixer\) <\d+\.\d{6}>$/)
  end

  it 'shows a method named by two lines once per call, with the expressions of both' do
    # String#upcase, a C method, alone would be wrapped: not as well as hooked.
    path = tracer_file("Foo#bar(x)\nFoo#bar(x * 2, x)\nString#upcase\nString#upcase(self)\nString#upcase(length)\n")
    result = trace_calls('-c', path, pattern: /^String#upcase\(/)
    expect(result.stdout).to match(/^Foo#bar\(x=1, x \* 2=2\) <\d+\.\d{6}>$/)
    expect(result.stdout).to match(/^String#upcase\(self="a", length=1\) <\d+\.\d{6}>$/)
    expect(result.stdout).not_to match(/^Foo#bar\(x=1\) </)
    expect(result.stdout).not_to match(/^\s*String#upcase(?:\(self="a"\))? </)
    expect(result.stdout).not_to match(/^  String#upcase/)
  end

  # Differential: what the app's own methods see of an attach whose check
  # rejects (and so looks at every class below the owners) is what they see
  # of an attach of the same selectors with nothing to check.
  it "calls none of the app's methods to check, and loads nothing" do
    probe = start_target(<<~'RUBY').ready
      $seen = Hash.new(0)
      module Spy
        %i[method_defined? private_method_defined? instance_method instance_methods <= < subclasses name
           const_source_location singleton_class? ancestors respond_to? method_missing inspect].each do |m|
          define_method(m) { |*a, &b| $seen[m] += 1; super(*a, &b) }
        end
      end
      class Foo
        def bar(x); x; end
      end
      class Sub < Foo; end
      module Mixin
        def mixed(a); a; end
      end
      class Mixer; include Mixin; end
      [Foo, Sub, Mixin, Mixer].each { |mod| mod.singleton_class.prepend(Spy) }
      puts "ready"
      loop do
        Sub.new.bar(1)
        Mixer.new.mixed(2)
        puts "seen #{$seen.sort.map { |m, n| "#{m}=#{n}" }.join(' ')} features=#{$LOADED_FEATURES.size}"
        sleep 0.02
      end
    RUBY
    # The app's counts once an attach with these selectors is over, and
    # the client's stderr.
    counts_after = lambda do |*selectors|
      result = trace(probe, '-m', *selectors, until_output: /^Mixin#mixed.*\n(?:.*\n)*Mixin#mixed/)
      count = probe.drain.size
      probe.wait_for(->(_) { probe.lines.size > count + 1 })
      line = probe.lines.grep(/^seen/).last
      [line.split[1..].to_h { |pair| pair.split('=') }.transform_values(&:to_i), result.stderr]
    end
    before = probe.wait_for(/^seen/).split[1..].to_h { |pair| pair.split('=') }.transform_values(&:to_i)
    plain, = counts_after.call('Foo#bar', 'Mixin#mixed')
    checked, stderr = counts_after.call('Foo#bar(y)', 'Mixin#mixed(gone)')
    expect(stderr).to include('Foo#bar: y is neither').and include('Mixin#mixed: gone is neither')
    delta = ->(now, was) { now.to_h { |k, v| [k, v - was.fetch(k, 0)] } }
    expect(delta.call(checked, plain)).to eq(delta.call(plain, before))
    expect(checked['features']).to eq(before['features'])
  end

  it 'names the library of the namespace of a class that is not defined' do
    path = tracer_file("Mylib::Gone#a\nMylib::Gone#b\nMylib::Lost#c\nNowhere::Lost#d\nFoo#bar\n")
    result = trace_calls('-c', path, pattern: /^Foo#bar </, count: 1)
    expect(result.stderr).to include("*** error: Mylib::Gone is not loaded in process #{app.pid} (no such class " \
                                     'or module; Mylib is mylib 1.2.3): its 2 selectors are not traced')
    expect(result.stderr).to include('*** error: Mylib::Lost#c: no such class or module Mylib::Lost ' \
                                     '(Mylib is mylib 1.2.3) (not traced)')
    expect(result.stderr).to include('*** error: Nowhere::Lost#d: no such class or module Nowhere::Lost (not traced)')
  end
end
