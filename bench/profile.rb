# frozen_string_literal: true

# bench/profile.rb - what --profile costs an app, side by side with the
# in-process profilers stackprof and vernier sampling the same workload at
# the same rate: spec/e2e/profile_workload.rb's (on the main thread
# Work#heavy and Work#light, 3:1; a sleeping thread; a spinning thread),
# each round a fixed amount of work on the two busy threads.
#
# Modes, round after round in turn (untraced, rbtrace 100 Hz, stackprof
# 100 Hz, vernier 100 Hz, rbtrace 1000 Hz, ...), so that the machine's
# moods fall on every mode alike:
#
#   untraced            nothing samples
#   rbtrace --gc        attached, sampling nothing: any session's floor
#   rbtrace N Hz        rbtrace -p PID --profile --hz N (wall: every thread)
#   stackprof N Hz      StackProf.start(mode: :wall, interval: 1e6/N µs) in
#                       the app (one thread: the one that started it)
#   vernier N Hz        Vernier.start_profile(interval: 1e6/N µs) in the
#                       app (every thread; Ruby 3.2.1+)
#
# A round lasts BENCH_SECONDS of wall time. Its figure is the CPU time of
# the whole process (its threads and the profiler's: the sampler, the
# helper thread, stackprof's handler, vernier's thread) per unit of the
# work the two busy threads did: the main thread's iterations (Work#heavy
# + Work#light) and the spinner's, each weighed by what one cost that
# thread untraced (its own CPU clock over its iterations, the untraced
# rounds' median). So a loaded machine, which gives the app less CPU,
# moves it little, and so does a mode that gives one busy thread more of
# the GVL than the other: their iterations need not cost the same (0 to
# 25 % apart from one start of the app to the next on 4.0), and a plain
# count of iterations a CPU second rose and fell with the share. A round's
# cost is its figure over the untraced round of the same turn, less 1
# (+1.0 %: 1 % more CPU for the same work), so that the machine's slow
# drifts fall out; a mode's cost is the median of its rounds', beside the
# middle half of them. "main's share" is the main thread's part of the
# two busy threads' CPU, median and range: Ruby's time slices give each
# half, and a profiler should leave it so.
#
#   bundle exec rake compile && ruby bench/profile.rb
#
# stackprof and vernier are installed by Bundler from bench/profilers/Gemfile
# into tmp/profilers-RUBY_VERSION the first time (RubyGems). BENCH_RUNS:
# rounds per mode (default 5); BENCH_SECONDS: a round's length (default 2).
require 'fileutils'
require 'open3'
require 'rbconfig'

require_relative 'support'
require_relative '../spec/e2e/profile_workload'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
SECONDS = Float(ENV.fetch('BENCH_SECONDS', '2'))
RATES = [100, 1000].freeze
VERNIER = vernier?

APP = <<~RUBY
  require 'bundler/setup'
  require 'stackprof'
  require 'vernier' if #{VERNIER}
  #{ProfileWorkload::CLASSES}
  $spins = 0
  class Spinner
    def run = loop { Work.new.spin(5_000); $spins += 1 }
  end
  Thread.new { Sleeper.new.run }
  spinner = Thread.new { Spinner.new.run }
  sleep 0.01 until spinner.native_thread_id
  # A thread's CPU time (s): its CPU clock, the id pthread_getcpuclockid
  # makes of its tid (no file read: that would let the GVL go mid-round).
  def cpu_of(thread) = Process.clock_gettime((~thread.native_thread_id << 3) | 6)
  # A round: "PEER HZ" (PEER none, stackprof or vernier) for SECONDS;
  # answers "main_iterations spinner_iterations cpu main_cpu spinner_cpu".
  work = Work.new
  puts 'ready'
  $stdout.flush
  while (line = $stdin.gets)
    peer, hz = line.split
    interval = 1_000_000 / Integer(hz)
    case peer
    when 'stackprof' then StackProf.start(mode: :wall, interval: interval, raw: true)
    when 'vernier' then Vernier.start_profile(interval: interval)
    end
    spins = $spins
    main0 = cpu_of(Thread.main)
    spinner0 = cpu_of(spinner)
    cpu0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    wall0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    cycles = 0
    until Process.clock_gettime(Process::CLOCK_MONOTONIC) - wall0 >= #{SECONDS}
      work.heavy
      work.light
      cycles += 1
    end
    cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu0
    main_cpu = cpu_of(Thread.main) - main0
    spinner_cpu = cpu_of(spinner) - spinner0
    spun = $spins - spins
    case peer
    when 'stackprof'
      StackProf.stop
      StackProf.results
    when 'vernier' then Vernier.stop_profile
    end
    puts "\#{cycles * 40_000} \#{spun * 5_000} \#{cpu} \#{main_cpu} \#{spinner_cpu}"
    $stdout.flush
  end
