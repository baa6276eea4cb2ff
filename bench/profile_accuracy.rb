# frozen_string_literal: true

# bench/profile_accuracy.rb - how near the truth --profile's figures come,
# side by side with the in-process profilers stackprof and vernier sampling
# the same workload at the same rate (100 Hz, --profile's default):
# spec/e2e/profile_workload.rb's threads, whose proportions are known:
#
#   main     Work#heavy then Work#light, in turn: the same loop, 3x the
#            turns in heavy, so heavy has 75 % of the two's samples
#   sleeper  Sleeper#run: `sleep 1` in a loop (blocked)
#   spinner  Spinner#run: a busy loop, sharing the GVL with main
#
# Modes, round after round in turn (so that the machine's moods fall on
# every mode alike), each BENCH_SECONDS of profile:
#
#   rbtrace wall     rbtrace -p PID --profile wall --hz 100 --duration S
#   rbtrace cpu      --profile cpu (--format folded, read here)
#   stackprof wall   StackProf.start(mode: :wall, interval: 10_000, raw:
#                    true) in the app: SIGALRM, forwarded to the thread that
#                    started it, so it samples that thread alone (main); a
#                    tick that comes while that thread waits for the GVL
#                    finds the last sample not yet recorded and is dropped
#   stackprof cpu    mode: :cpu: the process's ITIMER_PROF; the SIGPROF lands
#                    on the thread using the CPU, so it samples main and the
#                    spinner, without saying which (its stacks tell here)
#   vernier wall     Vernier.start_profile(interval: 10_000) in the app
#                    (Ruby 3.2.1+): every thread, a
#                    thread that holds the GVL by a signal, the others as
#                    "idle" (blocked) or "stalled" (GVL wait) with the stack
#                    they stopped in
#   vernier running  the same profile's samples of the threads that held
#                    the GVL (category 0): what it says of running time
#                    (it has no cpu mode; the time a thread held the GVL,
#                    more than its CPU time on a loaded machine)
#
# Each tool's own output is read here: rbtrace's folded stacks (the thread
# as root frame), stackprof's result (StackProf.results(FILE), the Marshal
# dump its `stackprof` command reads; raw: true keeps every stack),
# vernier's result (Vernier::Result's threads: samples, weights and
# categories a thread, and its stack table's frame names). Figures:
#
#   heavy      Work#heavy's share of Work#heavy + Work#light samples (all
#              rounds pooled), error against 75 %, and each round's
#   threads    each thread's share of the samples: wall 1/3 each where
#              every thread is sampled at every tick (stackprof wall: main
#              only); cpu: the thread's share of the three threads' CPU
#              time in the profile; the largest error. The CPU times: for
#              rbtrace /proc/PID/task/TID/schedstat, read here from the
#              client's "attached" to its exit; for the peers the threads'
#              CPU clocks, read in the app around the profile
#   samples    got/expected: wall hz x seconds x threads sampled; cpu hz x
#              CPU seconds of the three threads (a cpu profile's samples
#              are its measure of CPU time); stackprof's own count of the
#              samples it missed beside it
#
#   bundle exec rake compile && ruby bench/profile_accuracy.rb
#
# stackprof and vernier are installed by Bundler from bench/profilers/Gemfile
# into tmp/profilers-RUBY_VERSION the first time (RubyGems). BENCH_RUNS:
# rounds per mode (default 3); BENCH_SECONDS: a profile's length (default 5);
# BENCH_VERBOSE=1: each round's length and the threads' CPU seconds too.
require 'json'
require 'tmpdir'

require_relative 'support'
require_relative '../spec/e2e/profile_workload'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '3'))
SECONDS = Float(ENV.fetch('BENCH_SECONDS', '5'))
HZ = 100
THREADS = %w[main sleeper spinner].freeze

