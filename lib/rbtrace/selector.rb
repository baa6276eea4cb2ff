require 'rbtrace/expression_check'

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
  # ever evaluated. Expressions are syntax-checked here, and for -m and -c
  # checked against their method (lib/rbtrace/expression_check.rb).
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
    # note names the library of the namespace that is defined, if any
    # ("Sidekiq is sidekiq 6.4.1": a class of another version, or of a
    # file the process did not require).
    class NotLoaded < NotDefined
      attr_reader :path, :note

      def initialize(path, note = nil)
        @path = path
        @note = note
        super("no such class or module #{path}#{note && " (#{note})"}")
      end
    end

    CLASS_PATH = /\A(?<path>[A-Z]\w*(?:::[A-Z]\w*)*)(?<sep>[#.])(?<meth>[^\s#.(),]*)\z/.freeze
    BARE_METHOD = /\A[^\s#.(),:]+\z/.freeze

    module_function

    # A parsed selector, read by name by ext/rbtrace/selector.c (the one
    # place that turns it into the C struct the tracer and --slow use):
    #   owner         the class or module the calls must be of, or nil (any)
    #   method_name   the method's original name (calls are shown under it),
    #                 a Symbol, or nil (any method)
    #   exprs         the trace expressions (frozen Strings, a frozen Array),
    #                 or nil
    #   notes         with check, a message for each expression left out, or
    #                 nil when there is none
    #   ruby_method   the UnboundMethod when it is defined in Ruby (a
    #                 TracePoint targets its bytecode alone), else nil
    #   block_method  whether ruby_method is a block's (define_method)
    #   visibility    a Symbol when the method is traced by a wrapper (its
    #                 visibility), else nil
    #   wrapped_name  the name the wrapper takes
    #   arity         the wrapper's arity (the method's own)
    Parsed = Struct.new(:owner, :method_name, :exprs, :notes, :ruby_method, :block_method,
                        :visibility, :wrapped_name, :arity, keyword_init: true)

    # The class a selector names (RBTrace.selector_class): its path, and
    # the class now, or nil while it is not defined.
    NamedClass = Struct.new(:path, :klass, keyword_init: true)

    # Returns a Parsed.
    # A Ruby method is never wrapped: its TracePoint leaves it as it is
    # (frames, arity, parameters, owner, source_location, stack depth); a
    # wrapper is a C method of the original's arity, for C methods only.
    # The method Symbol is the original name, which calls are shown under;
    # a selector naming an alias of a C method wraps the alias (a wrapper
    # sees only the calls through the name it takes): naming the original
    # and its aliases (tracers/pg.tracer) sees every call, with no hook.
    # Raises ArgumentError with a message meant for the user (NotLoaded when
    # the class is not defined).
    # With check, the expressions are checked against the method (see
    # lib/rbtrace/expression_check.rb): those that cannot work are left out,
    # and a message for each is in notes.
    def parse(text, check: false)
      name, exprs = split_expressions(text.strip)
      owner, meth, via_alias, called, home = resolve(name)
      ruby = ruby_method(owner, meth)
      block = block_method?(ruby)
      exprs, notes = ExpressionCheck.check(name, owner, meth, ruby, block, exprs, home) if check
      wrapped = via_alias && own_alias?(owner, called) ? called : meth
      arity = !ruby && !exprs && (wrapped == called || !via_alias) ? wrapper_arity(owner, wrapped) : nil
      visibility = arity ? wrapper_visibility(owner, wrapped, meth) : nil
      Parsed.new(owner: owner, method_name: meth, exprs: exprs, notes: notes.nil? || notes.empty? ? nil : notes,
                 ruby_method: ruby, block_method: block, visibility: visibility, wrapped_name: wrapped,
                 arity: arity)
    end

    # Whether owner itself holds the alias (a wrapper prepended to owner
    # comes first for the calls through it).
    def own_alias?(owner, name)
      owner.method_defined?(name, false) || owner.private_method_defined?(name, false)
    rescue ArgumentError, TypeError
      false
    end

    # Whether a Ruby method is a block's (define_method with a block): Ruby
    # (3.1 to 3.3 at least) fires no call event for one to a second TracePoint
    # targeted at it, so ext/rbtrace/trace.c gives it one TracePoint of both
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
    # stand in for it (UNWRAPPABLE, by its name or its original's;
    # refinements, Kernel before 3.0).
    def wrapper_visibility(owner, meth, original = meth)
      return nil if owner.nil? || meth.nil? || UNWRAPPABLE.include?(meth) || UNWRAPPABLE.include?(original)
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
        home = constant(m[:path])
        mod = m[:sep] == '.' ? home.singleton_class : home
        return [mod, nil, false, nil, home] if m[:meth].empty?

        owned_method(mod, m[:meth], m[:path] + m[:sep], home)
      elsif BARE_METHOD.match?(name)
        [nil, name.to_sym]
      else
        raise ArgumentError, 'not a selector (use meth, Class#meth, Class.meth, Class# or Class.)'
      end
    end

    def constant(path)
      found = []
      mod = path.split('::').inject(Object) { |scope, part| scope.const_get(part).tap { |c| found << [part, c] } }
      raise ArgumentError, "#{path} is not a class or module" unless mod.is_a?(Module)

      mod
    rescue NameError
      raise NotLoaded.new(path, namespace_note(found))
    end

    # "Sidekiq is sidekiq 6.4.1" for the deepest namespace of a missing
    # class that is defined, when its library is known; else nil.
    def namespace_note(found)
      return nil if found.empty?

      name = found.map(&:first).join('::')
      library = Library.of_module(found.last.last)
      library && "#{name} is #{library}"
    end

    # The method's owner and original name: what the VM reports at each call;
    # whether meth is an alias, and the name as called: a wrapper of a C
    # method's original name would not see the calls made through the alias
    # (pg 1.4's PG::Connection#async_exec), a wrapper of the alias does. A
    # Ruby method's alias shares its bytecode, and so its TracePoint: calls
    # through any of its names are seen, under the original.
    # home is the class the selector names (its library's version is in
    # the message of a method it does not have: renamed in this version?).
    def owned_method(mod, meth, prefix, home)
      unless mod.method_defined?(meth) || mod.private_method_defined?(meth)
        raise NotDefined, "no such method #{prefix}#{meth}#{Library.suffix(nil, home)}"
      end

      um = mod.instance_method(meth)
      [um.owner, um.original_name, um.original_name != meth.to_sym, meth.to_sym, home]
    end
  end

  # ext/rbtrace/selector.c: a selector parsed; with check (-m and -c), its
  # expressions checked against its method.
  def self.parse_selector(text, check)
    Selector.parse(text, check: check)
  end

  # TracePoint#enable as Ruby defines it, taken at load: an app that
  # redefines it or prepends a module to TracePoint later is not run.
  TRACEPOINT_ENABLE = TracePoint.instance_method(:enable)
  private_constant :TRACEPOINT_ENABLE

  # ext/rbtrace/trace.c: a TracePoint on one Ruby method's bytecode only.
  def self.enable_targeted(tracepoint, method)
    TRACEPOINT_ENABLE.bind_call(tracepoint, target: method)
  end

  # --devmode (ext/rbtrace/devmode.c, through ext/rbtrace/selector.c): the
  # class a selector names, by path (a frozen String), and the class now
  # (nil while it is not defined); nil for a selector that names no class
  # (sleep).
  def self.selector_class(text)
    name, = Selector.split_expressions(text.strip)
    m = Selector::CLASS_PATH.match(name)
    return nil unless m

    mod = begin
      Selector.constant(m[:path])
    rescue ArgumentError
      nil
    end
    Selector::NamedClass.new(path: m[:path].dup.freeze, klass: mod)
  end
end
