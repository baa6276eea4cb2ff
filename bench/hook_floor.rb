# frozen_string_literal: true

# bench/hook_floor.rb - the least a global call/return hook costs on this
# Ruby: a tight loop of Ruby method calls (as bench/per_call.rb's), untraced,
# then with a C hook on call, return, c_call and c_return (RAW_ARG, like
# rbtrace's) that does nothing, that reads the method and class, and that
# also reads clock_gettime, or the TSC. What rbtrace's hook adds beyond these is its own
# (bench/per_call.rb measures the whole). Builds bench/hook_floor/ (a tiny
# extension, not part of rbtrace) into tmp/ for the running Ruby.
#
#   ruby bench/hook_floor.rb        # BENCH_RUNS (default 5), BENCH_ITERS (1_000_000)
require 'fileutils'
require 'rbconfig'
require 'time'

require_relative 'support'
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
ITERS = Integer(ENV.fetch('BENCH_ITERS', '1000000'))

def build
  dir = File.join(BenchSupport::ROOT, 'tmp', "hook_floor-#{RUBY_VERSION}")
  FileUtils.mkdir_p(dir)
  src = File.join(__dir__, 'hook_floor', 'extconf.rb')
  ok = Dir.chdir(dir) do
    system(RbConfig.ruby, src, out: File::NULL) && system('make', out: File::NULL)
  end
  abort 'bench/hook_floor.rb: could not build bench/hook_floor (see tmp/ for mkmf.log)' unless ok
  dir
end

$LOAD_PATH.unshift(build)
require 'hook_floor'

def m(x) = x

# CPU time of this thread for ITERS iterations (3 calls each: m, Integer#<, Integer#+).
def loop_cpu
  t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  i = 0
  while i < ITERS
    m(i)
    i += 1
  end
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t
end

def measure = BenchSupport.median(Array.new(RUNS) { loop_cpu })

loop_cpu # warm up
base = measure
puts "Floor of a global hook: #{ITERS} iterations of a Ruby method call, median of #{RUNS}, thread CPU time"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts
puts '| hook | ns/iteration | added per call (2 events) |'
puts '| --- | ---: | ---: |'
puts format('| none | %.1f | - |', base * 1e9 / ITERS)
{ empty: 'does nothing', names: 'reads method and class', names_clock: '... and clock_gettime',
  names_tsc: '... and the TSC (x86-64)' }.each do |kind, label|
  HookFloor.on(kind)
  t = measure
  HookFloor.off(kind)
  puts format('| %s | %.1f | %.1f ns |', label, t * 1e9 / ITERS, (t - base) * 1e9 / ITERS / 3)
end
