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
  HELPER_NAME = 'rbtrace'.freeze

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

  # A forked child starts detached; only the forking thread survives fork,
  # so the child needs a helper of its own. Process._fork (Ruby 3.1+) sees
  # fork, Kernel#fork and IO.popen('-'): Ruby's own hook point, made to be
  # overridden (this module shows in Process.singleton_class.ancestors).
  # Process.daemon forks without it: ext/rbtrace/inplace.c replaces it in
  # place, and its trap (the app's trap('URG') warned of), without a
  # module in any ancestors.
  module ForkHook
    def _fork
      pid = super
      RBTrace.reset_in_child if pid.zero?
      pid
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
RBTrace.start_helper
RBTrace::ExecWait.wait_if_asked
