module RBTrace
  # Parses method selectors, as `rbtrace -m` takes them:
  #
  #   sleep                 any method named sleep
  #   String#gsub           an instance method
  #   Process.pid           a singleton (class) method
  #   Dir.                  every singleton method of Dir
  #   Kernel#               every instance method of Kernel
  #   String#gsub(self, @x) with trace expressions, shown at each call
  #
  # Class names are resolved by constant lookup only; no selector text is
  # ever evaluated. Expressions are only syntax-checked here.
  module Selector
    CLASS_PATH = /\A(?<path>[A-Z]\w*(?:::[A-Z]\w*)*)(?<sep>[#.])(?<meth>[^\s#.(),]*)\z/.freeze
    BARE_METHOD = /\A[^\s#.(),:]+\z/.freeze

    module_function

    # Returns [owner or nil, method Symbol or nil, expressions or nil].
    # Raises ArgumentError with a message meant for the user.
    def parse(text)
      name, exprs = split_expressions(text.strip)
      owner, meth = resolve(name)
      [owner, meth, exprs]
    end

    def split_expressions(text)
      return [text, nil] unless text.end_with?(')') && (open = text.index('('))

      exprs = split_top_level(text[open + 1...-1]).map(&:strip).reject(&:empty?)
      exprs.each { |e| check_syntax(e) }
      [text[0...open].strip, exprs.empty? ? nil : exprs.map(&:freeze).freeze]
    end

    # Splits at commas outside brackets and quotes.
    def split_top_level(text)
      parts = []
      depth = 0
      quote = nil
      current = +''
      text.each_char do |c|
        if quote
          quote = nil if c == quote
        elsif c == '"' || c == "'"
          quote = c
        elsif '([{'.include?(c)
          depth += 1
        elsif ')]}'.include?(c)
          depth -= 1
        elsif c == ',' && depth.zero?
          parts << current
          current = +''
          next
        end
        current << c
      end
      parts << current
    end

    def check_syntax(expr)
      RubyVM::InstructionSequence.compile(expr)
    rescue SyntaxError => e
      raise ArgumentError, "syntax error in expression #{expr.inspect}: #{e.message.lines.first&.strip}"
    end

    def resolve(name)
      if (m = CLASS_PATH.match(name))
        mod = constant(m[:path])
        mod = mod.singleton_class if m[:sep] == '.'
        return [mod, nil] if m[:meth].empty?

        owned_method(mod, m[:meth], m[:path] + m[:sep])
      elsif BARE_METHOD.match?(name)
        [nil, name.to_sym]
      else
        raise ArgumentError, 'not a selector (use meth, Class#meth, Class.meth, Class# or Class.)'
      end
    end

    def constant(path)
      mod = path.split('::').inject(Object) { |scope, part| scope.const_get(part) }
      raise ArgumentError, "#{path} is not a class or module" unless mod.is_a?(Module)

      mod
    rescue NameError
      raise ArgumentError, "no such class or module #{path}"
    end

    # The method's owner and original name: what the VM reports at each call.
    def owned_method(mod, meth, prefix)
      unless mod.method_defined?(meth) || mod.private_method_defined?(meth)
        raise ArgumentError, "no such method #{prefix}#{meth}"
      end

      um = mod.instance_method(meth)
      [um.owner, um.original_name]
    end
  end

  def self.parse_selector(text)
    Selector.parse(text)
  end
end
