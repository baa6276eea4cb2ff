# frozen_string_literal: true

# bench/thread_names.rb - what --thread-names costs an app: two threads,
# each calling Worker#step (a traced Ruby method: a TracePoint on it) in a
# loop, untraced, under -m Worker#step and under -m Worker#step
# --thread-names, side by side in one process, round after round (so that
# the machine's moods fall on every mode alike). Two workloads:
#
#   slices  each thread loops; the GVL changes hands when a time slice
#           ends (100 ms): a thread's name is read a few times a second
#   pass    each thread calls Thread.pass after every call of step: the
#           threads' calls alternate, and every call event follows the
#           other thread's, so every call reads its thread's name (the
#           worst case: docs/DESIGN.md, "Thread names")
#
# Each round, both threads make a fixed number of calls; the figure is the
# process's CPU time for them, and the ratio untraced's median over the
# mode's (1.00x: as fast). The client's output goes to a pipe read and
# dropped.
#
#   bundle exec rake compile && ruby bench/thread_names.rb
#
# BENCH_RUNS: rounds per mode (default 5); BENCH_CALLS: calls per thread
# and round (default 200_000).
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
CALLS = Integer(ENV.fetch('BENCH_CALLS', '200000'))

MODES = [
  ['untraced', nil],
  ['-m Worker#step', ['-m', 'Worker#step']],
  ['-m Worker#step --thread-names', ['-m', 'Worker#step', '--thread-names']]
].freeze

APP = <<~RUBY
  class Worker
    def step(i) = i + 1
  end
  $stdout.sync = true
  puts "ready"
  while (line = $stdin.gets)
    pass = line.start_with?('pass')
    t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    2.times.map do |n|
      Thread.new do
        Thread.current.name = "worker \#{n}"
        w = Worker.new
        i = 0
        while i < #{CALLS}
          w.step(i)
          i += 1
          Thread.pass if pass
        end
      end
    end.each(&:join)
    puts Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t
  end
RUBY

require_build!

results = interleaved_rounds(APP, %w[slices pass], MODES, RUNS) { |line| Float(line) }

puts "#### --thread-names: two threads calling a traced method (#{RUBY_DESCRIPTION})"
puts
puts "#{Time.now.utc.iso8601}, #{RUNS} rounds per mode, interleaved; #{CALLS} calls per thread and round; " \
     'ratio: untraced median / mode median'
puts
puts '| workload | mode | CPU s (median) | CPU ratio | per call over `-m` |'
puts '| --- | --- | ---: | ---: | ---: |'
%w[slices pass].each do |workload|
  base = median(results[[workload, 'untraced']])
  traced = median(results[[workload, '-m Worker#step']])
  MODES.each do |name, _|
    cpu = median(results[[workload, name]])
    over = name.include?('thread-names') ? format('%.0f ns', (cpu - traced) / (2 * CALLS) * 1e9) : ''
    puts format('| %s | %s | %.3f | %.2fx | %s |', workload, name, cpu, base / cpu, over)
  end
end
