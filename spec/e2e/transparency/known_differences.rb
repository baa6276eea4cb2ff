# What a tracer still changes, by design, each written in the README's
# "Known limits": the transparency suite takes out exactly these
# differences, in exactly their documented shape, before it compares. Any
# other difference, or one of these in another shape, still fails.
module TransparencySpec
  module KnownDifferences
    # rbtrace's own threads: the parked helper ('rbtrace') and, while an -e
    # runs, its eval thread ('rbtrace eval'); priority 0, marked :fork_safe
    # (the mark Puma's and Rails' fork checks skip). They are in Thread.list
    # and a join of them does not return (README: "The helper thread").
    RBTRACE_THREAD_NAMES = ['rbtrace', 'rbtrace eval'].freeze

    def self.rbtrace_thread?(info)
      info.is_a?(Array) && RBTRACE_THREAD_NAMES.include?(info[0]) && info[1].zero? && info[3] == true
    end

    def self.without_rbtrace_threads(observation)
      observation.to_h do |key, value|
        next [key, value] unless key.start_with?('foreign threads.', 'joining.') && value.is_a?(Array)

        [key, value.reject { |info| rbtrace_thread?(info) }]
      end
    end

    ANONYMOUS_MODULE = /\A#<Module:0x\h+>\z/.freeze

    # A C method traced by a wrapper (README: "A wrapped C method"; only the
    # probe's C methods, Integer#gcd, String#center, String#each_char): while
    # traced, its owner is the wrapper, an anonymous module prepended to its
    # class, and its super_method the original; the module stays in the
    # ancestors after the detach (a module cannot be taken out); and a
    # backtrace from inside the method, or caller in its block, shows the
    # method's line once more (the wrapper's frame).
    def self.without_wrapper(observation, base)
      observation.to_h do |key, value|
        expected = base[key]
        next [key, value] if expected.nil? || value == expected

        [key, unwrapped(key, value, expected)]
      end
    end

    def self.unwrapped(key, value, expected)
      case key
      when /\Aintrospection\.(Integer#gcd|String#center|String#each_char)\z/ then wrapper_method(value, expected)
      when /\Aintrospection\.(Integer|String)\.ancestors\z/ then wrapper_ancestors(value, expected)
      when 'calls.exception of a C method' then one_line_twice(value, expected)
      when 'calls.caller in a block of a traced C method' then one_frame_more(value, expected)
      else value
      end
    end

    # Owner the module, inspect naming it, super_method the original.
    def self.wrapper_method(value, expected)
      return value unless value.is_a?(Hash) && value['owner'].to_s.match?(ANONYMOUS_MODULE)

      module_name = value['owner']
      # Ruby 3.1 names the class and the owner, 3.2+ the owner alone.
      shown = [expected['inspect'].sub(/\A#<UnboundMethod: (\w+)#/) { "#<UnboundMethod: #{Regexp.last_match(1)}(#{module_name})#" },
               expected['inspect'].sub(/\A#<UnboundMethod: \w+#/) { "#<UnboundMethod: #{module_name}#" }]
      same = value.merge('owner' => expected['owner'], 'inspect' => expected['inspect'], 'super_method' => expected['super_method'])
      shown.include?(value['inspect']) && value['super_method'] == expected['inspect'] && same == expected ? expected : value
    end

    # One anonymous module right before the class.
    def self.wrapper_ancestors(value, expected)
      return value unless value.is_a?(Array) && value.size == expected.size + 1 && value[0].match?(ANONYMOUS_MODULE)

      value.drop(1) == expected ? expected : value
    end

    # [class, backtrace]: the first line of the backtrace twice (from Ruby
    # 3.4 on, labels name the owner: the wrapper's line, of an anonymous
    # module, has the method's name alone: 'Integer#gcd' then 'gcd').
    def self.one_line_twice(value, expected)
      klass, lines = value
      return value unless lines.is_a?(Array) && lines.size > 1
      return value unless lines[1] == lines[0] || lines[1] == lines[0].sub(/in '[\w:]+[#.]([^']+)'\z/, "in '\\1'")

      expected == [klass, [lines[0]] + lines.drop(2)] ? expected : value
    end

    # caller.size in the method's block, once per element: one more each.
    def self.one_frame_more(value, expected)
      return value unless value.is_a?(Array) && value.size == expected.size

      value.zip(expected).all? { |v, e| v == e + 1 } ? expected : value
    end

    # A recursive method traced with trace expressions evaluates them at each
    # call on the app's own stack: at the stack's edge those few frames are
    # missing, and SystemStackError comes at most this many levels sooner
    # (README: "Trace expressions"). Seen: 6 on 3.1, 5 on 3.3.
    EXPRESSIONS_STACK_LEVELS = 16

    def self.within_expressions_stack(observation, base)
      observation.to_h do |key, value|
        expected = base[key]
        next [key, value] unless key.start_with?('stack edge.') && value.is_a?(Integer) && expected.is_a?(Integer)

        [key, value < expected && value >= expected - EXPRESSIONS_STACK_LEVELS ? expected : value]
      end
    end
  end
end
