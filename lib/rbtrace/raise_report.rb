module RBTrace
  # `rbtrace --raise`: what the RAISE hook (ext/rbtrace/raisewatch.c) sends
  # for each exception. Runs inside the hook, in the raising thread: nothing
  # here may raise, and interrupts meant for the app wait until it is done.
  module RaiseReport
    # lib/, as backtraces name it (the load path, maybe through a symbolic
    # link: a deploy's `current`) and as __dir__ does (the real path)
    OWN_FILES = [File.expand_path('..', File.dirname(__FILE__)), File.expand_path('..', __dir__)]
                .uniq.map { |dir| dir + File::SEPARATOR }.freeze
    MESSAGE_MAX = 1024

    module_function

    # [class name, message, "path:line"], or nil for rbtrace's own
    # exceptions (raised by its Ruby files or in its eval thread).
    def describe(exc, path, line)
      return nil if own?(path)

      [class_name(exc), message(exc), location(path, line)]
    end

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

    def class_name(exc)
      klass = exc.class
      klass.name || klass.inspect
    rescue Exception # rubocop:disable Lint/RescueException
      '(unknown class)'
    end

    def message(exc)
      text = exc.message.to_s.scrub
      text.bytesize > MESSAGE_MAX ? "#{text.byteslice(0, MESSAGE_MAX - 3).scrub('')}..." : text
    rescue Exception => e # rubocop:disable Lint/RescueException
      "(#message raised #{e.class})"
    end
  end

  def self.describe_raise(exc, path, line)
    Thread.handle_interrupt(Object => :never) { RaiseReport.describe(exc, path, line) }
  end
end
