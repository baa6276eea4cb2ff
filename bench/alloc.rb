# frozen_string_literal: true

# bench/alloc.rb - what --alloc costs an app: one thread in an
# allocation-heavy loop (Worker#churn: 3 objects an iteration, a String,
# an Array and a Hash; ~10 million objects a second untraced), untraced
# and under --alloc at several --alloc-sample rates, and -m Worker#churn
# (one call per 10,000 iterations) with --alloc, side by side in one
# process, round after round (untraced, --alloc-sample 1, ..., untraced,
# ...), so that the machine's moods fall on every mode alike.
#
# Each round does a fixed amount of work; the figure is its time, the
# process's CPU time (other processes move it less than wall time), and
# the ratio is untraced's median over the mode's (1.00x: as fast; 0.50x:
# half as fast). The default --alloc-sample (options.c) is the smallest
# rate that keeps the app at 0.5x or better here.
#
# With BENCH_VERNIER=DIR (a GEM_HOME where `gem install vernier
# --install-dir DIR` put vernier, Ruby 3.2.1+), the same loop under
# Vernier.profile(allocation_interval: N) too, in a process of its own
# (vernier profiles the process it runs in; it cannot attach), against
# untraced rounds of that process.
#
#   bundle exec rake compile && ruby bench/alloc.rb
#   BENCH_VERNIER=/tmp/vernier-gems ruby bench/alloc.rb
#
# BENCH_RUNS: rounds per mode (default 5); BENCH_WORK: loop iterations per
# round (default 3_000_000).
require 'open3'
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
WORK = Integer(ENV.fetch('BENCH_WORK', '3000000'))
SAMPLES = [1, 4, 16, 64, 256].freeze
VERNIER = ENV.fetch('BENCH_VERNIER', nil)
# vernier keeps a stack per sampled object: at intervals of 1 and 4 a
# round of 9 million objects ran for minutes (1.12.0, Ruby 3.4).
VERNIER_INTERVALS = [16, 64, 256].freeze

MODES = [['untraced', nil]] +
        SAMPLES.map { |n| ["--alloc-sample #{n}", ['--alloc-sample', n.to_s]] } +
        [['-m Worker#churn --alloc', ['-m', 'Worker#churn', '--alloc']]]

WORKER = <<~RUBY
  class Worker
    def churn(n)
      i = 0
      while i < n
        s = "x" * 8
        a = [i, s]
        h = { i => a }
        i += 1
      end
      h
    end
  end
  $stdout.sync = true
  # One round: [cpu seconds, wall seconds].
  def bench_round
    t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    worker = Worker.new
    (#{WORK} / 10_000).times { worker.churn(10_000) }
    [Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t,
     Process.clock_gettime(Process::CLOCK_MONOTONIC) - started].join(' ')
  end
RUBY

APP = <<~RUBY
  #{WORKER}
  puts "ready"
  puts bench_round while $stdin.gets
RUBY

# The same rounds in a process with vernier: "untraced" or an interval.
VERNIER_APP = <<~RUBY
  require 'vernier'
  #{WORKER}
  puts "ready"
  while (line = $stdin.gets)
    line = line.strip
    if line == 'untraced'
      puts bench_round
    else
      result = nil
      Vernier.profile(out: File::NULL, allocation_interval: Integer(line)) { result = bench_round }
      puts result
    end
  end
RUBY

def table_rows(results, modes)
  base_cpu = median(results['untraced'].map(&:first))
  base_wall = median(results['untraced'].map(&:last))
  modes.map do |name|
    cpu = median(results[name].map(&:first))
    wall = median(results[name].map(&:last))
    format('| %s | %.3f | %.2fx | %.3f | %.2fx |', name, cpu, base_cpu / cpu, wall, base_wall / wall)
  end
end

require_build!
# One workload: the app answers any line with a round.
results = interleaved_rounds(APP, ['go'], MODES, RUNS) { |line| line.split.map { |v| Float(v) } }
          .transform_keys(&:last)

puts "#### --alloc: one thread allocating 3 objects an iteration (#{RUBY_DESCRIPTION})"
puts
puts "#{Time.now.utc.iso8601}, #{RUNS} rounds per mode, interleaved; #{WORK} iterations (#{3 * WORK} objects) " \
     'per round; ratio: untraced median / mode median'
puts
puts '| mode | CPU s (median) | CPU ratio | wall s (median) | wall ratio |'
puts '| --- | --- | --- | --- | --- |'
puts table_rows(results, MODES.map(&:first))

if VERNIER
  vmodes = ['untraced'] + VERNIER_INTERVALS.map(&:to_s)
  env = { 'GEM_HOME' => VERNIER, 'GEM_PATH' => VERNIER }
  v_in, v_out, v_err, v = Open3.popen3(env, RbConfig.ruby, '-e', VERNIER_APP)
  if v_out.gets.nil?
    puts
    puts "vernier: not run: #{v_err.read.lines.first&.strip}"
  else
    v_in.puts('untraced')
    v_out.gets
    vres = Hash.new { |h, k| h[k] = [] }
    RUNS.times do
      vmodes.each do |m|
        v_in.puts(m)
        vres[m == 'untraced' ? m : "vernier allocation_interval: #{m}"] << v_out.gets.split.map { |x| Float(x) }
      end
    end
    v_in.close
    v.value
    puts
    puts "vernier #{`GEM_HOME=#{VERNIER} #{RbConfig.ruby} -e 'require "vernier"; print Vernier::VERSION'`} on the " \
         'same loop, in a process of its own (Vernier.profile around each round):'
    puts
    puts '| mode | CPU s (median) | CPU ratio | wall s (median) | wall ratio |'
    puts '| --- | --- | --- | --- | --- |'
    puts table_rows(vres, ['untraced'] + VERNIER_INTERVALS.map { |n| "vernier allocation_interval: #{n}" })
  end
end
