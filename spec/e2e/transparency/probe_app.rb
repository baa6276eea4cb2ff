# The transparency suite's probe app (spec/e2e/transparency_spec.rb). It
# computes, when asked, an observation: a Hash of what an app can see of
# itself that a tracer must not change, keyed "aspect.detail". It is run
# with and without rbtrace loaded, and before, while and after a client is
# attached: the spec compares the observations.
#
# Requests come as a file PROBE_DIR/req holding a word and an id (written
# by rename); the answer is PROBE_DIR/answer.<id>, a Marshal dump (written
# by rename). The main thread polls, so that every observation is
# made from the same call path (caller depths and backtraces compare).
#   observe    everything but recursion and Ractors
#   recursion  deep recursion of a traced method (apart: it may kill the app)
#   deepest    recursion until SystemStackError (likewise)
#   ractor     a Ractor calling traced methods (apart: it may kill the app)
#   ping     calls each method the modes trace, for the client to show
#   status   rbtrace's state, for the harness only (never compared)
#   urg      what the app's first trap('URG') returns (once: it takes SIGURG)
require 'rbconfig'

Warning[:experimental] = false if Warning.respond_to?(:[]=)   # Ractor.new's warning

$probe_app_calls = Hash.new(0)   # app code a tracer must not run

class ProbeError < StandardError
  def message
    $probe_app_calls[:message] += 1
    super
  end
end

class ProbeBase
  def greet(name, greeting: 'hello')
    "#{greeting}, #{name}"
  end
end

class Probe < ProbeBase
  def greet(name, greeting: 'hi')
    "<#{super}>"
  end

  def depth(n)
    n.zero? ? 0 : 1 + depth(n - 1)
  end

  # The deepest level reached before SystemStackError.
  def deepest(n)
    deepest(n + 1)
  rescue SystemStackError
    n
  end

  def where
    caller
  end

  def boom(msg)
    raise ProbeError, msg
  end

  def bang
    $!
  end

  def rescuer
    raise 'inner'
  rescue RuntimeError
    :rescued
  end

  def yielder
    yield caller.size
  end

  def inspect
    ($probe_app_calls[:inspect] += 1) rescue nil   # not from a Ractor
    '#<Probe>'
  end
end

# An app's own prepended module above a traced method.
module ProbeLoud
  def greet(name, **kw)
    super.upcase
  end
end

class ProbeShout < Probe
  prepend ProbeLoud
end

APP_TRAPS = {
  'USR2' => proc { $probe_usr2 = true },
  'TERM' => proc { exit 15 },
  'HUP' => 'IGNORE',
  'PIPE' => 'SYSTEM_DEFAULT'
}.freeze
APP_TRAPS.each { |sig, handler| Signal.trap(sig, handler) }

