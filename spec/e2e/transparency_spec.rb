require 'open3'
require_relative 'transparency/helper'
require_relative 'transparency/known_differences'

# Tracing must change nothing the app can observe (issue 20). One probe app
# (transparency/probe_app.rb) observes itself: recursion depth, its traced
# methods' introspection, return values, caller, backtraces, $!, threads,
# signal handlers, fork and exec, Ractors, the app code run, its stderr.
# It is observed without rbtrace and with it loaded, and, for each mode,
# before a client attaches, while it is attached and after it detached: the
# observations must be equal, aspect by aspect. A failure lists each key
# that differs with its values.
module TransparencySpec
  ASPECTS = {
    'recursion' => 'a traced recursive method reaches depth 5000 as untraced, in a thread and in the main thread',
    'stack edge' => 'the deepest level a traced recursive method reaches before SystemStackError is the same ' \
                    '(a traced call takes no more stack)',
    'introspection' => "the traced methods' arity, parameters, source_location, owner, super_method, ancestors",
    'calls' => 'return values, caller inside, backtraces of exceptions raised inside, super chains',
    '$!' => '$! around and inside traced calls',
    'threads' => "the app's own threads in Thread.list, their priorities and status",
    'signals' => 'trap returns the handlers the app set',
    'fork' => 'fork: what the child sees, its exit status',
    'exec' => 'popen, fork+exec, system, backticks: what the program inherits (signal mask, ignored ' \
              'signals, fds, environment), exit statuses',
    'app code run' => "none of the app's code is run for the tracer (Probe#inspect, ProbeError#message)",
    'ractor' => 'traced methods called in two Ractors (and the main one meanwhile) return the same',
    'stderr' => "nothing is written to the app's stderr"
  }.freeze
  # Aspects that show rbtrace's own threads: examples of their own, so that
  # what stays by design is decided apart.
  # What stays by design (README, "Known limits") is taken out by
  # KnownDifferences, in its documented shape only.
  FOREIGN_THREADS = "no thread the app did not start but rbtrace's helper ('rbtrace', priority 0, :fork_safe), " \
                    'in Thread.list and in a forked child'
  JOINING = "joining every other thread finishes, but for rbtrace's helper: (Thread.list - [Thread.current]).each(&:join)"
  # rbtrace's trap (ext/rbtrace/inplace.c) calls Ruby's, a C frame of its
  # own: an error raised by trap has one more "in `trap'" line, the top one
  # twice. What stays by design is decided apart, as above.
  TRAP_ERRORS = 'an error raised by trap (an unknown or reserved signal, no handler): class, message, backtrace'

  # An observation with its trap errors' top backtrace line doubled, the
  # way rbtrace's trap adds it (the top label likewise).
  def self.with_trap_frame(observation)
    observation.to_h do |key, value|
      next [key, value] unless key.start_with?('trap errors.') && value.is_a?(Array)

      klass, message, backtrace, labels = value
      [key, [klass, message, backtrace.first(1) + backtrace, labels.first(1) + labels]]
    end
  end

  RUBY_SELECTORS = %w[Probe#greet ProbeBase#greet ProbeLoud#greet Probe#depth Probe#deepest Probe#where
                      Probe#boom Probe#bang Probe#rescuer Probe#yielder].freeze
  MODES = {
    '-m on Ruby methods' => { args: ['-m', *RUBY_SELECTORS], shows: /^ *Probe#greet\b/ },
    '-m on Ruby methods with trace expressions (one fails: self.no_such_thing)' => {
      args: ['-m', 'Probe#greet(name, greeting)', 'ProbeBase#greet(name)', 'ProbeLoud#greet(name)', 'Probe#depth(n)',
             'Probe#deepest(n)', 'Probe#where(self.class)', 'Probe#boom(msg)', 'Probe#bang',
             'Probe#rescuer(self.no_such_thing)', 'Probe#yielder(__source__)'],
      shows: /Probe#greet\(name="ping"/, known: :expressions_stack
    },
    '-m on C methods' => { args: %w[-m Integer#gcd String#center String#each_char], shows: /^ *Integer#gcd\b/,
                           known: :wrapper },
    '-m on C methods with trace expressions' => {
      args: ['-m', 'Integer#gcd(self)', 'String#center(self, __source__)', 'String#each_char(self.size)'],
      shows: /Integer#gcd\(self=12\)/
    },
    '-f' => { args: ['-f'], shows: /^ *Probe#greet\b/ },
    '-m on Ruby and C methods with --thread-names (the name read in hooks and wrappers)' => {
      args: ['--thread-names', '-m', *RUBY_SELECTORS, 'Integer#gcd'], shows: /^\[t\d+\] *Probe#greet\b|^ *Probe#greet\b/,
      known: :wrapper
    },
    '--slow 0' => { args: %w[--slow 0], shows: /^ *Probe#greet\b/ },
    # --profile prints nothing until its end: -m's lines show that it traces.
    # 1,000 Hz: every thread signalled as often as --hz allows.
    '--profile at 1,000 Hz, with -m on Ruby methods' => {
      args: ['--profile', '--hz', '1000', '-m', *RUBY_SELECTORS], shows: /^ *Probe#greet\b/
    },
    # Not with Ractors before 3.3: --gc can crash an app that starts one
    # there (Ruby's bug; docs/limits.md, "Ractors"), so that part is not run.
    '--gc' => { args: ['--gc'], shows: /\S/, ractors_from: '3.3' },
    '--raise' => { args: ['--raise'], shows: /RuntimeError/ },
    '-e, while the eval runs' => { args: [], shows: /=> :released/, ending: :eval },
    '-m, the client SIGKILLed' => { args: ['-m', *RUBY_SELECTORS, 'Integer#gcd'], shows: /^ *Probe#greet\b/,
                                    ending: :sigkill, known: :wrapper },
    '-m, the client gave up before the app answered (app stopped)' => {
      args: ['-m', *RUBY_SELECTORS, 'Integer#gcd'], shows: /did not connect back/, ending: :gave_up
    }
  }.freeze
end

module TransparencySpec
  # The observations of a mode with its documented differences taken out
  # (known: :wrapper, :expressions_stack or nil), against the untraced one.
  def self.known_differences_out(known, observed)
    base = observed.fetch('untraced')
    observed.transform_values do |o|
      o = KnownDifferences.without_rbtrace_threads(o)
      case known
      when :wrapper then KnownDifferences.without_wrapper(o, base)
      when :expressions_stack then KnownDifferences.within_expressions_stack(o, base)
      else o
      end
    end
  end
end

RSpec.describe 'transparency: what the app observes' do
  # An example per aspect of @observed, rbtrace's threads' included.
  # not_run: {aspect => why} for aspects whose app a mode does not run.
  def self.aspect_examples(not_run = {})
    TransparencySpec::ASPECTS.each do |aspect, what|
      it(what) do
        skip not_run[aspect] if not_run[aspect]
        expect_same(aspect, what, @observed)
      end
    end
    it(TransparencySpec::FOREIGN_THREADS) { expect_same('foreign threads', TransparencySpec::FOREIGN_THREADS, @observed) }
    it(TransparencySpec::JOINING) { expect_same('joining', TransparencySpec::JOINING, @observed) }
  end

  def expect_same(aspect, what, labelled)
    keys = TransparencySpec.aspect_keys(aspect, *labelled.values)
    expect(keys).not_to be_empty, "the probe observed nothing of #{aspect}"
    diffs = TransparencySpec.differences(keys, labelled)
    expect(diffs).to be_empty, "#{what}: differs\n#{diffs.join("\n")}"
  end

  describe 'loading rbtrace, no client attached' do
    before(:context) do
      @without = TransparencySpec::Probe.new(rbtrace: false)
      @loaded = TransparencySpec::Probe.new(rbtrace: true)
      [@without, @loaded].each(&:ready)
      @observed = { 'without rbtrace' => @without, 'rbtrace loaded' => @loaded }.transform_values do |probe|
        o = probe.observe.merge(probe.ask('urg'))   # last: it takes SIGURG from rbtrace
        TransparencySpec::KnownDifferences.without_rbtrace_threads(o)
      end
    end

    after(:context) do
      @without&.kill
      @loaded&.kill
    end

    aspect_examples

    it "#{TransparencySpec::TRAP_ERRORS}: the same, but for one more `trap' line at the top of the backtrace" do
      expected = TransparencySpec.with_trap_frame(@observed['without rbtrace'])
      expect_same('trap errors', TransparencySpec::TRAP_ERRORS,
                  { 'without rbtrace, its top line twice' => expected, 'rbtrace loaded' => @observed['rbtrace loaded'] })
    end

    it "the app's first trap('URG') returns what it returns without rbtrace, and then the app's handler" do
      expect_same('urg', "trap('URG')", @observed)
    end
  end

  # rbtrace loaded by `rbtrace --inject` into a probe started without it
  # (docs/DESIGN.md, "Injection"), then an eval, against a probe without
  # rbtrace: what stays is what loading it leaves, nothing more (the
  # bootstrap's thread has ended; its library, mapped, is not observed).
  describe 'rbtrace injected (--inject, then -e), no client attached' do
    before(:context) do
      skip '--inject needs root (or CAP_SYS_PTRACE)' unless Process.uid.zero?
      @without = TransparencySpec::Probe.new(rbtrace: false)
      @injected = TransparencySpec::Probe.new(rbtrace: false)
      [@without, @injected].each(&:ready)
      out, err, status = Open3.capture3(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '-p', @injected.pid.to_s,
                                        '--inject', '--timeout', '30', '-e', 'Process.pid')
      raise "rbtrace --inject failed (#{status.inspect}):\n#{out}#{err}" unless out.include?("=> #{@injected.pid}")

      @observed = { 'without rbtrace' => @without, 'rbtrace injected' => @injected }.transform_values do |probe|
        o = probe.observe.merge(probe.ask('urg')) # last: it takes SIGURG from rbtrace
        TransparencySpec::KnownDifferences.without_rbtrace_threads(o)
      end
    end

    after(:context) do
      @without&.kill
      @injected&.kill
    end

    aspect_examples

    it "the app's first trap('URG') returns what it returns without rbtrace, and then the app's handler" do
      expect_same('urg', "trap('URG')", @observed)
    end
  end

  # The modes whose examples run (all, unless filtered) are run ahead.
  before(:context) do
    wanted = self.class.children.select { |g| g.metadata[:mode] && RSpec.world.filtered_examples[g].any? }
    TransparencySpec::Pool.start(wanted.map { |g| [g.metadata[:mode], TransparencySpec::MODES.fetch(g.metadata[:mode])] })
  end

  after(:context) { TransparencySpec::Pool.kill_all }

  TransparencySpec::MODES.each do |mode, spec|
    phases = spec[:ending] == :gave_up ? 'untraced and after' : 'untraced, traced and after the detach'
    describe "#{mode}: #{phases}", mode: mode do
      before(:context) do
        @run = TransparencySpec::Pool.fetch(mode)
        @observed = TransparencySpec.known_differences_out(
          spec[:known], { 'untraced' => @run.before, 'traced' => @run.during, 'after detach' => @run.after }.compact
        )
      end

      after(:context) { TransparencySpec::Pool.kill(mode) }

      it 'the client traced the probe while it was observed, and the app detached' do
        expect(@run.untraced).to eq([]),
                                 "the client of #{@run.untraced.join(' and ')} never showed #{spec[:shows].inspect}, " \
                                 "though the app called what it traces\n#{@run.client_output}"
        expect(@run.notes).to be_empty, "#{@run.notes.join("\n")}\n#{@run.client_output}"
      end

      it 'the client shows no malformed event' do
        expect(@run.client_lines(/malformed/)).to eq([]), "#{@run.client_lines(/malformed/).join}\n#{@run.client_output}"
      end

      aspect_examples(TransparencySpec.not_run(spec))
      it(TransparencySpec::TRAP_ERRORS) { expect_same('trap errors', TransparencySpec::TRAP_ERRORS, @observed) }
    end
  end
end
