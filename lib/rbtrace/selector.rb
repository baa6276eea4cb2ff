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
    # Methods a wrapper must not stand in for: the VM's optimised operators
    # (redefining one on a core class turns off its fast path for good), and
    # methods that look at their caller's frame, which a wrapper would hide.
    UNWRAPPABLE = %i[
      + - * / % ** == != === =~ !~ ! < <= > >= <=> << >> & | ^ ~ -@ +@ [] []=
      length size empty? nil? succ freeze max min hash call pack include? dup
      binding block_given? iterator? eval local_variables __method__ __callee__ __dir__
      caller caller_locations require_relative proc lambda using raise fail
      private public protected module_function private_constant public_constant
      instance_eval instance_exec class_eval module_eval class_exec module_exec
      send __send__ public_send method_missing respond_to_missing? define_method
    ].freeze

    # Does prepending to a module reach the classes that already include it
    # (Ruby 3.0+)? Without that, a wrapper on Kernel would never be called.
    PREPEND_REACHES_INCLUDERS = begin
      mod = Module.new
      klass = Class.new { include mod }
      wrapper = Module.new
      mod.prepend(wrapper)
      klass.ancestors.include?(wrapper)
    end

    # A selector names a class or method the process does not define (yet:
    # --devmode waits for it).
    class NotDefined < ArgumentError; end

    # A selector's class or module is not defined in the process (its
    # library is not loaded, or the name is wrong).
    class NotLoaded < NotDefined
      attr_reader :path

      def initialize(path)
        @path = path
        super("no such class or module #{path}")
      end
    end

    CLASS_PATH = /\A(?<path>[A-Z]\w*(?:::[A-Z]\w*)*)(?<sep>[#.])(?<meth>[^\s#.(),]*)\z/.freeze
    BARE_METHOD = /\A[^\s#.(),:]+\z/.freeze

    module_function

    # Returns [owner or nil, method Symbol or nil, expressions or nil,
    # visibility Symbol when the method is traced by a wrapper, else nil,
    # the UnboundMethod when it is defined in Ruby (a TracePoint targets its
    # bytecode alone), else nil, the wrapper's arity (the method's own)].
    # A Ruby method is never wrapped: its TracePoint leaves it as it is
    # (frames, arity, parameters, owner, source_location, stack depth); a
    # wrapper is a C method of the original's arity, for C methods only.
    # Raises ArgumentError with a message meant for the user (NotLoaded when
    # the class is not defined).
    def parse(text)
      name, exprs = split_expressions(text.strip)
      owner, meth, via_alias = resolve(name)
      ruby = ruby_method(owner, meth)
      arity = !ruby && !exprs && !via_alias ? wrapper_arity(owner, meth) : nil
      [owner, meth, exprs, arity ? wrapper_visibility(owner, meth) : nil, ruby, arity, block_method?(ruby)]
    end

    # Whether a Ruby method is a block's (define_method with a block): Ruby
    # (3.1 to 3.3 at least) fires no call event for one to a second TracePoint
    # targeted at it, so ext/rbtrace/tracer.c gives it one TracePoint of both
    # events instead of one for calls and one for returns.
    def block_method?(method)
      return false unless method

      RubyVM::InstructionSequence.of(method).to_a[9] == :block
    rescue StandardError
      false
    end

    # The most arguments a wrapper of fixed arity takes (ext/rbtrace/wrapper.c
    # has one C function per arity up to it, and one for -1).
    WRAPPER_ARITY_MAX = 15

    # The wrapper's arity: the C method's own, where one of the wrapper's C
    # functions has it; nil (traced by the hook) where none does.
    def wrapper_arity(owner, meth)
      return nil if owner.nil? || meth.nil?

      arity = owner.instance_method(meth).arity
      arity.between?(-1, WRAPPER_ARITY_MAX) ? arity : nil
    rescue NameError, TypeError
      nil
    end

    # The method, if it has bytecode of its own (not C, not attr_reader).
    def ruby_method(owner, meth)
      return nil if owner.nil? || meth.nil? || !defined?(RubyVM::InstructionSequence)

      um = owner.instance_method(meth)
      RubyVM::InstructionSequence.of(um) ? um : nil
    rescue NameError, TypeError
      nil
    end

    # The wrapper's visibility (the method's), or nil where a wrapper may not
    # stand in for it (UNWRAPPABLE, refinements, Kernel before 3.0).
    def wrapper_visibility(owner, meth)
      return nil if owner.nil? || meth.nil? || UNWRAPPABLE.include?(meth)
      return nil if owner.instance_of?(Module) && !PREPEND_REACHES_INCLUDERS
      return nil if refinement?(owner)

      if owner.private_method_defined?(meth, false) then :private
      elsif owner.protected_method_defined?(meth, false) then :protected
      elsif owner.public_method_defined?(meth, false) then :public
      end
    end

    def refinement?(mod)
      defined?(Refinement) ? mod.is_a?(Refinement) : mod.inspect.start_with?('#<refinement:')
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
        elsif ['"', "'"].include?(c)
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
      raise NotLoaded, path
    end

    # The method's owner and original name: what the VM reports at each call;
    # and whether meth is an alias: a wrapper of a C method's original name
    # would not see the calls made through the alias (PG::Connection#exec), a
    # hook does. A Ruby method's alias shares its bytecode, and so its
    # TracePoint: calls through any of its names are seen, under the original.
    def owned_method(mod, meth, prefix)
      unless mod.method_defined?(meth) || mod.private_method_defined?(meth)
        raise NotDefined, "no such method #{prefix}#{meth}"
      end

      um = mod.instance_method(meth)
      [um.owner, um.original_name, um.original_name != meth.to_sym]
    end
  end

  def self.parse_selector(text)
    Selector.parse(text)
  end

  # ext/rbtrace/tracer.c: a TracePoint on one Ruby method's bytecode only.
  def self.enable_targeted(tracepoint, method)
    tracepoint.enable(target: method)
  end

  # --devmode (ext/rbtrace/devmode.c): [class path, the class now or nil]
  # for a selector that names a class, nil for one that does not (sleep).
  def self.devmode_target(text)
    name, = Selector.split_expressions(text.strip)
    m = Selector::CLASS_PATH.match(name)
    return nil unless m

    mod = begin
      Selector.constant(m[:path])
    rescue ArgumentError
      nil
    end
    [m[:path].dup.freeze, mod]
  end
end