module ProbeObserve
  RUBY_METHODS = %i[greet depth deepest where boom bang rescuer yielder].freeze
  C_METHODS = [[Integer, :gcd], [String, :center], [String, :each_char]].freeze
  RACTOR_ROUNDS = 10_000
  JOIN_LIMIT = 0.15   # the app's own have ended: one that has not by then never will

  module_function

  def describe_method(m)
    { 'arity' => m.arity, 'parameters' => m.parameters, 'source_location' => m.source_location,
      'owner' => m.owner.inspect, 'inspect' => m.inspect,
      'super_method' => m.super_method&.inspect }
  end

  def introspection
    o = {}
    RUBY_METHODS.each { |name| o["introspection.Probe##{name}"] = describe_method(Probe.instance_method(name)) }
    C_METHODS.each { |mod, name| o["introspection.#{mod}##{name}"] = describe_method(mod.instance_method(name)) }
    o['introspection.ProbeShout#greet chain'] = chain(ProbeShout.new.method(:greet))
    [Probe, ProbeBase, ProbeShout, Integer, String].each do |mod|
      o["introspection.#{mod}.ancestors"] = mod.ancestors.map(&:inspect)
      o["introspection.#{mod}.instance_methods(false)"] = mod.instance_methods(false).sort
    end
    o['introspection.Probe#greet bound == unbound'] =
      Probe.new.method(:greet).unbind == Probe.instance_method(:greet)
    o.merge(core_introspection)
  end

  # What rbtrace replaces in place (Kernel#trap, Signal.trap, Process.daemon:
  # ext/rbtrace/inplace.c) and where it once prepended modules.
  def core_introspection
    o = {}
    [[Kernel, :trap], [Signal, :trap], [Process, :daemon], [Kernel, :exec]].each do |mod, name|
      o["introspection.#{mod}##{name}"] = describe_method(mod.instance_method(name))
      o["introspection.#{mod}.#{name}"] = describe_method(mod.method(name))
    end
    o['introspection.Process.exec'] = describe_method(Process.method(:exec))   # no Process#exec
    [Object, Kernel, BasicObject, Signal.singleton_class, Kernel.singleton_class].each do |mod|
      o["introspection.#{mod.inspect}.ancestors"] = mod.ancestors.map(&:inspect)
    end
    # Process._fork is Ruby's own hook point for forks, made to be
    # overridden: rbtrace prepends RBTrace::ForkHook there (README, Known limits).
    o['introspection.Process.singleton_class.ancestors, but for the Process._fork hook'] =
      Process.singleton_class.ancestors.map(&:inspect) - ['RBTrace::ForkHook']
    [Kernel, Signal, Process].each do |mod|
      o["introspection.#{mod}.private_instance_methods(false)"] = mod.private_instance_methods(false).sort
      o["introspection.#{mod}.singleton_methods(false)"] = mod.singleton_methods(false).sort
    end
    o
  end

  def chain(m)
    list = []
    while m
      list << [m.owner.inspect, m.source_location, m.arity]
      m = m.super_method
    end
    list
  end

  def error(e)
    [e.class.name, e.message, e.backtrace]
  end

  def calls
    probe = Probe.new
    o = {}
    o['calls.greet'] = [probe.greet('ann'), probe.greet('bob', greeting: 'yo')]
    o['calls.super chain'] = ProbeShout.new.greet('cy', greeting: 'hey')
    o['calls.caller inside'] = probe.where
    o['calls.caller in a block of a traced Ruby method'] = probe.yielder { |n| [n, caller.size] }
    # (break leaves each_char at its first character, on purpose)
    o['calls.caller in a block of a traced C method'] = 'a'.each_char.map { caller.size } +
                                                        ['b'].map { 'x'.each_char { |_| break caller.size } } # rubocop:disable Lint/UnreachableLoop
    o['calls.exception raised inside'] = begin
      probe.boom('oops')
    rescue ProbeError => e
      [e.class.name, e.backtrace, e.backtrace_locations.map(&:label)]
    end
    o['calls.exception of a C method'] = begin
      12.gcd('x')
    rescue TypeError => e
      [e.class.name, e.backtrace]
    end
    o['calls.exception of an argument error'] = begin
      probe.greet
    rescue ArgumentError => e
      error(e)
    end
    o['calls.C results'] = [12.gcd(8), 'ab'.center(6, '*'), 'xyz'.each_char.to_a]
    o['calls.recursion 100'] = probe.depth(100)
    o
  end

  def dollar_bang(probe)
    o = {}
    o['$!.in a rescue, around traced calls'] = begin
      raise 'outer'
    rescue RuntimeError
      [$!.message, probe.greet('x'), $!.message, probe.bang&.message, probe.rescuer, $!.message,
       (begin; probe.boom('y'); rescue ProbeError; $!.class.name; end), $!.message, 12.gcd(3), $!.message]
    end
    o['$!.after'] = $!.inspect
    probe.rescuer
    o['$!.after a traced method that rescued'] = $!.inspect
    o
  end

  # The value of a thread that may die of what it observes.
  def value_of(thread)
    thread.report_on_exception = false
    thread.value
  rescue Exception => e   # rubocop:disable Lint/RescueException
    "Thread#value raised #{e.class}"
  end

  def recursion
    value = value_of(Thread.new do
      Probe.new.depth(5000)
    rescue Exception => e   # rubocop:disable Lint/RescueException
      "raised in the thread: #{e.class}"
    end)
    main = begin
      Probe.new.depth(5000)
    rescue Exception => e   # rubocop:disable Lint/RescueException
      "raised #{e.class}"
    end
    { 'recursion.depth(5000) in a thread' => value,
      'recursion.depth(5000) in the main thread' => main }
  end

  # Apart from recursion: with a C frame a level, this overflows the
  # machine stack rather than the VM's.
  def deepest
    { 'stack edge.the deepest level reached in a thread' => value_of(Thread.new { Probe.new.deepest(0) }) }
  end

  # Name, priority, status, and the thread variable that Puma's and Rails'
  # fork checks skip a thread for.
  def thread_info(t)
    [t.name, t.priority, t.status, t.thread_variable_get(:fork_safe)]
  end

  def threads
    queue = Queue.new
    mine = [['probe-low', -2], ['probe-high', 1], ['probe-plain', 0]].map do |name, priority|
      t = Thread.new { queue.pop }
      t.name = name
      t.priority = priority
      t
    end
    Thread.pass until mine.all? { |t| t.status == 'sleep' }
    o = {
      "threads.the app's own, in Thread.list" => Thread.list.select { |t| mine.include?(t) }.map { |t| thread_info(t) },
      'threads.main' => [Thread.main == Thread.current, Thread.current.priority, Thread.current.name],
      'foreign threads.in Thread.list, not started by the app' =>
        (Thread.list - mine - [Thread.main]).map { |t| thread_info(t) }
    }
    mine.size.times { queue << :done }
    mine.each(&:join)
    o['foreign threads.in Thread.list once the own ended'] = (Thread.list - [Thread.current]).map { |t| thread_info(t) }
    # The script idiom: wait for every other thread to end.
    o['joining.the threads that never end (none)'] =
      (Thread.list - [Thread.current]).reject { |t| t.join(JOIN_LIMIT) }.map { |t| thread_info(t) }
    o
  end

  def signals
    o = APP_TRAPS.to_h do |sig, handler|
      back = Signal.trap(sig, 'DEFAULT')
      Signal.trap(sig, back)
      ["signals.trap('#{sig}') returns what the app set", back.equal?(handler) || back == handler || back.inspect]
    end
    o.merge(trap_calls)
  end

  # trap called every way (rbtrace's own trap calls Ruby's: inplace.c).
  def trap_calls
    o = {}
    first = trap('INT') { :int }
    back = trap('INT', first)
    o["signals.trap('INT') { } returns, then gives back the block as a Proc"] =
      [first, back.class.name, back.lambda?, back.call]
    mine = ->(_) { :usr1 }
    o['signals.Signal.trap(:USR1, ...) returns, IGNORE, a lambda, by number'] =
      [Signal.trap(:USR1, 'IGNORE'), Kernel.trap('SIGUSR1', mine), Signal.trap(Signal.list['USR1'], 'DEFAULT').equal?(mine),
       trap(:USR1, 'SYSTEM_DEFAULT'), Signal.trap('USR1', 'DEFAULT')]
    o
  end

  # Errors raised by trap: class, message, backtrace. Kept apart from
  # signals: rbtrace's trap adds a frame (README, Known limits).
  TRAP_ERRORS = {
    "trap('BOGUS') { }" => -> { trap('BOGUS') { nil } },
    "trap('SEGV') { }" => -> { trap('SEGV') { nil } },
    "Signal.trap('USR2') without a handler" => -> { Signal.trap('USR2') },
    "Kernel.trap(:KILL, 'IGNORE')" => -> { Kernel.trap(:KILL, 'IGNORE') }
  }.freeze

  def trap_errors
    TRAP_ERRORS.to_h do |what, call|
      seen = begin
        call.call
        'no error'
      rescue StandardError => e
        [e.class.name, e.message, e.backtrace, e.backtrace_locations.map(&:label)]
      end
      ["trap errors.#{what}", seen]
    end
  end

  def forks
    parent = Process.pid
    r, w = IO.pipe
    child = fork do
      r.close
      seen = {
        'pid' => Process.pid != parent && Process.ppid == parent,
        'greet' => Probe.new.greet('kid'),
        'C' => 12.gcd(8),
        'trap USR2' => Signal.trap('USR2', 'DEFAULT').equal?(APP_TRAPS['USR2'])
      }
      seen['foreign threads'] = (Thread.list - [Thread.current]).map { |t| thread_info(t) }
      w.write(Marshal.dump(seen))
      w.close
      exit 7
    end
    w.close
    seen = Marshal.load(r.read)
    r.close
    _, status = Process.wait2(child)
    foreign = seen.delete('foreign threads')
    o = seen.transform_keys { |k| "fork.the child sees: #{k}" }
    o['foreign threads.in a forked child'] = foreign
    o['fork.exit status'] = [status.exitstatus, status.signaled?]
    o
  end

  # What an exec'd program inherits: blocked and ignored signals, open fds, the environment.
  # (PROBE_DIR differs from one probe to the next.)
  SHOW = 'grep -E "^Sig(Blk|Ign)" /proc/self/status; ls /proc/self/fd | tr "\n" " "; echo; ' \
         'env | grep -v ^PROBE_DIR= | sort; exit 5'

  def execs
    o = {}
    o['exec.popen sees'] = IO.popen(['/bin/sh', '-c', SHOW], &:read).lines
    o['exec.popen status'] = $?.exitstatus
    r, w = IO.pipe
    child = fork { r.close; $stdout.reopen(w); exec('/bin/sh', '-c', SHOW) }
    w.close
    o['exec.fork+exec sees'] = r.read.lines
    r.close
    o['exec.fork+exec status'] = Process.wait2(child)[1].exitstatus
    o['exec.system'] = [system('/bin/sh', '-c', 'exit 3'), $?.exitstatus]
    o['exec.backticks'] = [`echo hi`, $?.exitstatus]
    o
  end

  def app_code_run
    probe = Probe.new
    begin
      probe.no_such_method
    rescue NoMethodError => e
      e.class   # never its message: that would inspect the probe
    end
    begin
      probe.boom('counted')
    rescue ProbeError => e
      e.class
    end
    [probe].map(&:greet) rescue nil   # ArgumentError
    {}
  end

  # Each part's keys start with its aspect; a part that raises says so
  # under its aspect and the others are still observed.
  PARTS = { introspection: 'introspection', calls: 'calls', dollar_bang: '$!',
            threads: 'threads', signals: 'signals', trap_errors: 'trap errors', forks: 'fork', execs: 'exec',
            app_code_run: 'app code run' }.freeze

  def observe
    $probe_app_calls.clear
    GC.start   # for --gc
    o = {}
    PARTS.each do |part, aspect|
      o.merge!(part == :dollar_bang ? dollar_bang(Probe.new) : public_send(part))
    rescue Exception => e   # rubocop:disable Lint/RescueException
      o["#{aspect}.observing it raised"] = "#{e.class}: #{e.message}"
    end
    o['app code run.calls of Probe#inspect and ProbeError#message during the observation'] =
      %i[inspect message].to_h { |k| [k, $probe_app_calls[k]] }
    o
  end

  # Two Ractors at once, each calling the traced methods RACTOR_ROUNDS
  # times, and the main one meanwhile (what corrupted the stream of the
  # single-producer ring: the more calls, the surer a collision).
  def ractor
    return { 'ractor.available' => false } unless defined?(Ractor)

    ractors = 2.times.map do |i|
      Ractor.new(i) do |k|
        last = nil
        RACTOR_ROUNDS.times { last = [Probe.new.greet("r#{k}"), Probe.new.depth(20), 12.gcd(8), 'ab'.center(4), 'ab'.each_char.to_a] }
        last
      rescue Exception => e   # rubocop:disable Lint/RescueException
        "raised in the Ractor: #{e.class}: #{e.message}"
      end
    end
    # and the main Ractor too, meanwhile
    RACTOR_ROUNDS.times { Probe.new.greet('main') }
    values = ractors.map { |r| r.respond_to?(:value) ? r.value : r.take }
    { 'ractor.traced methods called in two Ractors return' => values }
  rescue Exception => e   # rubocop:disable Lint/RescueException
    { 'ractor.traced methods called in two Ractors return' => "raised: #{e.class}: #{e.message}" }
  end

  def ping
    Probe.new.greet('ping')
    Probe.new.depth(3)
    12.gcd(8)
    'ab'.center(4)
    'a'.each_char { nil }
    (raise 'ping' rescue nil)
    GC.start
    { 'ping' => true }
  end

  def status
    return { 'loaded' => false } unless defined?(RBTrace)

    { 'loaded' => true, 'attached' => RBTrace.attached? }
  end

  def urg
    handler = proc { $probe_urg = true }
    first = Signal.trap('URG', handler)
    { 'urg.the first trap(\'URG\') returns' => first.is_a?(Proc) ? "a Proc from #{first.source_location&.first}" : first.inspect,
      'urg.trap(\'URG\') then returns the app\'s' => Signal.trap('URG', handler).equal?(handler) }
  end
end

dir = ENV.fetch('PROBE_DIR')
request = File.join(dir, 'req')
puts 'ready'
loop do
  if File.exist?(request)
    word, id = File.read(request).split
    File.delete(request)
    answer = case word
             when 'observe', 'recursion', 'deepest', 'ractor', 'ping', 'status', 'urg' then ProbeObserve.public_send(word)
             else { 'error' => "unknown request #{word.inspect}" }
             end
    File.binwrite(File.join(dir, 'answer.tmp'), Marshal.dump(answer))
    File.rename(File.join(dir, 'answer.tmp'), File.join(dir, "answer.#{id}"))
  end
  sleep 0.01
end
