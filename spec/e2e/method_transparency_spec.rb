require_relative '../spec_helper'

# A traced method is the same method (issue 20, items 1 and 2): a Ruby
# method is traced by a TracePoint on its own bytecode, with no frame of
# rbtrace's in its calls; a C method by a wrapper of the original's arity.
# Differential: the app runs the same probe before the client attaches and
# while it is attached, and the two must be equal.
RSpec.describe 'traced methods are unchanged' do
  PROBE_APP = <<~'RUBY'.freeze
    class Base
      def greet(name, greeting: 'hi')
        "#{greeting} #{name}"
      end
    end

    class Probe < Base
      def greet(name, greeting: 'hi')
        super + '!'
      end
      alias_method :hi, :greet

      def depth(n)
        n.zero? ? 0 : 1 + depth(n - 1)
      end

      def where
        [caller.size, caller_locations(0).map(&:label)]
      end

      def boom
        raise ArgumentError, 'boom'
      end

      define_method(:dyn) { |a, b = 2| a + b }
      attr_reader :attr
    end

    def introspect(um)
      [um.arity, um.parameters, um.source_location, um.owner, um.super_method&.owner,
       um.original_name, um.name]
    end

    # What the app sees of its methods, and what they do.
    def probe
      pr = Probe.new
      {
        ruby: %i[greet hi depth where boom dyn].map { |m| introspect(Probe.instance_method(m)) },
        base: introspect(Base.instance_method(:greet)),
        bound: [pr.method(:greet).arity, pr.method(:greet).super_method.owner, pr.method(:dyn).parameters],
        calls: [pr.greet('a'), pr.hi('b', greeting: 'yo'), pr.dyn(1), pr.depth(50)],
        where: pr.where,
        boom: (begin; pr.boom; rescue => e; [e.class, e.message, e.backtrace, e.backtrace_locations.map(&:label)]; end),
        c: [Hash.instance_method(:key?), Process.method(:pid), String.instance_method(:center),
            Probe.instance_method(:attr)].map { |m| [m.arity, m.parameters] },
        c_calls: [{ 1 => 2 }.key?(1), Process.pid == $$, 'x'.center(3, '*'), pr.attr]
      }.inspect
    end

    puts "ready"
    n = 0
    loop do
      puts "probe #{n += 1} #{probe}"
      sleep 0.1
    end
  RUBY

  SELECTORS = ['Probe#greet', 'Base#greet', 'Probe#depth', 'Probe#where', 'Probe#boom', 'Probe#dyn',
               'Hash#key?', 'Process.pid', 'String#center', 'Probe#attr'].freeze

  # The probe the app printed before any client attached, and one it
  # computed whole while the client was attached (and had shown calls).
  def probes_untraced_and_traced(app, client_args)
    untraced = app.wait_for(/\Aprobe 1 /).sub(/\Aprobe 1 /, '')
    client = start_client('-p', app.pid, *client_args)
    client.attached
    client.wait_for(/Probe#depth <.*Probe#boom </m)
    app.drain
    last = app.lines.grep(/\Aprobe /).last[/\Aprobe (\d+)/, 1].to_i
    line = app.wait_for(/\Aprobe #{last + 2} /)
    expect(client.stop).to be_success
    [untraced, line.sub(/\Aprobe \d+ /, ''), client]
  end

  it 'keeps arity, parameters, source_location, owner, super, caller depth and backtraces of traced methods' do
    app = start_target(PROBE_APP).ready
    untraced, traced, client = probes_untraced_and_traced(app, ['-m', *SELECTORS])
    expect(client.stderr).not_to include('global VM hooks')
    expect(traced).to eq(untraced)
  end

  it 'keeps a wrapped C method\'s arity and parameters those of the original' do
    app = start_target(PROBE_APP).ready
    untraced, traced, = probes_untraced_and_traced(app, ['-m', *SELECTORS])
    # Hash#inspect: {:c=>...} before Ruby 3.4, {c: ...} from 3.4 on
    c_of = ->(probe) { probe[/(?::c=>|\bc: )(.*?), (?::c_calls=>|c_calls: )/, 1] }
    expect(c_of[untraced]).to eq('[[1, [[:req]]], [0, []], [-1, [[:rest]]], [0, []]]')
    expect(c_of[traced]).to eq(c_of[untraced])
  end

  it 'shows calls made through an alias of a traced Ruby method, under its original name' do
    app = start_target(<<~'RUBY').ready
      class Probe
        def greet(name)
          "hi #{name}"
        end
        alias_method :hi, :greet
      end
      puts "ready"
      loop do
        Probe.new.hi('x')   # only ever through the alias
        sleep 0.05
      end
    RUBY
    out = trace(app, '-m', 'Probe#greet', until_output: /^Probe#greet <\d+\.\d{6}>$/).stdout
    expect(out).not_to include('Probe#hi')
  end

  # A Ruby method is traced by TracePoint#enable(target:): Ruby's own, taken
  # when rbtrace was loaded, not one the app prepended since (it ran at
  # every attach).
  it 'never runs an app\'s redefinition of TracePoint#enable' do
    app = start_target(<<~'RUBY').ready
      module CountedEnable
        CALLS = []
        def enable(...) = (CALLS << 1; super)
      end
      TracePoint.prepend(CountedEnable)
      class Probe
        def greet(name) = "hi #{name}"
      end
      puts "ready"
      loop { Probe.new.greet('x'); puts "enables #{CountedEnable::CALLS.size}"; sleep 0.05 }
    RUBY
    out = trace(app, '-m', 'Probe#greet', until_output: /^Probe#greet <\d+\.\d{6}>$/).stdout
    expect(out).to match(/^Probe#greet <\d+\.\d{6}>$/)
    seen = app.drain.size
    app.wait_for(->(_) { app.lines.size > seen }) # a count made after the trace
    expect(app.lines.drop(1).uniq).to eq(['enables 0'])
  end

  it 'lets a traced recursive method go as deep in a thread as untraced (5000 levels, and the limit)' do
    app = start_target(<<~'RUBY').ready
      class Probe
        def depth(n)
          n.zero? ? 0 : 1 + depth(n - 1)
        end

        # How deep it gets before the stack runs out.
        def deepest(n = 0)
          deepest(n + 1)
        rescue SystemStackError
          @max ||= n
        end
      end

      def run
        r = Thread.new do
          [Probe.new.depth(5000), Probe.new.deepest]
        rescue Exception => e
          e.class
        end.value
        "depth #{r.inspect}"
      end

      puts "ready"
      $stdin.read(0)
      loop do
        puts run
        sleep 0.3
      end
    RUBY
    untraced = app.wait_for(/\Adepth /)
    expect(untraced).to match(/\Adepth \[5000, \d+\]\z/)
    # No indent (--prefix 0): 10,000 levels would print 100 MB of it.
    client = start_client('-p', app.pid, '--prefix', '0', '-m', 'Probe#depth', 'Probe#deepest')
    client.attached
    client.wait_for(/^(\[t\d+\] )?Probe#deepest <\d/)
    app.drain
    seen = app.lines.grep(/\Adepth /).size
    app.wait_for(->(l) { l.start_with?('depth ') && app.lines.grep(/\Adepth /).size > seen + 1 })
    expect(client.stop).to be_success
    app.drain
    expect(app).to be_alive
    expect(app.lines.grep(/\Adepth /).uniq).to eq([untraced])
  end
end
