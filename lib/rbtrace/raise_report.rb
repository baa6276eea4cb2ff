module RBTrace
  # `rbtrace --raise`: where each exception was raised, for the RAISE hook
  # (ext/rbtrace/raisewatch.c), which reads the class and message itself,
  # through the C API (never the app's #message, #class or #inspect). Runs
  # inside the hook, in the raising thread: nothing here may raise, and
  # interrupts meant for the app wait until it is done.
  module RaiseReport
    # lib/, as backtraces name it (the load path, maybe through a symbolic
    # link: a deploy's `current`) and as __dir__ does (the real path)
    OWN_FILES = [File.expand_path('..', File.dirname(__FILE__)), File.expand_path('..', __dir__)]
                .uniq.map { |dir| dir + File::SEPARATOR }.freeze

    module_function

    # "path:line"; for an exception raised in the VM's own Ruby code
    # (Integer("x") on 3.3 raises in <internal:kernel>), the line of the
    # app that called it.
    def location(path, line)
      return '(unknown)' unless path
      return "#{path}:#{line}" unless path.start_with?('<internal:')

      caller = caller_locations(1)&.find { |l| !l.path.start_with?('<internal:') && !own?(l.path) }
      caller ? "#{caller.path}:#{caller.lineno}" : "#{path}:#{line}"
    end

    def own?(path)
      path.nil? ? false : path.start_with?(*OWN_FILES) || path == Evaluator::EVAL_PATH
    end
  end

  # "path:line", or nil for rbtrace's own exceptions (raised by its Ruby
  # files or in its eval thread), which are not shown.
  def self.raise_location(path, line)
    Thread.handle_interrupt(Object => :never) do
      RaiseReport.own?(path) ? nil : RaiseReport.location(path, line)
    rescue Exception # rubocop:disable Lint/RescueException
      '(unknown)'
    end
  end
end
