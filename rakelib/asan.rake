# rakelib/asan.rake - `rake test:asan`: the end-to-end specs with the
# extension (and the client) built with AddressSanitizer and UBSan.
#
# Debian's Ruby is not built with ASan, so the extension is built apart
# (RBTRACE_ASAN=1 in extconf.rb, in tmp/asan/build), put with links to lib/
# into tmp/asan/lib, and the specs run against that copy (RBTRACE_SPEC_LIB),
# with the ASan runtime preloaded into every target and client they start
# (RBTRACE_SPEC_PRELOAD: LD_PRELOAD=$(gcc -print-file-name=libasan.so)) but
# not into rspec itself (ASan's allocator made its polling of a busy trace's
# output file crawl). use_sigaltstack=0: ASan's thread exit otherwise
# fails on the signal stack Ruby set up for it. Leak detection is off:
# Ruby frees little at exit, and its "leaks" would drown ours. Every report
# goes to tmp/asan/logs/ (ASAN_OPTIONS/UBSAN_OPTIONS log_path, one file per
# process); the task fails if a spec fails or any report was written.
#
#   rake test:asan                       spec/e2e, all of it
#   rake test:asan SPEC=spec/e2e/x_spec.rb   some of it
require_relative 'build'

module ASanRun
  extend FileUtils
  DIR = Build.tmp('asan')

  def self.runtime
    path = `#{Build.cc} -print-file-name=libasan.so`.strip
    return path if File.exist?(path)

    abort 'rake test:asan: the ASan runtime (libasan.so) was not found: install gcc (build-essential)'
  end

  def self.build
    build = File.join(DIR, 'build')
    rm_rf build
    mkdir_p build
    Dir.chdir(build) do
      sh({ 'RBTRACE_ASAN' => '1', 'RBTRACE_WERROR' => '1' }, RbConfig.ruby, Build::EXTCONF, out: 'extconf.log')
      sh 'make', '-j1', out: 'make.log'
    end
    # lib/ as symbolic links (a file the app loads from both places, as
    # Bundler does the gemspec's version.rb, is loaded once), but for the
    # ASan builds
    lib = File.join(DIR, 'lib')
    rm_rf lib
    sh 'cp', '-rs', File.join(Build::ROOT, 'lib'), lib
    %w[rbtrace.so rbtrace-client rbtrace_boot.so].each do |f|
      rm_f File.join(lib, 'rbtrace', f)
      cp File.join(build, f), File.join(lib, 'rbtrace', f)
    end
    # the client finds the shipped tracer files at ../../tracers from itself
    ln_sf File.join(Build::ROOT, 'tracers'), File.join(DIR, 'tracers') unless File.exist?(File.join(DIR, 'tracers'))
    lib
  end
end

namespace :test do
  desc 'The end-to-end specs with the extension and client built with ASan and UBSan (SPEC=... for some)'
  task :asan do
    lib = ASanRun.build
    logs = File.join(ASanRun::DIR, 'logs')
    rm_rf logs
    mkdir_p logs
    env = {
      'RBTRACE_SPEC_LIB' => lib,
      'RBTRACE_SPEC_PRELOAD' => ASanRun.runtime,
      'ASAN_OPTIONS' => "detect_leaks=0:use_sigaltstack=0:log_path=#{logs}/asan",
      'UBSAN_OPTIONS' => "print_stacktrace=1:log_path=#{logs}/ubsan"
    }
    started = Time.now
    ok = system(env, RbConfig.ruby, '-S', 'rspec', *(ENV['SPEC'] || 'spec/e2e').split)
    reports = Dir[File.join(logs, '*')]
    reports.each { |f| warn "== #{f}\n#{File.read(f)}" }
    puts format('rake test:asan: specs %s in %.0f s; %d sanitizer reports',
                ok ? 'passed' : 'FAILED', Time.now - started, reports.size)
    abort 'rake test:asan failed' unless ok && reports.empty?
  end
end
