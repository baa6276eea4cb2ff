# frozen_string_literal: true

# bench/gvl.rb - what --gvl costs an app: two threads of CPU-bound Ruby,
# untraced, under --gvl, under -m Worker#crunch (the method the threads
# call, one call per 10,000 loop iterations) without and with --gvl, side
# by side in one process, round after round (untraced, --gvl, -m, -m +
# --gvl, untraced, ...),
# so that the machine's moods fall on every mode alike. Two workloads:
#
#   slices  each thread loops; the GVL changes hands when a thread's time
#           slice ends (100 ms): the app as most see it, ~20 waits a second
#   pass    each thread calls Thread.pass every 100 iterations: a GVL hand-off
#           every few microseconds, the hook's worst case (every hand-off is
#           two hook calls and a GVL event)
#
# Each round, both threads do a fixed amount of work; the figure is its
# time, the process's CPU time (other processes move it less than wall
# time), and the ratio is untraced's median over the mode's (1.00x: as
# fast; 0.50x: half as fast).
#
#   bundle exec rake compile && ruby bench/gvl.rb
#
# BENCH_RUNS: rounds per mode (default 5); BENCH_WORK: loop iterations per
# thread and round (default 10_000_000).
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
WORK = Integer(ENV.fetch('BENCH_WORK', '10000000'))

MODES = [
  ['untraced', nil],
  ['--gvl', ['--gvl']],
  ['-m Worker#crunch', ['-m', 'Worker#crunch']],
  ['-m Worker#crunch --gvl', ['-m', 'Worker#crunch', '--gvl']]
].freeze

APP = <<~RUBY
  class Worker
    def crunch(n, pass)
      x = 0
      i = 0
      while i < n
        x += i
        i += 1
        Thread.pass if pass && i % 100 == 0
      end
      x
    end
  end
  $stdout.sync = true
  puts "ready"
  while (line = $stdin.gets)
    pass = line.start_with?('pass')
    t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    2.times.map do
      Thread.new { worker = Worker.new; (#{WORK} / 10_000).times { worker.crunch(10_000, pass) } }
    end.each(&:join)
    puts [Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t,
          Process.clock_gettime(Process::CLOCK_MONOTONIC) - started].join(' ')
  end
RUBY

require_build!
unless IO.popen([RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', 'print RBTrace.gvl_supported?'], &:read) == 'true'
  puts "bench/gvl.rb: not run: #{RUBY_DESCRIPTION} has no thread event hooks (--gvl needs Ruby 3.2+)"
  exit 0 # bench/all goes on
end

results = interleaved_rounds(APP, %w[slices pass], MODES, RUNS) { |line| line.split.map { |v| Float(v) } }

puts "#### --gvl: two threads of CPU-bound Ruby (#{RUBY_DESCRIPTION})"
puts
puts "#{Time.now.utc.iso8601}, #{RUNS} rounds per mode, interleaved; #{WORK} iterations per thread and round; " \
     'ratio: untraced median / mode median'
puts
puts '| workload | mode | CPU s (median) | CPU ratio | wall s (median) | wall ratio |'
puts '| --- | --- | --- | --- | --- | --- |'
%w[slices pass].each do |workload|
  base_cpu = median(results[[workload, 'untraced']].map(&:first))
  base_wall = median(results[[workload, 'untraced']].map(&:last))
  MODES.each do |name, _|
    cpu = median(results[[workload, name]].map(&:first))
    wall = median(results[[workload, name]].map(&:last))
    puts format('| %s | %s | %.3f | %.2fx | %.3f | %.2fx |', workload, name, cpu, base_cpu / cpu, wall,
                base_wall / wall)
  end
end