RUBY

# 'rbtrace --gc': attached, tracing (next to) nothing: the floor of any
# session (the writer thread's dozes, ten wake-ups a second; a thousand
# polls before it dozed), which --profile pays too.
MODES = [['untraced', 'none', nil], ['rbtrace --gc', 'none', ['--gc']]] + RATES.flat_map do |hz|
  [["rbtrace #{hz} Hz", 'none', ['--profile', '--hz', hz.to_s]],
   ["stackprof #{hz} Hz", 'stackprof', nil],
   (["vernier #{hz} Hz", 'vernier', nil] if VERNIER)].compact
end

require_build!
env = profilers_env
rates = Hash.new(1000)
RATES.each { |hz| MODES.each { |name, _, _| rates[name] = hz if name.end_with?("#{hz} Hz") } }
results = Hash.new { |h, k| h[k] = [] }
app_in, app_out, app_err, wait = Open3.popen3(env, RbConfig.ruby, '-I', BenchSupport::LIB, '-rrbtrace', '-e', APP)
begin
  abort "bench/profile.rb: the app did not start: #{app_err.read}" unless app_out.gets
  round = lambda do |peer, hz, args|
    with_client(wait.pid, args) do
      app_in.puts("#{peer} #{hz}")
      app_out.gets.split.map(&:to_f) # main, spinner iterations; cpu, main's, spinner's
    end
  end
  round.call('none', 100, nil) # warm-up
  RUNS.times do
    MODES.each { |name, peer, args| results[name] << round.call(peer, rates[name], args) }
  end
ensure
  app_in.close
  kill_and_reap(wait.pid)
end

# What an iteration cost each busy thread untraced (ns of its own CPU).
main_ns = median(results['untraced'].map { |main, _, _, main_cpu, _| main_cpu / main * 1e9 })
spinner_ns = median(results['untraced'].map { |_, spun, _, _, spinner_cpu| spinner_cpu / spun * 1e9 })
# A round's CPU over what its work cost untraced; shares in %.
per_work = results.transform_values do |rounds|
  rounds.map { |main, spun, cpu, _, _| cpu * 1e9 / ((main * main_ns) + (spun * spinner_ns)) }
end
shares = results.transform_values { |rounds| rounds.map { |_, _, _, m, s| 100 * m / (m + s) } }
# Each round's cost against the untraced round of its turn.
costs = per_work.transform_values do |rounds|
  rounds.zip(per_work['untraced']).map { |r, untraced| ((r / untraced) - 1) * 100 }
end
puts "bench/profile.rb: Ruby #{RUBY_VERSION}, #{RUNS} rounds a mode of #{SECONDS} s (#{`nproc`.strip} CPUs); " \
     "an iteration untraced: main #{main_ns.round(2)} ns, spinner #{spinner_ns.round(2)} ns; " \
     'CPU/work: CPU over what the work cost untraced (median); cost: against the untraced round of the same turn'
puts format('%-20s %9s %8s  %-15s  %-18s %s', 'mode', 'CPU/work', 'cost', 'middle half', "main's share",
            "each round's cost")
MODES.each do |name, _, _|
  sorted = costs[name].sort
  middle = format('%+.1f..%+.1f%%', sorted[sorted.size / 4], sorted[(3 * sorted.size) / 4])
  share = format('%.1f (%.0f-%.0f) %%', median(shares[name]), *shares[name].minmax)
  puts format('%-20s %9.4f %+7.1f%%  %-15s  %-18s %s', name, median(per_work[name]), median(costs[name]), middle,
              share, costs[name].map { |c| format('%+.1f%%', c) }.join(' '))
end
