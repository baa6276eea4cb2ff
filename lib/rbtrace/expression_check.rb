require 'rbtrace/library'

module RBTrace
  # Trace expressions checked against their method, once, at attach: one
  # that names a bare local the method does not have (a library renamed a
  # parameter: Sidekiq 6's Processor#process(uow) became (work)) would
  # raise a NameError at every call, at a cost, and show nothing. It is
  # reported, with the library's version, and left out; the method is
  # traced without it. See docs/usage.md, "Checked at attach".
  #
  # The rule. An expression's bare names are its identifiers with no
  # receiver, arguments or parentheses that it does not assign itself
  # (`item` in `item["queue"]`; not `@x`, `self`, `Foo`, `x.y`'s `y`).
  # Such a name, evaluated in the method's binding (a Ruby method) or on
  # its receiver (a C method: instance_eval), is a local of the method's
  # or else a call on self. A name is missing, and its expression left out,
  # when it is
  # - not a local of the method (its parameters and other locals, all
  #   visible, nil before assigned, in the binding at the call); a C method
  #   has none (its arguments have no names);
  # - not a method (public, protected or private, inherited or mixed in)
  #   of the owner, nor of any class below it (a subclass; for a module's
  #   method, a class or singleton class that includes or extends it):
  #   self may be an instance of any of those;
  # - and no class among those has a method_missing of its own.
  # Anything else cannot be decided at attach and is kept: a selector with
  # no class (`sleep(x)`) or no method (`Dir.(x)`), a method defined by
  # define_method with a block (its binding sees the enclosing scope's
  # locals, which Ruby does not list), and every other expression. Not
  # seen: an instance of a class that has the name only as a singleton
  # method of its own (def obj.name, extend) when the method is a class's
  # (its expression is left out, and the message names the name).
  #
  # What it calls: RubyVM::AbstractSyntaxTree.parse on the expression,
  # UnboundMethod#parameters and the method's instruction sequence's local
  # table; Module's own method_defined?, private_method_defined?,
  # instance_method, <=, singleton_class?, Class#subclasses (Ruby's),
  # Kernel#instance_of? and BasicObject#equal?, each bound from where Ruby
  # defines it, so that an override in the app's classes is not called;
  # for a module's method (or without Ruby's Class#subclasses) one walk of
  # ObjectSpace.each_object(Module); and lib/rbtrace/library.rb for the
  # message. What is below the owner is only looked at for a name the
  # owner does not have. Never any method of the app's objects.
  module ExpressionCheck
    METHOD_DEFINED = Module.instance_method(:method_defined?)
    PRIVATE_METHOD_DEFINED = Module.instance_method(:private_method_defined?)
    INSTANCE_METHOD = Module.instance_method(:instance_method)
    BELOW = Module.instance_method(:<=)
    SINGLETON_CLASS = Module.instance_method(:singleton_class?)
    INSTANCE_OF = Kernel.instance_method(:instance_of?)
    EQUAL = BasicObject.instance_method(:equal?)
    # Ruby's own (3.1+), not one a library defined (Active Support 6.1's
    # walks the heap); nil if there is none.
    SUBCLASSES = (Class.instance_method(:subclasses) if Class.method_defined?(:subclasses) &&
                                                         Class.instance_method(:subclasses).source_location.nil?)

    module_function

    # [the expressions kept (nil if none), a message per expression left
    # out]. label is the selector without its expressions, home the named
    # class it resolved (the library's version is looked up from it).
    # rubocop:disable Metrics/ParameterLists -- the parsed selector's parts, as Selector.parse has them
    def check(label, owner, meth, ruby, block_method, exprs, home)
      return [exprs, []] unless exprs && owner && meth && defined?(RubyVM::AbstractSyntaxTree)

      locals = ruby ? local_names(ruby) : []
      return [exprs, []] if block_method || locals.nil?

      receivers = Receivers.new(owner)
      notes = []
      kept = exprs.reject do |expr|
        missing = bare_names(expr).find { |name| !locals.include?(name) && !receivers.respond?(name) }
        notes << message(label, INSTANCE_METHOD.bind_call(owner, meth), ruby, expr, missing, home) if missing
        missing
      end
      [kept.empty? ? nil : kept.freeze, notes]
    end
    # rubocop:enable Metrics/ParameterLists

    # The names of the method's locals, parameters first; nil if unknown.
    def local_names(method)
      iseq = RubyVM::InstructionSequence.of(method)
      return nil unless iseq

      iseq.to_a[10].grep(Symbol) | method.parameters.map { |_, name| name }.compact
    rescue StandardError
      nil
    end

    # The bare names of expr, in order, each once. __source__ alone is
    # rbtrace's own (lib/rbtrace/expressions.rb).
    def bare_names(expr)
      return [] if expr == '__source__'

      names = []
      walk(RubyVM::AbstractSyntaxTree.parse(expr)) do |node|
        names << node.children.first if node.type == :VCALL
      end
      names.uniq
    rescue SyntaxError, StandardError
      []
    end

    def walk(node, &block)
      return unless node.is_a?(RubyVM::AbstractSyntaxTree::Node)

      yield node
      node.children.each { |child| walk(child, &block) }
    end

    # The classes and modules self may be an instance of, when the owner's
    # method runs: the owner and everything below it, found only when the
    # owner alone does not answer.
    class Receivers
      def initialize(owner)
        @owner = owner
        @below = nil
      end

      def respond?(name)
        return true if ExpressionCheck.answers?(@owner, name)

        @below ||= ExpressionCheck.below(@owner)
        @below.any? { |mod| ExpressionCheck.answers?(mod, name) }
      end
    end

    # Whether a call of name on an instance of mod may succeed.
    def answers?(mod, name)
      defines?(mod, name) || own_method_missing?(mod)
    rescue StandardError
      true
    end

    def defines?(mod, name)
      METHOD_DEFINED.bind_call(mod, name) || PRIVATE_METHOD_DEFINED.bind_call(mod, name)
    end

    # A method_missing other than BasicObject's (which every class has; a
    # module has none unless it defines or includes one).
    def own_method_missing?(mod)
      defines?(mod, :method_missing) && INSTANCE_METHOD.bind_call(mod, :method_missing).owner != BasicObject
    end

    # A class's subclasses, all the way down (Ruby 3.1's Class#subclasses:
    # no walk of the heap); else (a module, whose includers Ruby does not
    # list, a singleton class, or an older Ruby) every module below it, by
    # one walk of the heap.
    def below(owner)
      plain_class = INSTANCE_OF.bind_call(owner, Class) && !SINGLETON_CLASS.bind_call(owner)
      return subclasses_of(owner) if SUBCLASSES && plain_class

      found = []
      ObjectSpace.each_object(Module) do |mod|
        found << mod if !EQUAL.bind_call(mod, owner) && BELOW.bind_call(mod, owner)
      end
      found
    end

    def subclasses_of(klass)
      direct = SUBCLASSES.bind_call(klass)
      direct + direct.flat_map { |sub| subclasses_of(sub) }
    end

    def message(label, method, ruby, expr, name, home)
      library = Library.suffix(ruby, home)
      what, fix =
        if ruby
          ["#{name} is neither a parameter of #{label}(#{signature(method)})#{library} nor a method of its receiver",
           "the method's parameters"]
        else
          ["#{name} is not a method of #{label}'s receiver (a C method#{library}: its arguments have " \
           'no names, its expressions run on the receiver)', 'the methods of its receiver']
        end
      "#{label}: #{what}: expression #{expr.inspect} left out (#{label} is traced without it); " \
        "correct it to use #{fix}"
    end

    # The parameters as the method's definition writes them: (x, y = ...,
    # *rest, k:, opt: ..., **opts, &block).
    def signature(method)
      method.parameters.map do |kind, name|
        case kind
        when :opt then "#{name} = ..."
        when :rest then "*#{name}"
        when :keyreq then "#{name}:"
        when :key then "#{name}: ..."
        when :keyrest then "**#{name}"
        when :nokey then '**nil'
        when :block then "&#{name}"
        else name.to_s
        end
      end.join(', ')
    end
  end
end
