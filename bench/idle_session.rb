# frozen_string_literal: true

# bench/idle_session.rb - what an attached session costs an app while
# nothing it traces fires: an app asleep (its main thread in `sleep`), not
# attached, then attached with `rbtrace -p PID --gc` (no collection runs),
# then `--profile --hz 100` (the drain's ten batches a second). For each,
# over BENCH_SECONDS (default 5): the CPU time of every thread of the app
# (/proc/PID/task/*/schedstat, nanoseconds on a CPU) per second, and the
# writer thread's wake-ups per second (its voluntary context switches,
# /proc/PID/task/TID/status; the writer is the thread the attach started;
# under --profile the sampler's are counted too: 100 a second at 100 Hz).
# Rounds of the modes in turn, BENCH_RUNS of them (default 3); medians.
#
#   bundle exec rake compile && ruby bench/idle_session.rb
require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '3'))
SECONDS = Float(ENV.fetch('BENCH_SECONDS', '5'))
MODES = [['not attached', nil], ['rbtrace --gc', ['--gc']], ['rbtrace --profile --hz 100', %w[--profile --hz 100]]].freeze

def tasks(pid) = Dir.children("/proc/#{pid}/task").map(&:to_i)

# The CPU time used between two cpu_ns (a thread gone meanwhile: its last
# moments are not counted; Ruby 3.4 starts and ends one at an attach).
def cpu_used(before, after) = after.sum { |tid, ns| ns - before.fetch(tid, 0) }

def wakeups(pid, tids)
  tids.sum do |tid|
    File.read("/proc/#{pid}/task/#{tid}/status")[/^voluntary_ctxt_switches:\s+(\d+)/, 1].to_i
  rescue Errno::ENOENT
    0
  end
end

# [CPU ms a second of the app, wake-ups a second of the threads the attach started]
def round(pid, args)
  before = tasks(pid)
  with_client(pid, args) do
    started = tasks(pid) - before
    cpu0 = cpu_ns(pid)
    wake0 = wakeups(pid, started)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    sleep SECONDS
    secs = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    [cpu_used(cpu0, cpu_ns(pid)) / 1e6 / secs, (wakeups(pid, started) - wake0) / secs]
  end
end

require_build!
app_r, app_w = IO.pipe
pid = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', '$stdout.sync = true; puts "ready"; sleep',
            out: app_w)
app_w.close
abort 'bench/idle_session.rb: the app did not start' unless app_r.gets&.chomp == 'ready'
begin
  results = Hash.new { |h, k| h[k] = [] }
  RUNS.times { MODES.each { |name, args| results[name] << round(pid, args) } }
  puts "An idle app (asleep) attached and not: #{RUBY_DESCRIPTION}, #{RUNS} rounds of #{SECONDS} s a mode (median)"
  puts
  puts '| mode | app CPU ms/s | wake-ups/s of the threads the attach started |'
  puts '| --- | ---: | ---: |'
  MODES.each do |name, args|
    cpu = median(results[name].map(&:first))
    wake = args ? format('%.0f', median(results[name].map(&:last))) : '-'
    puts format('| %s | %.2f | %s |', name, cpu, wake)
  end
ensure
  kill_and_reap(pid)
end
