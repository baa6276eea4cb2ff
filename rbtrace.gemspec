require_relative 'lib/rbtrace/version'

Gem::Specification.new do |s|
  s.name = 'rbtrace'
  s.version = RBTrace::VERSION
  s.summary = 'strace for Ruby code: attach to a running process and trace its method calls'
  s.description = <<~DESC
    rbtrace shows the method calls of a running Ruby process live, with their
    durations, and runs Ruby inside it on request. A C extension in the app and a
    standalone C client talk over a private message queue and a Unix socket.
  DESC
  s.authors = ['rbtrace developers']
  s.license = 'MIT'
  s.required_ruby_version = '>= 2.7'
  # docs/rbtrace.1 is the man page. RubyGems installs it with the gem's other
  # files (gem contents rbtrace) and puts it on no MANPATH: `man` opens it by
  # path (see the README, "Install").
  s.files = Dir['ext/rbtrace/**/*.{c,h,rb}', 'lib/**/*.rb', 'bin/rbtrace', 'tracers/*.tracer',
                'docs/rbtrace.1', 'docs/*.md', 'README.md', 'CHANGELOG.md', 'LICENSE']
  s.extensions = ['ext/rbtrace/extconf.rb']
  s.bindir = 'bin'
  s.executables = ['rbtrace']
  s.require_paths = ['lib']
  s.metadata['rubygems_mfa_required'] = 'true'
end
