# frozen_string_literal: true

# bench/hook_floor.rb - the least a global call/return hook costs on this
# Ruby: the two loops of bench/per_call.rb (Ruby method calls, C method
# calls), untraced, then with a C hook on call, return, c_call and c_return
# (RAW_ARG) that does nothing, that reads the method and class, and that
# also reads clock_gettime, or the TSC; last a plain hook (not RAW_ARG,
# like rbtrace's) that gets the method and class as rbtrace's hook does,
# and reads the TSC. What rbtrace's hook adds beyond that last one is its
# own (bench/per_call.rb measures both, in one process). Builds
# bench/hook_floor/ (a tiny extension, not part of rbtrace) into tmp/ for
# the running Ruby.
#
#   ruby bench/hook_floor.rb        # BENCH_RUNS (default 5), BENCH_ITERS (1_000_000)
require 'rbconfig'
require 'time'

require_relative 'support'
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
ITERS = Integer(ENV.fetch('BENCH_ITERS', '1000000'))

$LOAD_PATH.unshift(BenchSupport.build_hook_floor)
require 'hook_floor'

def m(x) = x

H = { 1 => 2 }.freeze

# CPU time of this thread for ITERS iterations of the loop of bench/per_call.rb
# (3 calls each: the method, Integer#<, Integer#+): m(i), a Ruby method, or
# H.key?(i), a C method. Two loops written out, not one taking a block: a
# block would add a call of its own to every iteration.
def loop_cpu(c_method)
  t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  i = 0
  if c_method
    while i < ITERS
      H.key?(i)
      i += 1
    end
  else
    while i < ITERS
      m(i)
      i += 1
    end
  end
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t
end

def measure(c_method) = BenchSupport.median(Array.new(RUNS) { loop_cpu(c_method) })

def row(label, times, bases)
  cells = times.zip(bases).map do |t, base|
    base ? format('%.1f | %.1f ns', t * 1e9 / ITERS, (t - base) * 1e9 / ITERS / 3) : format('%.1f | -', t * 1e9 / ITERS)
  end
  puts "| #{label} | #{cells.join(' | ')} |"
end

LOOPS = [false, true].freeze
LOOPS.each { |c| loop_cpu(c) } # warm up
bases = LOOPS.map { |c| measure(c) }
puts "Floor of a global hook: #{ITERS} iterations of a loop calling a Ruby method, then one calling a C method, median of #{RUNS}, thread CPU time"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts
puts '| hook | Ruby method: ns/iteration | added per call (2 events) | C method: ns/iteration | added per call (2 events) |'
puts '| --- | ---: | ---: | ---: | ---: |'
row('none', bases, [nil, nil])
{ empty: 'does nothing', names: 'reads method and class', names_clock: '... and clock_gettime',
  names_tsc: '... and the TSC (x86-64)',
  plain_tsc: 'plain hook (as rbtrace\'s): method and class, and the TSC' }.each do |kind, label|
  HookFloor.on(kind)
  times = LOOPS.map { |c| measure(c) }
  HookFloor.off(kind)
  row(label, times, bases)
end
puts
puts 'Each iteration makes 3 calls a global hook sees (the method, Integer#<, Integer#+):'
puts '"added per call" is a third of what an iteration gained, as in bench/per_call.rb.'
