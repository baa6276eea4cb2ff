# rakelib/ctest.rake - `rake test:c`: the C unit tests (test/c) and the
# client, built with AddressSanitizer and UBSan, then run. Any compiler
# warning, test failure or sanitizer report fails the task.
require_relative 'build'

module CTest
  extend FileUtils
  OUT = Build.tmp('ctest')
  CFLAGS = %w[-std=gnu99 -g -O1 -Wall -Wextra -Werror
              -fsanitize=address,undefined -fno-omit-frame-pointer
              -fno-sanitize-recover=undefined].freeze
  INCLUDES = ["-I#{Build::EXT}", "-I#{Build::EXT}/cli", "-I#{Build::EXT}/cli/formats", "-I#{Build::ROOT}/test/c"].freeze
  ENV_VARS = { 'UBSAN_OPTIONS' => 'print_stacktrace=1:halt_on_error=1' }.freeze
  # Each test and the client sources it links besides ext/rbtrace/codec.c.
  TESTS = {
    'test_codec' => [],
    'test_render' => %w[cli/render.c cli/alloc_report.c cli/escape.c],
    'test_escape' => %w[cli/escape.c],
    'test_options' => %w[cli/options.c cli/tracers.c],
    'test_reports' => %w[cli/reports.c cli/options.c cli/tracers.c],
    'test_tracers' => %w[cli/options.c cli/tracers.c],
    'test_ring' => %w[ring.c],
    'test_clock' => %w[clock_tsc.c],
    'test_procfs' => %w[cli/procfs.c],
    'test_unfinished' => %w[cli/unfinished.c],
    'test_convert' => %w[cli/convert.c cli/id_index.c],
    'test_formats' => %w[cli/stream.c cli/calls.c cli/id_index.c cli/json.c cli/render.c
                         cli/alloc_report.c cli/escape.c] +
                      Dir["#{Build::EXT}/cli/formats/*.c"].sort.map { |f| f.delete_prefix("#{Build::EXT}/") }
  }.freeze

  # Compiles sources (with the sanitizers) into bin, linked with msgpack-c.
  def self.build(bin, sources, flags: [], libs: [])
    sh Build.cc, *CFLAGS, *INCLUDES, *Build.msgpack_cflags, Build.version_define, *flags, '-o', bin, *sources,
       *Build.msgpack_libs, *libs
  end
end

namespace :test do
  desc 'Build and run the C unit tests (codec, renderer, escaper, options, tracer files, ring, clock, ' \
       'procfs, unfinished entries, the --convert reader) under ASan and UBSan'
  task :c do
    mkdir_p CTest::OUT
    failed = []
    CTest::TESTS.each do |name, srcs|
      bin = File.join(CTest::OUT, name)
      sources = ["#{Build::ROOT}/test/c/#{name}.c", "#{Build::EXT}/codec.c"] +
                srcs.map { |s| File.join(Build::EXT, s) }
      CTest.build(bin, sources, libs: ['-lpthread', '-lz'])
      puts "== #{name}"
      failed << name unless system(CTest::ENV_VARS, bin)
    end

    # The client itself, once, under the sanitizers: it must build and answer.
    client = File.join(CTest::OUT, 'rbtrace-client-asan')
    CTest.build(client, [*Dir["#{Build::EXT}/cli/*.c", "#{Build::EXT}/cli/formats/*.c"].sort, "#{Build::EXT}/codec.c"],
                libs: ['-lz'])
    puts '== rbtrace-client (ASan)'
    version = `#{client} --version`
    failed << 'client --version' unless $?.success? && version == "rbtrace #{RBTrace::VERSION}\n"
    system(client, '--bogus', err: File::NULL)
    failed << 'client usage exit code' unless $?.exitstatus == 2

    abort "C tests failed: #{failed.join(', ')}" unless failed.empty?
    puts 'C tests passed'
  end
end