# The app: the workload's threads; the main thread runs Work#heavy and
# Work#light for each round. A line "rbtrace": work until SIGUSR2 (an
# rbtrace client profiles meanwhile; not a line on stdin, as a select for
# it would give the GVL away at every turn); "stackprof wall|cpu FILE" or
# "vernier wall FILE": SECONDS of work under that profiler, its result
# written to FILE; answers "done WALL_SECONDS {tid=>cpu ns}" (the
# threads' CPU during the profile). Its first line: "ready", the three
# threads' tids, the peers' versions.
APP = <<~RUBY
  require 'bundler/setup'
  require 'json'
  require 'stackprof'
  require 'vernier' if #{vernier?}
  #{ProfileWorkload::CLASSES}
  sleeper = Thread.new { Sleeper.new.run }
  sleeper.name = 'sleeper'
  spinner = Thread.new { Spinner.new.run }
  spinner.name = 'spinner'
  sleep 0.1
  $stdout.sync = true
  versions = ["stackprof \#{StackProf::VERSION}", ("vernier \#{Vernier::VERSION}" if defined?(Vernier))]
  tids = [Thread.main, sleeper, spinner].map(&:native_thread_id)
  puts "ready \#{tids.join(' ')} \#{versions.compact.join(', ')}"
  # The threads' CPU clocks (Linux's clockid of a thread by its tid), read
  # here without giving the GVL away: /proc's files would, and the spinner
  # would run on while main waits to read them, into the figures.
  cpu_ns = -> { tids.to_h { |tid| [tid, Process.clock_gettime((~tid << 3) | 6, :nanosecond)] } }
  work = Work.new
  stop = false
  trap('USR2') { stop = true }
  clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
  while (line = $stdin.gets)
    tool, mode, file = line.split
    if tool == 'rbtrace'
      stop = false
      puts 'working'
      until stop
        work.heavy
        work.light
      end
      puts 'stopped'
      next
    end
    cpu0 = cpu_ns.call
    t0 = clock.call
    if tool == 'stackprof'
      StackProf.start(mode: mode.to_sym, interval: 1_000_000 / #{HZ}, raw: true)
    else
      Vernier.start_profile(interval: 1_000_000 / #{HZ})
    end
    until clock.call - t0 >= #{SECONDS}
      work.heavy
      work.light
    end
    wall = clock.call - t0
    cpu1 = cpu_ns.call
    if tool == 'stackprof'
      StackProf.stop
      StackProf.results(file)
    else
      result = Vernier.stop_profile
      table = result.respond_to?(:_stack_table) ? result._stack_table : result.stack_table
      threads = result.threads.values.map { |t| t.slice(:name, :is_main, :tid, :samples, :weights, :sample_categories) }
      File.binwrite(file, Marshal.dump({ threads: threads, stacks: table.to_h }))
    end
    puts "done \#{wall} \#{cpu1.to_h { |tid, ns| [tid, ns - cpu0[tid]] }.to_json}"
  end
RUBY

# A profile, whatever the tool: {thread => {[frame names, outermost first] =>
# weight}}, the seconds it lasted, each thread's CPU seconds meanwhile, the
# samples the tool says it missed (stackprof's missed_samples).
Profile = Struct.new(:stacks, :seconds, :cpu, :missed)

# A stack's thread by its frames, where the tool does not say (stackprof).
def thread_of(frames)
  return 'sleeper' if frames.include?('Sleeper#run')
  return 'spinner' if frames.include?('Spinner#run')

  frames.first == '<main>' ? 'main' : 'other' # stackprof's "(garbage collection)"
end

# rbtrace's --format folded: "Thread t2 sleeper;<main>;...;Kernel#sleep 12".
def rbtrace_stacks(folded)
  stacks = Hash.new { |h, k| h[k] = Hash.new(0) }
  folded.each_line do |line|
    path, weight = line.chomp.split(/ (?=\d+\z)/)
    root, *frames = path.split(';')
    name = root[/\AThread t\d+ (\S+)/, 1]
    stacks[THREADS.include?(name) ? name : 'main'][frames] += Integer(weight)
  end
  stacks
end

# StackProf.results' raw: [n, n frame ids (outermost first), times seen,
# ...]; :frames names each id.
def stackprof_stacks(result)
  stacks = Hash.new { |h, k| h[k] = Hash.new(0) }
  raw = result.fetch(:raw, [])
  i = 0
  while i < raw.size
    n = raw[i]
    frames = raw[i + 1, n].map { |id| result[:frames].fetch(id)[:name] }
    stacks[thread_of(frames)][frames] += raw[i + 1 + n]
    i += n + 2
  end
  stacks
end

# Vernier::Result's threads (samples: stack indexes; weights; categories:
# 0 running, 1 idle, 2 stalled, 3 GC) and its stack table (to_h: each
# stack's parent and frame, each frame's func, each func's name).
# running: the samples of category 0 alone.
def vernier_stacks(dump, running: false)
  table = dump[:stacks]
  name_of = lambda do |stack|
    frames = []
    while stack && stack >= 0
      frames.unshift(table[:func_table][:name][table[:frame_table][:func][table[:stack_table][:frame][stack]]])
      stack = table[:stack_table][:parent][stack]
    end
    frames
  end
  stacks = Hash.new { |h, k| h[k] = Hash.new(0) }
  dump[:threads].each do |t|
    thread = THREADS.include?(t[:name]) ? t[:name] : nil
    t[:samples].zip(t[:weights], t[:sample_categories]) do |stack, weight, category|
      next if running && category != 0

      frames = name_of.call(stack)
      stacks[thread || (t[:is_main] ? 'main' : thread_of(frames))][frames] += weight
    end
  end
  stacks
end

def weight(stacks, name) = stacks.values.sum { |s| s.sum { |frames, w| frames.include?(name) ? w : 0 } }

def total(stacks, threads = THREADS) = threads.sum { |t| stacks[t].values.sum }

def heavy_share(stacks)
  heavy = weight(stacks, 'Work#heavy')
  light = weight(stacks, 'Work#light')
  [100.0 * heavy / (heavy + light), heavy + light]
end

# One round of an rbtrace mode: the client attached by pid, the app working
# meanwhile; the profile's window, and the threads' CPU in it, from the
# client's "attached" (the target samples from just before it) to its exit
# (just after the target stopped sampling).
def rbtrace_round(app, mode)
  app.in.puts('rbtrace')
  app.answer # working
  out = File.join(app.dir, 'folded')
  client, err = spawn_attached([CLIENT, '-p', app.pid.to_s, '--profile', mode, '--hz', HZ.to_s,
                                '--duration', SECONDS.to_s, '--format', 'folded'], out: out)
  cpu0 = cpu_ns(app.pid)
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  said = err.read
  err.close
  _, status = Process.wait2(client)
  wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
  cpu1 = cpu_ns(app.pid)
  abort "bench/profile_accuracy.rb: rbtrace --profile #{mode} failed: #{said}" unless status.success?
  Process.kill(:USR2, app.pid)
  app.answer # stopped
  Profile.new(rbtrace_stacks(File.read(out)), wall, app.cpu_of(cpu1.to_h { |t, ns| [t, ns - cpu0.fetch(t, ns)] }))
end

# One round of stackprof or vernier, in the app: [its result, seconds,
# the threads' CPU seconds].
def peer_round(app, tool, mode)
  file = File.join(app.dir, "#{tool}-#{mode}")
  app.in.puts("#{tool} #{mode} #{file}")
  _, wall, cpu = app.answer.split(' ', 3)
  # written by the app above, a moment ago
  dump = Marshal.load(File.binread(file)) # rubocop:disable Security/MarshalLoad
  [dump, Float(wall), app.cpu_of(JSON.parse(cpu).transform_keys(&:to_i))]
end

App = Struct.new(:in, :out, :err, :pid, :tids, :dir) do
  # {tid => ns} -> {thread => CPU seconds}
  def cpu_of(ns) = THREADS.zip(tids).to_h { |name, tid| [name, ns.fetch(tid, 0) / 1e9] }

  # The app's next line; if it is gone, what it said on stderr.
  def answer = out.gets || abort("bench/profile_accuracy.rb: the app ended: #{err.read}")
end

ROWS = [%w[rbtrace wall], %w[rbtrace cpu], %w[stackprof wall], %w[stackprof cpu],
        (%w[vernier wall] if vernier?), (%w[vernier running] if vernier?)].compact.freeze

# {[tool, mode] => [Profile, ...]}
def measure(app)
  results = Hash.new { |h, k| h[k] = [] }
  RUNS.times do
    %w[wall cpu].each do |mode|
      results[['rbtrace', mode]] << rbtrace_round(app, mode)
      dump, wall, cpu = peer_round(app, 'stackprof', mode)
      results[['stackprof', mode]] << Profile.new(stackprof_stacks(dump), wall, cpu, dump[:missed_samples])
    end
    next unless vernier?

    dump, wall, cpu = peer_round(app, 'vernier', 'wall')
    results[%w[vernier wall]] << Profile.new(vernier_stacks(dump), wall, cpu)
    results[%w[vernier running]] << Profile.new(vernier_stacks(dump, running: true), wall, cpu)
  end
  results
end

# What each thread's share should be, and which threads the mode samples.
def truth(tool, mode, profiles)
  return [{ 'main' => 100.0 }, %w[main]] if tool == 'stackprof' && mode == 'wall'
  return [THREADS.to_h { |t| [t, 100.0 / 3] }, THREADS] if mode == 'wall'

  cpu = THREADS.to_h { |t| [t, profiles.sum { |p| p.cpu[t] }] }
  [cpu.transform_values { |s| 100.0 * s / cpu.values.sum }, THREADS]
end

def row(tool, mode, profiles)
  pooled = Hash.new { |h, k| h[k] = Hash.new(0) }
  if ENV['BENCH_VERBOSE']
    profiles.each { |p| warn format('%s %s: %.2f s, CPU s %s', tool, mode, p.seconds, p.cpu.transform_values { |c| c.round(2) }) }
  end
  profiles.each { |p| p.stacks.each { |t, s| s.each { |frames, w| pooled[t][frames] += w } } }
  share, = heavy_share(pooled)
  shares, sampled = truth(tool, mode, profiles)
  all = total(pooled, sampled)
  got = THREADS.to_h { |t| [t, 100.0 * total(pooled, [t]) / all] }
  expected = if mode == 'wall'
               profiles.sum(&:seconds) * HZ * sampled.size
             else
               profiles.sum { |p| p.cpu.values.sum } * HZ
             end
  each = profiles.map { |p| format('%.1f', heavy_share(p.stacks).first) }.join(' ')
  format('%-10s %-8s %6.1f %+6.1f  %-26s %-26s %5.1f  %6d/%-6d %5.1f%%  %s', tool, mode, share, share - 75,
         THREADS.map { |t| sampled.include?(t) ? format('%.1f', got[t]) : '-' }.join(' / '),
         THREADS.map { |t| shares[t] ? format('%.1f', shares[t]) : '-' }.join(' / '),
         sampled.map { |t| (got[t] - shares[t]).abs }.max, total(pooled), expected, 100.0 * total(pooled) / expected, each) +
    (profiles.first.missed ? " (missed: #{profiles.sum(&:missed)})" : '')
end

require_build!
env = profilers_env
Dir.mktmpdir('rbtrace-profile-accuracy') do |dir|
  app_in, app_out, app_err, wait = Open3.popen3(env, RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', APP)
  begin
    app = App.new(app_in, app_out, app_err, wait.pid, nil, dir)
    _, *tids, peers = app.answer.chomp.split(' ', 5)
    app.tids = tids.map(&:to_i)
    load = File.read('/proc/loadavg').split.first(3).join(' ')
    results = measure(app)
    puts "bench/profile_accuracy.rb: Ruby #{RUBY_VERSION}, #{RUNS} rounds a mode of #{SECONDS} s at #{HZ} Hz " \
         "(#{`nproc`.strip} CPUs, load #{load} at the start); #{peers}"
    puts 'heavy: Work#heavy % of heavy + light samples, all rounds pooled (truth 75); threads: % of the samples of main / ' \
         'sleeper / spinner, and the truth (wall: a third each; cpu: their CPU time), the largest error; samples: ' \
         'got/expected (wall: hz x seconds x threads sampled; cpu: hz x CPU seconds of the three threads)'
    puts format('%-10s %-8s %6s %6s  %-26s %-26s %5s  %13s %6s  %s', 'tool', 'mode', 'heavy', 'error',
                'threads', 'truth', 'error', 'samples', '', "each round's heavy")
    ROWS.each { |tool, mode| puts row(tool, mode, results[[tool, mode]]) }
  ensure
    app_in.close
    kill_and_reap(wait.pid)
  end
end
