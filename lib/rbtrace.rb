# rbtrace: strace for Ruby code. `require 'rbtrace'` in an app (or
# RUBYOPT=-rrbtrace) makes it traceable by its own user with the rbtrace
# command. Loading installs a SIGURG handler (not a Ruby trap) and parks one
# helper thread; nothing else happens until someone attaches.
require 'rbtrace/version'
require 'rbtrace/rbtrace'
require 'rbtrace/selector'
require 'rbtrace/expressions'
require 'rbtrace/evaluator'
require 'rbtrace/raise_report'
require 'rbtrace/exec_wait'
require 'rbtrace/reports'

module RBTrace
  HELPER_NAME = 'rbtrace'

  class << self
    # Starts the parked thread that serves commands (see ext/rbtrace/channel.c).
    # It must be a Ruby thread, started from Ruby, so that eval and tracing
    # work on it like on any other thread.
    def start_helper
      @helper = Thread.new do
        handoff_own_thread
        helper_loop
      rescue Exception => e # rubocop:disable Lint/RescueException
        # Not meant to happen; keep the process traceable and say it once.
        warn "rbtrace: helper thread: #{e.class}: #{e.message}" unless @helper_failed
        @helper_failed = true
        retry
      end
      @helper.name = HELPER_NAME
      # Ruby's default, whatever the thread that loads rbtrace (or forks)
      # runs at; an eval's thread inherits it.
      @helper.priority = 0
      # Forking leaves it behind safely (ForkHook starts the child's own).
      # Puma's preload check skips threads marked so (Rails' pool reaper
      # marks its own the same way): an app that loads rbtrace as it boots
      # is not warned of a thread that is not its own.
      @helper.thread_variable_set(:fork_safe, true)
      @helper.report_on_exception = false
      @helper
    end

    attr_reader :helper
  end

  # An app's trap("URG") replaces rbtrace's handler, after which the process
  # can no longer be attached to: say so once, where the app logs.
  module TrapWatch
    private def trap(*args, &block)
      RBTrace.watch_trap(args.first) { super(*args, &block) }
    end
  end

  module SignalTrapWatch
    def trap(*args, &block)
      RBTrace.watch_trap(args.first) { super(*args, &block) }
    end
  end

  URG = Signal.list.fetch('URG')

  # Runs the app's trap (the block) and returns what it returns, but for
  # the old handler of SIGURG where it was rbtrace's: Ruby names a handler
  # it did not set nil, and the app gets what it would have got untraced.
  def self.watch_trap(signal)
    ours = urg?(signal) && signal_handler_installed?
    old = yield
    check_signal_handler
    ours && old.nil? ? signal_handler_before : old
  end

  def self.urg?(signal)
    signal = signal.to_str if !signal.is_a?(Symbol) && signal.respond_to?(:to_str)
    case signal
    when Integer then signal == URG
    when Symbol, String then signal.to_s.delete_prefix('SIG') == 'URG'
    else false
    end
  end

  def self.check_signal_handler
    return if @handler_lost || signal_handler_installed?

    @handler_lost = true
    warn "rbtrace: the app replaced rbtrace's SIGURG handler (trap('URG')); " \
         "this process (pid #{Process.pid}) can no longer be traced"
  end

  # A forked child starts detached; only the forking thread survives fork,
  # so the child needs a helper of its own. Process._fork (Ruby 3.1+) sees
  # fork, Kernel#fork and IO.popen('-'); Process.daemon forks without it.
  module ForkHook
    def _fork
      pid = super
      RBTrace.reset_in_child if pid.zero?
      pid
    end
  end

  module DaemonHook
    def daemon(*args)
      result = super
      RBTrace.reset_in_child   # only the child returns from daemon
      result
    end
  end

  # Once per child process, however it was forked.
  def self.reset_in_child
    return if @child_pid == Process.pid

    @child_pid = Process.pid
    after_fork_child
    if Thread.current[:rbtrace_fork_without_helper]
      Thread.current[:rbtrace_fork_without_helper] = nil   # its own forks get one
      @helper = nil
    else
      start_helper
    end
  end

  # Process.fork(&block), with no helper thread in the child: for a child
  # that only forks again and exits (--fork's middle process). A helper
  # started there would still be starting, inside malloc, when the child
  # forks; an allocator without fork handlers (the ASan of GCC 12 has
  # none) then leaves its lock held in the grandchild, whose first malloc
  # hangs for good.
  def self.fork_without_helper(&block)
    Thread.current[:rbtrace_fork_without_helper] = true
    Process.fork(&block)
  ensure
    Thread.current[:rbtrace_fork_without_helper] = nil
  end
end

Process.singleton_class.prepend(RBTrace::ForkHook) if Process.respond_to?(:_fork)
Process.singleton_class.prepend(RBTrace::DaemonHook)
Signal.singleton_class.prepend(RBTrace::SignalTrapWatch)
Kernel.singleton_class.prepend(RBTrace::SignalTrapWatch)
# Before Ruby 3.0 a module prepended to Kernel does not reach the classes
# that include it already (Object): there, Object stands in for Kernel.
(RBTrace::Selector::PREPEND_REACHES_INCLUDERS ? Kernel : Object).prepend(RBTrace::TrapWatch)
RBTrace.start_helper
RBTrace::ExecWait.wait_if_asked
