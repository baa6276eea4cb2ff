# rakelib/fuzz.rake - the libFuzzer harnesses of fuzz/: command, event,
# escape, convert (clang, Debian's clang and libclang-rt-dev packages; script/setup
# installs them).
#
#   rake test:fuzz          builds them, runs each for FUZZ_SECONDS (30) over
#                           the committed corpus; a crash, leak, sanitizer
#                           report or failed invariant fails the task (CI)
#   rake fuzz:long          the same for FUZZ_SECONDS (600) each, then merges
#                           what it found into fuzz/corpus (fuzz/RESULTS.md);
#                           FUZZ_HARNESS=event for one of them
#   rake fuzz:seeds         writes the seed files from the real encoders
#   rake fuzz:repro[FILE]   runs one input through every harness
#
# One process per harness, one at a time (no -jobs/-workers): one core.
require_relative 'build'

module Fuzz
  extend FileUtils
  DIR = File.join(Build::ROOT, 'fuzz')
  OUT = Build.tmp('fuzz')
  CFLAGS = %w[-std=gnu99 -g -O1 -Wall -Wextra -Werror -fno-omit-frame-pointer
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined].freeze
  INCLUDES = ["-I#{Build::EXT}", "-I#{Build::EXT}/cli", "-I#{Build::EXT}/cli/formats"].freeze
  # The formats, every one (format.c opens each): ext/rbtrace/cli/formats.
  FORMATS = Dir["#{Build::EXT}/cli/formats/*.c"].sort.map { |f| f.delete_prefix("#{Build::EXT}/") }.freeze
  ENV_VARS = { 'UBSAN_OPTIONS' => 'print_stacktrace=1:halt_on_error=1',
               'ASAN_OPTIONS' => 'detect_leaks=1' }.freeze
  # Each harness and the sources it links besides ext/rbtrace/codec.c.
  HARNESSES = {
    'command' => [],
    'event' => %w[cli/stream.c cli/render.c cli/escape.c cli/calls.c cli/id_index.c cli/json.c
                  cli/alloc_report.c] + FORMATS,
    'escape' => %w[cli/escape.c],
    'convert' => %w[cli/convert.c cli/calls.c cli/id_index.c cli/json.c cli/render.c cli/escape.c
                    cli/alloc_report.c] + FORMATS
  }.freeze

  def self.clang
    ENV['FUZZ_CC'] || 'clang'
  end

  def self.require_clang!
    return if system(clang, '--version', out: File::NULL, err: File::NULL)

    abort <<~MSG
      rake test:fuzz: #{clang} not found: the fuzzers need clang with libFuzzer.
      On Debian or Ubuntu: apt-get install -y clang libclang-rt-dev (script/setup does it).
    MSG
  end

  def self.build(name)
    Fuzz.require_clang!
    mkdir_p OUT
    bin = File.join(OUT, "fuzz_#{name}")
    sources = [File.join(DIR, "fuzz_#{name}.c"), File.join(Build::EXT, 'codec.c')] +
              HARNESSES.fetch(name).map { |s| File.join(Build::EXT, s) }
    cmd = [clang, *CFLAGS, *INCLUDES, *Build.msgpack_cflags, Build.version_define, '-o', bin, *sources,
           *Build.msgpack_libs, '-lz']
    puts cmd.join(' ')
    return bin if system(*cmd)

    abort "rake test:fuzz: building fuzz_#{name} failed. If the linker cannot find " \
          'libclang_rt.fuzzer or libclang_rt.asan, install libclang-rt-dev ' \
          '(Debian ships libFuzzer and the sanitizer runtimes there).'
  end

  # Runs one harness for seconds over the committed corpus (read only:
  # new inputs go to tmp/fuzz/corpus-NAME). Returns libFuzzer's final
  # stats, or aborts the task on a finding.
  def self.run(name, seconds)
    bin = build(name)
    work = File.join(OUT, "corpus-#{name}")
    artifacts = File.join(OUT, 'artifacts')
    mkdir_p [work, artifacts]
    log = File.join(OUT, "fuzz_#{name}.log")
    args = [bin, "-max_total_time=#{seconds}", '-timeout=10', '-rss_limit_mb=2048',
            '-print_final_stats=1', "-artifact_prefix=#{artifacts}/#{name}-",
            "-dict=#{File.join(DIR, "#{name}.dict")}", work, File.join(DIR, 'corpus', name)]
    puts "== fuzz_#{name}: #{seconds} s (log: #{log})"
    ok = system(ENV_VARS, *args, err: log, out: log)
    text = File.read(log)
    stats = text.scan(/^stat::(\w+):\s+(\d+)/).to_h
    unless ok
      warn text.lines.last(60).join
      abort "rake test:fuzz: fuzz_#{name} FAILED: a crash, leak, sanitizer report or failed " \
            "check (the input is in #{artifacts}/#{name}-*; replay it with " \
            "#{bin} FILE, then add it to fuzz/corpus/#{name}/ once fixed)"
    end
    runs = stats['number_of_executed_units'].to_i
    corpus = text.scan(%r{corp: (\d+)/(\S+)}).last
    puts format('   %d runs in %d s (%d/s), corpus %s inputs / %s, peak RSS %s MB, no crash',
                runs, seconds, stats['average_exec_per_sec'].to_i,
                corpus&.first, corpus&.last, stats['peak_rss_mb'])
    stats
  end
end

namespace :test do
  desc "Fuzz the command decoder, the client's event decoder, its escaper and --convert's reader " \
       '(libFuzzer, ASan, UBSan) for FUZZ_SECONDS (30) each'
  task :fuzz do
    seconds = Integer(ENV.fetch('FUZZ_SECONDS', '30'))
    Fuzz::HARNESSES.each_key { |name| Fuzz.run(name, seconds) }
    puts 'fuzzing passed: no crash, leak, sanitizer report or failed check'
  end
end

namespace :fuzz do
  desc 'Long fuzzing run (FUZZ_SECONDS, 600, per harness), then merge new coverage into fuzz/corpus'
  task :long do
    seconds = Integer(ENV.fetch('FUZZ_SECONDS', '600'))
    (ENV['FUZZ_HARNESS'] || Fuzz::HARNESSES.keys.join(' ')).split.each do |name|
      Fuzz.run(name, seconds)
      bin = File.join(Fuzz::OUT, "fuzz_#{name}")
      sh bin, '-merge=1', File.join(Fuzz::DIR, 'corpus', name), File.join(Fuzz::OUT, "corpus-#{name}"),
         err: File::NULL
    end
  end

  desc 'Write the seed corpora (fuzz/corpus/*) from the real encoders'
  task :seeds do
    mkdir_p Fuzz::OUT
    bin = File.join(Fuzz::OUT, 'seeds')
    sh Build.cc, '-std=gnu99', '-Wall', '-Wextra', '-Werror', "-I#{Build::EXT}", *Build.msgpack_cflags, '-o', bin,
       File.join(Fuzz::DIR, 'seeds.c'), File.join(Build::EXT, 'codec.c'), *Build.msgpack_libs
    Fuzz::HARNESSES.each_key { |name| mkdir_p File.join(Fuzz::DIR, 'corpus', name) }
    sh bin, File.join(Fuzz::DIR, 'corpus')
  end

  desc 'Run one input (FILE) through every harness'
  task :repro, [:file] do |_, args|
    Fuzz::HARNESSES.each_key do |name|
      ok = system(Fuzz::ENV_VARS, Fuzz.build(name), args.fetch(:file))
      puts "fuzz_#{name}: #{ok ? 'ok' : 'FAILED'}"
    end
  end
end
