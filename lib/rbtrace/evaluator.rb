module RBTrace
  # Runs `rbtrace -e CODE` (and the reports, which are evals of
  # RBTrace::Reports methods) in the process. The code runs in a thread of
  # its own so that a snippet that never returns can be stopped at the
  # timeout instead of blocking the helper thread (or the app) for good.
  module Evaluator
    OK = RBTrace::EVAL_OK
    RAISED = RBTrace::EVAL_RAISED
    SYNTAX = RBTrace::EVAL_SYNTAX
    TIMEOUT = RBTrace::EVAL_TIMEOUT
    # How the result becomes text (protocol.h, enum rbtrace_result_format).
    INSPECT = 0
    TEXT = 1
    BACKTRACE_LINES = 20
    EVAL_PATH = '(rbtrace eval)'.freeze

    module_function

    def run(code, timeout, format = INSPECT)
      begin
        RubyVM::InstructionSequence.compile(code, EVAL_PATH)
      rescue SyntaxError => e
        return [SYNTAX, e.message]
      end
      worker = Thread.new { evaluate(code, format) }
      # Marked as ours before it can run, so that it never passes the GVL on
      # (to itself) in the hand-off's job; and started before this thread
      # lets the GVL go (ext/rbtrace/handoff.c, handoff_wait_started).
      RBTrace.handoff_own_thread(worker)
      RBTrace.handoff_wait_started(worker)
      # Each side says when it is about to wait for the GVL, so that a busy
      # app thread passes it on at once (ext/rbtrace/handoff.c).
      RBTrace.handoff_request
      begin
        ended = wait(worker, timeout)
      ensure
        RBTrace.handoff_done
      end
      return worker.value if ended == :finished

      worker.kill
      return [TIMEOUT, "the code did not finish within #{timeout} s and was stopped"] if ended == :timeout

      [TIMEOUT, 'the client went away: the code was stopped']
    end

    # How often a waiting eval looks whether its client is still there.
    CLIENT_CHECK = 0.1

    # Waits for the worker until the timeout, or until the client is gone
    # (killed, its terminal closed): nobody is left to read the result, and
    # the app must not stay attached to a dead client for the rest of the
    # timeout (300 s for a heap dump). :finished, :timeout or :client_gone.
    def wait(worker, timeout)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        return :timeout if left <= 0
        return :finished if worker.join([left, CLIENT_CHECK].min)
        return :client_gone if RBTrace.client_gone?
      end
    end

    def evaluate(code, format)
      RBTrace.handoff_done
      Thread.current.name = 'rbtrace eval'
      Thread.current.thread_variable_set(:fork_safe, true)   # as the helper's (lib/rbtrace.rb)
      Thread.current.report_on_exception = false
      [OK, render(TOPLEVEL_BINDING.eval(code, EVAL_PATH), format)]
    rescue Exception => e # rubocop:disable Lint/RescueException
      [RAISED, describe(e)]
    ensure
      RBTrace.handoff_request # for the thread that joins this one
    end

    # TEXT sends a String as it is (a report's lines); anything else, and
    # every INSPECT result, as its #inspect.
    def render(result, format)
      return result if format == TEXT && result.is_a?(String)

      result.inspect
    end

    def describe(error)
      # A report's expected failure (a file that exists, ...) says it all.
      return error.message if defined?(RBTrace::Reports::Error) && error.is_a?(RBTrace::Reports::Error)

      # Frames of this file are ours, not the user's code.
      own = (error.backtrace || []).reject { |l| l.start_with?(__FILE__) }
      lines = own.first(BACKTRACE_LINES).map { |l| "\tfrom #{l}" }
      (["#{error.class}: #{error.message}"] + lines).join("\n")
    end
  end

  def self.eval_for_client(code, timeout, format = Evaluator::INSPECT)
    Evaluator.run(code, timeout, format)
  end
end
