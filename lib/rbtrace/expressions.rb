module RBTrace
  # Values of trace expressions (`-m 'String#gsub(self, @x, arg)'`),
  # computed at each traced call. Called from the event hook (with tracing
  # of itself suspended): nothing here may raise.
  module Expressions
    module_function

    # binding is the called method's Binding for Ruby methods, nil for C
    # methods (which have no local variables: expressions run on self).
    def values(obj, binding, exprs, source)
      exprs.map do |expr|
        value =
          begin
            case expr
            when '__source__' then source
            when 'self' then obj
            else binding ? binding.eval(expr) : obj.instance_eval(expr)
            end
          rescue Exception => e # rubocop:disable Lint/RescueException
            next raised(e)
          end
        truncate(inspect_value(value))
      end
    end

    def inspect_value(value)
      value.inspect
    rescue Exception => e # rubocop:disable Lint/RescueException
      raised(e, ' by inspect')
    end

    # An expression that raised: the exception's class alone, read without
    # the app's code. Not its message: a NameError's calls the receiver's
    # #inspect (app code, whatever it does, at every call).
    def raised(exc, how = '')
      "#<#{RBTrace.class_path_of(exc)} raised#{how}>"
    end

    def truncate(text)
      text = text.to_s.scrub
      return text if text.bytesize <= VALUE_MAX

      "#{text.byteslice(0, VALUE_MAX - 3).scrub('')}..."
    end
  end

  # Called by the hook (ext/rbtrace/trace.c). The call site is two frames
  # up for a Ruby method (its own frame is already pushed), one for C.
  # Interrupts meant for the app's thread (Thread#raise, Timeout, kill) wait
  # until the values are computed, then go on to the app.
  def self.trace_exprs(obj, binding, exprs)
    loc = caller_locations(binding ? 2 : 1, 1)&.first
    Thread.handle_interrupt(Object => :never) do
      Expressions.values(obj, binding, exprs, loc ? "#{loc.path}:#{loc.lineno}" : nil)
    end
  end
end
