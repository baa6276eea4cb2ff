# rakelib/lint.rake - the linters.
#
#   rake lint      both below; script/test runs it on the Ruby 3.1 leg
#   rake lint:ruby RuboCop over the project's Ruby (which files, and how:
#                  .rubocop.yml, and spec/ and bench/'s own)
#   rake lint:c    clang-format over the C sources (.clang-format), as a
#                  check (--dry-run --Werror) that rewrites nothing; it says
#                  how many lines each file has to change. To reformat:
#                  clang-format -i FILE...
#
# RuboCop is Debian's (the rubocop package, 1.39 on bookworm; script/setup
# installs it): one fixed version, run by Debian's Ruby, outside the bundle,
# so that the Gemfile the Rubies of the matrix share does not carry it.
# clang-format is Debian's too (the clang-format package).
require_relative 'build'

module Lint
  C_FILES = %w[ext/rbtrace/**/*.{c,h} test/c/*.{c,h} fuzz/*.c].freeze

  # Runs cmd outside Bundler's environment (under `bundle exec`,
  # RUBYOPT=-rbundler/setup would hide Debian's rubocop from its own Ruby).
  def self.unbundled(&block)
    defined?(Bundler) ? Bundler.with_unbundled_env(&block) : yield
  end

  def self.require_tool!(tool, package)
    return if system('sh', '-c', "command -v #{tool}", out: File::NULL)

    abort "rake lint: #{tool} not found: on Debian or Ubuntu, apt-get install -y #{package} " \
          '(script/setup does it)'
  end

  def self.c_files
    Dir.chdir(Build::ROOT) { C_FILES.flat_map { |glob| Dir[glob] }.sort }
  end
end

desc 'The linters: RuboCop (lint:ruby) and clang-format (lint:c)'
task lint: %w[lint:ruby lint:c]

namespace :lint do
  desc 'RuboCop over the Ruby of lib/, bench/, spec/, rakelib/, the Rakefile, the gemspec... (.rubocop.yml)'
  task :ruby do
    Lint.require_tool!('rubocop', 'rubocop')
    ok = Lint.unbundled { system('rubocop', '--format', 'simple', chdir: Build::ROOT) }
    abort 'rake lint:ruby: RuboCop found offenses (above); `rubocop -a FILE` corrects the safe ones' unless ok
  end

  desc 'clang-format --dry-run --Werror over ext/rbtrace, test/c and fuzz/ (.clang-format): rewrites nothing'
  task :c do
    Lint.require_tool!('clang-format', 'clang-format')
    files = Lint.c_files
    out = IO.popen(['clang-format', '--dry-run', '--Werror', *files], chdir: Build::ROOT, err: %i[child out], &:read)
    ok = $?.success?
    counts = out.scan(/^(\S+?):\d+:\d+: error: code should be clang-formatted/).flatten.tally
    counts.sort_by { |f, n| [-n, f] }.each { |f, n| puts format('%5d  %s', n, f) }
    puts out unless ok || !counts.empty? # clang-format's own error
    $stdout.flush
    unless ok
      abort "rake lint:c: #{counts.values.sum} places in #{counts.size} of #{files.size} files are not " \
            'as .clang-format has them; clang-format -i FILE reformats one'
    end
    puts "rake lint:c: #{files.size} files formatted as .clang-format has them"
  end
end
