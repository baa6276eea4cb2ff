module RBTrace
  # Which library a class or method comes from ("sidekiq 6.4.1", "Ruby
  # 3.1.2"), for the messages of a selector or trace expression that does
  # not match the version the process runs (docs/usage.md, "Checked at
  # attach"). Read from what the process already holds: source
  # locations and Gem.loaded_specs (the gems it activated). Asked at
  # attach, for a message, never per call; nil when it cannot tell (a gem
  # loaded without RubyGems, such as Debian's vendor_ruby packages, or a
  # file of the app's own).
  module Library
    MODULE_NAME = Module.instance_method(:name)
    SINGLETON_CLASS = Module.instance_method(:singleton_class?)
    CONST_SOURCE_LOCATION = Module.instance_method(:const_source_location)

    module_function

    # " in NAME VERSION", or "" when unknown: the library of the Ruby
    # method um (UnboundMethod) if it has a source file, else of home, the
    # named class or module the selector resolved.
    def suffix(um, home)
      name = (um && of_path(um.source_location&.first)) || of_module(home)
      name ? " in #{name}" : ''
    rescue StandardError
      ''
    end

    # The library that defined mod's constant: Ruby's for a class defined
    # as Ruby boots (a core class: no source location at all); else the
    # one owning the file, a C extension's .so included.
    def of_module(mod)
      return nil unless mod.is_a?(Module) && !SINGLETON_CLASS.bind_call(mod)

      path = MODULE_NAME.bind_call(mod)
      return nil unless path

      loc = CONST_SOURCE_LOCATION.bind_call(Object, path)
      return nil unless loc

      loc.empty? ? ruby : of_path(loc.first)
    end

    def of_path(path)
      return nil unless path.is_a?(String)
      return ruby if path.start_with?('<internal:')

      spec = gem_of(path)
      return "#{spec.name} #{spec.version}" if spec

      ruby_dirs.any? { |dir| path.start_with?(dir) } ? ruby : nil
    end

    def ruby
      "Ruby #{RUBY_VERSION}"
    end

    # The activated gem whose directory holds path, or the default gem
    # (a gem shipped inside Ruby's own library directory) that lists it.
    # The default gems' file lists are only read for a file in Ruby's
    # directories (the first read of one may load its gemspec).
    def gem_of(path)
      return nil unless defined?(Gem.loaded_specs)

      specs = Gem.loaded_specs.values
      found = specs.find { |spec| path.start_with?(File.join(spec.full_gem_path, '')) }
      return found if found

      dir = ruby_dirs.find { |d| path.start_with?(d) }
      dir && specs.find { |spec| default_gem_file?(spec, path[dir.size..]) }
    end

    def default_gem_file?(spec, relative)
      return false unless spec.respond_to?(:default_gem?) && spec.default_gem?

      spec.files.include?(relative) || spec.files.include?("lib/#{relative}")
    end

    # Ruby's own library directories, each ending in "/".
    def ruby_dirs
      return [] unless defined?(RbConfig::CONFIG)

      %w[rubylibdir rubyarchdir].map { |key| RbConfig::CONFIG[key] }.compact.map { |d| File.join(d, '') }
    end
  end
end
