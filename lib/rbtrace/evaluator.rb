module RBTrace
  # Runs `rbtrace -e CODE` in the process. The code runs in a thread of its
  # own so that a snippet that never returns can be stopped at the timeout
  # instead of blocking the helper thread (or the app) for good.
  module Evaluator
    OK = RBTrace::EVAL_OK
    RAISED = RBTrace::EVAL_RAISED
    SYNTAX = RBTrace::EVAL_SYNTAX
    TIMEOUT = RBTrace::EVAL_TIMEOUT
    BACKTRACE_LINES = 20
    EVAL_PATH = '(rbtrace eval)'

    module_function

    def run(code, timeout)
      begin
        RubyVM::InstructionSequence.compile(code, EVAL_PATH)
      rescue SyntaxError => e
        return [SYNTAX, e.message]
      end
      worker = Thread.new { evaluate(code) }
      return worker.value if worker.join(timeout)

      worker.kill
      [TIMEOUT, "the code did not finish within #{timeout} s and was stopped"]
    end

    def evaluate(code)
      Thread.current.name = 'rbtrace eval'
      Thread.current.report_on_exception = false
      [OK, TOPLEVEL_BINDING.eval(code, EVAL_PATH).inspect]
    rescue Exception => e # rubocop:disable Lint/RescueException
      [RAISED, describe(e)]
    end

    def describe(error)
      # Frames of this file are ours, not the user's code.
      own = (error.backtrace || []).reject { |l| l.start_with?(__FILE__) }
      lines = own.first(BACKTRACE_LINES).map { |l| "\tfrom #{l}" }
      (["#{error.class}: #{error.message}"] + lines).join("\n")
    end
  end

  def self.eval_for_client(code, timeout)
    Evaluator.run(code, timeout)
  end
end
