# frozen_string_literal: true

# bench/faults.rb - what faults cost an app (issue 5, items 5, 6 and 9), as
# ratios between runs of a fixed workload (a loop calling Worker#step, a
# Ruby method, and Hash#key?, a C one), each the median of BENCH_RUNS runs.
# Every ratio is old time / new time: 1.00x the same, 0.80x 20% slower.
# Each is given in wall time and in CPU time (the loop thread's for 5 and 6,
# the whole process's for 9, where rbtrace's helper thread does the work):
# on a shared machine the wall time drifts by tens of percent between runs
# (other processes, CPU frequency), the CPU time much less.
#
#  5. after a tracer killed with SIGKILL (the app detached by itself) vs
#     after a clean detach (^C): two fresh processes measured in turn, the
#     ratio of their after/before ratios (1.00x: as fast as after a clean
#     detach); for a wrapped method and for one traced by the global hook.
#  6. while the tracer is stopped (SIGSTOP: the ring fills, events are
#     dropped) vs while it reads (-o /dev/null): one process, interleaved
#     runs; at least 0.90x is "within 10% of a normally traced run".
#  9. during a storm of SIGURG without commands (another process sends
#     about BENCH_STORM_RATE a second) vs without, interleaved; the control
#     is the same storm of SIGWINCH, which the kernel drops (the app ignores
#     it): what the sending process alone costs the app on this machine.
#
#   bundle exec rake compile && ruby bench/faults.rb
#
# BENCH_RUNS (default 5), BENCH_ITERS loop iterations per run (default
# 5_000_000), BENCH_STORM_RATE signals a second (default 5000).
require 'rbconfig'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
ITERS = Integer(ENV.fetch('BENCH_ITERS', '5000000'))
STORM_RATE = Integer(ENV.fetch('BENCH_STORM_RATE', '5000'))

WORKLOAD = <<~RUBY
  class Worker
    def step(x) = x + 1
  end
  $stdout.sync = true
  H = { 1 => true }
  puts "ready"
  while (line = $stdin.gets)
    n = Integer(line)
    w = Worker.new
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    c = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    pc = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    i = 0
    while i < n
      w.step(i)
      H.key?(i)
      i += 1
    end
    puts [Process.clock_gettime(Process::CLOCK_MONOTONIC) - t,
          Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - c,
          Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - pc].join(' ')
  end
RUBY

require_build!

# The median of each column of runs ([wall, thread CPU, process CPU] each).
def medians(runs) = runs.transpose.map { |column| median(column) }

# "W.WWx wall, C.CCx CPU": old / new, by wall time and by CPU column cpu.
def ratios(old, new, cpu)
  format('%.2fx wall, %.2fx CPU', old[0] / new[0], old[cpu] / new[cpu])
end

# A workload process, driven line by line (App#stop kills it).
class App
  attr_reader :pid

  def initialize
    @in_r, @in_w = IO.pipe
    @out_r, out_w = IO.pipe
    @pid = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', WORKLOAD, in: @in_r, out: out_w)
    out_w.close
    @out_r.gets # ready
  end

  # One run: [wall, loop thread CPU, process CPU] seconds.
  def run(iters = ITERS)
    @in_w.puts iters
    @out_r.gets.split.map { |x| Float(x) }
  end

  def stop = kill_and_reap(pid)
end

# A tracer of app, its output thrown away; waits until it has attached.
def tracer(app, args) = spawn_attached([CLIENT, '-p', app.pid.to_s, *args, '-o', File::NULL])

def reap(pid)
  Process.wait(pid)
rescue Errno::ECHILD
  nil
end

# Item 5: two fresh processes, one per way of ending the trace, measured
# in turn (before, then after), so that the machine's drift hits both alike.
# Returns [killed after/before, clean after/before], each [wall, thread CPU].
def after_over_before(args)
  apps = [App.new, App.new]
  before = [[], []]
  after = [[], []]
  RUNS.times { apps.each_with_index { |app, i| before[i] << app.run } }
  apps.zip(%i[KILL INT]).each do |app, signal|
    pid, err = tracer(app, args)
    app.run # traced calls
    Process.kill(signal, pid)
    reap(pid)
    err.close
  end
  sleep 0.2 # the app notices a killed tracer within ms
  RUNS.times { apps.each_with_index { |app, i| after[i] << app.run } }
  [0, 1].map { |i| medians(after[i]).zip(medians(before[i])).map { |a, b| a / b }.first(2) }
ensure
  apps&.each(&:stop)
end

def item5
  [['a wrapped method (-m Worker#step)', ['-m', 'Worker#step']],
   ['the global hook (-m step)', ['-m', 'step']]].each do |label, args|
    killed, clean = after_over_before(args)
    printf('5. after a SIGKILLed tracer vs after a clean detach, %s: %s ' \
           "(time after/before: killed %.2f wall, %.2f CPU; clean %.2f wall, %.2f CPU)\n",
           label, ratios(clean, killed, 1), *killed, *clean)
  end
end

# Item 6: runs while the tracer reads vs while it is stopped, interleaved.
def item6
  app = App.new
  pid, err = tracer(app, ['-m', 'Worker#step', 'Hash#key?', '--stats'])
  reading = []
  stopped = []
  RUNS.times do
    reading << app.run
    Process.kill(:STOP, pid)
    stopped << app.run
    Process.kill(:CONT, pid)
  end
  Process.kill(:INT, pid)
  reap(pid)
  stats = err.read[/\d+ events received, \d+ lost/]
  reading = medians(reading)
  stopped = medians(stopped)
  printf("6. the app's throughput while the tracer is stopped vs while it reads: %s " \
         "(median run stopped %.3f s, reading %.3f s; %s)\n",
         ratios(reading, stopped, 1), stopped[0], reading[0], stats)
ensure
  app&.stop
end

# A process sending signal to pid until SIGTERM, then writing to out how
# many it sent a second.
def storm(pid, signal, out)
  code = <<~RUBY
    per_tick = [#{STORM_RATE} / 1000, 1].max
    sent = 0
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    trap('TERM') { puts sent / (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t); exit }
    loop { per_tick.times { Process.kill(:#{signal}, #{pid}) }; sent += per_tick; sleep 0.001 }
  RUBY
  spawn(RbConfig.ruby, '-e', code, out: out)
end

# Runs while another process sends signal, and without, interleaved:
# [quiet medians, storm medians, signals a second].
def storm_runs(app, signal)
  quiet = []
  stormy = []
  rates = []
  RUNS.times do
    quiet << app.run
    rate_r, rate_w = IO.pipe
    s = storm(app.pid, signal, rate_w)
    rate_w.close
    sleep 0.1
    stormy << app.run
    Process.kill(:TERM, s)
    reap(s)
    rates << Float(rate_r.read)
    rate_r.close
  end
  [medians(quiet), medians(stormy), median(rates)]
end

def item9
  app = App.new
  app.run
  quiet, stormy, rate = storm_runs(app, 'URG')
  wquiet, wstormy, wrate = storm_runs(app, 'WINCH')
  printf("9. the app's throughput during a storm of SIGURG (%d/s, no command) vs without: %s " \
         "(median run storm %.3f s, quiet %.3f s); the control, SIGWINCH (%d/s, dropped): %s\n",
         rate, ratios(quiet, stormy, 2), stormy[0], quiet[0], wrate, ratios(wquiet, wstormy, 2))
ensure
  app&.stop
end

puts "bench/faults.rb: #{RUBY_DESCRIPTION}; #{RUNS} runs of #{ITERS} iterations each"
item5
item6
item9
