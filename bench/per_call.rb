# frozen_string_literal: true

# bench/per_call.rb - what one traced call costs the app under --firehose:
# (traced time - untraced time) / calls, for a tight loop of Ruby method
# calls and one of C method calls, measured in one process: the loop runs
# untraced, then while `rbtrace -p PID -f` is attached (its output to
# /dev/null), each the median of several runs. Times are the looping
# thread's CPU time (CLOCK_THREAD_CPUTIME_ID): what the traced calls cost
# the app's thread, unmoved by other processes taking turns on the CPU
# (wall time moves by 10-40 % on this shared machine); the writer thread's
# and the client's work, on the other CPU, is not in it.
#
# Between the two, the same process runs the loop under the least hook that
# names each method as rbtrace's does and reads the TSC (bench/hook_floor's
# plain_tsc, a tiny extension loaded into the app): the VM's part of a call,
# on the same CPU in the same minute. "over the floor" is what rbtrace's own
# work costs a call: the host's slow spells move both figures, not much the
# difference.
#
#   bundle exec rake compile && ruby bench/per_call.rb
#
# BENCH_RUNS (default 5), BENCH_ITERS (default 1_000_000).
# BENCH_BURST (default 5000), BENCH_PAUSE (default 0.002 s): the loop runs
# in bursts of BENCH_BURST iterations with a sleep between, so that the
# client, which renders ~15-20 M events a second on this host, keeps up
# with a loop that makes ~30 M: an event the app drops (the ring full)
# costs it less than one sent, and a run that lost events flatters the
# tracer. Sleeping takes no CPU time of the thread's to speak of; a burst's
# 120 KB of events are rendered in the pause. BENCH_BURST=0: no pauses.
# BENCH_APP_CPU=N: the app's looping (main) thread is pinned to CPU N
# (taskset) before it runs, its other threads (the writer) and the client
# to the other CPUs. The two vCPUs of this project's VMs are not equal: a
# loop with memory traffic ran 1.5x slower on one than on the other
# (bench/RESULTS.md, 2026-11-26 07:10): unpinned, a run measures whichever
# the app landed on; pinned, untraced and traced run on the same one.
# Compare runs pinned to each.
# BENCH_CLIENT_ARGS="--thread-names": more options for the client.
# BENCH_CLIENT=stopped: the client is stopped (SIGSTOP) during the traced
# runs, so the ring fills and events are dropped: what the app's thread
# pays with no writer and no client at work on the other CPU (on a 2-vCPU
# VM their memory traffic slows the app's thread down too).
require 'etc'
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
ITERS = Integer(ENV.fetch('BENCH_ITERS', '1000000'))
STOPPED = ENV['BENCH_CLIENT'] == 'stopped'
APP_CPU = ENV['BENCH_APP_CPU']
# BENCH_CLIENT_ARGS: more options for the client (e.g. --thread-names).
CLIENT_ARGS = ENV.fetch('BENCH_CLIENT_ARGS', '').split

BURST = Integer(ENV.fetch('BENCH_BURST', '5000'))
PAUSE = Float(ENV.fetch('BENCH_PAUSE', '0.002'))
# The CPUs the app's other threads (the writer) and the client run on while
# its looping thread is pinned: the others.
OTHER_CPUS = APP_CPU && (0...Etc.nprocessors).reject { |c| c == Integer(APP_CPU) }.join(',')

# Each loop's setup, and the body of one iteration: 3 calls the firehose
# reports (the method, Integer#< and Integer#+), each a CALL and a RETURN.
LOOPS = {
  'Ruby method' => ['def m(x) = x', 'm(i); i += 1'],
  'C method' => ['H = { 1 => 2 }.freeze', 'H.key?(i); i += 1']
}.freeze
# With bursts, each also makes Integer#<, Integer#+ and Kernel#sleep once
# more, and Integer#< ends the inner loop once more: 3 calls a burst.
CALLS_AN_ITERATION = BURST.positive? ? 3 + (3.0 / BURST) : 3
abort "bench/per_call.rb: BENCH_ITERS (#{ITERS}) must be a multiple of BENCH_BURST (#{BURST})" if
  BURST.positive? && (ITERS % BURST).nonzero?

require_build!
FLOOR_DIR = build_hook_floor

# The loop: n iterations of body, in bursts of BURST with a pause between
# (sleep, which costs no CPU time of the thread's to speak of).
def loop_code(body)
  return "while i < n; #{body}; end" unless BURST.positive?

  "while i < n; lim = i + #{BURST}; while i < lim; #{body}; end; sleep(#{PAUSE}); end"
end

def workload(setup, body)
  <<~RUBY
    require 'hook_floor'
    $stdout.sync = true
    #{setup}
    def run(n)
      t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
      i = 0
      #{loop_code(body)}
      Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t
    end
    puts "ready"
    while (line = $stdin.gets)
      case line.chomp
      when 'floor on' then HookFloor.on(:plain_tsc); puts 'ok'
      when 'floor off' then HookFloor.off(:plain_tsc); puts 'ok'
      else puts run(#{ITERS})
      end
    end
  RUBY
end

def runs(input, output)
  Array.new(RUNS) do
    input.puts 'go'
    Float(output.gets)
  end
end

# The loop's median under bench/hook_floor's plain_tsc hook, on and off
# around the runs (a first run warms it up).
def floor_runs(input, output)
  input.puts 'floor on'
  output.gets
  runs(input, output)
  floor = median(runs(input, output))
  input.puts 'floor off'
  output.gets
  floor
end

# Bytes the client has read (its socket, nearly all of them): /proc's rchar.
def stream_bytes(pid)
  File.read("/proc/#{pid}/io")[/^rchar: (\d+)/, 1].to_i
rescue SystemCallError
  0
end

# Pins a thread (or process) to cpus, or aborts.
def pin(cpus, id)
  abort "bench/per_call.rb: taskset -p -c #{cpus} #{id} failed" unless
    system('taskset', '-p', '-c', cpus, id.to_s, out: File::NULL)
end

# Every thread of the app but the main one (the writer, the helper) onto
# the other CPUs, away from the looping thread's.
def pin_app_helpers(pid)
  Dir.children("/proc/#{pid}/task").each { |tid| pin(OTHER_CPUS, tid) unless tid == pid.to_s }
end

def measure(setup, body)
  in_r, in_w = IO.pipe
  out_r, out_w = IO.pipe
  pid = spawn(RbConfig.ruby, '-I', LIB, '-I', FLOOR_DIR, '-rrbtrace', '-e', workload(setup, body),
              in: in_r, out: out_w)
  in_r.close
  out_w.close
  out_r.gets
  # The main thread only (its tid is the pid): threads it starts later inherit its CPU, the
  # helper (started at require) and the writer (started by the helper) do not.
  pin(APP_CPU, pid) if APP_CPU
  runs(in_w, out_r) # warm up
  untraced = median(runs(in_w, out_r))
  floor = floor_runs(in_w, out_r)
  client_command = [CLIENT, '-p', pid.to_s, '-f', '--stats', *CLIENT_ARGS]
  client_command = ['taskset', '-c', OTHER_CPUS, *client_command] if OTHER_CPUS
  client, err_r = spawn_attached(client_command)
  pin_app_helpers(pid) if OTHER_CPUS
  Process.kill(:STOP, client) if STOPPED
  # Warms up as the untraced and floor runs were (and, with the client
  # stopped, fills the ring): the first traced calls name their methods, and
  # the clock's rate is measured over the first moments of the session.
  runs(in_w, out_r)
  traced = median(runs(in_w, out_r))
  Process.kill(:CONT, client) if STOPPED
  read = stream_bytes(client)
  Process.kill(:INT, client)
  Process.wait(client)
  client = nil
  stats = err_r.read
  received = stats[/(\d+) events received/, 1].to_i
  lost = stats[/events received, (\d+) lost/, 1]
  [untraced, floor, traced, received.positive? ? read.to_f / received : nil, lost]
ensure
  kill_and_reap(client)
  in_w&.close
  kill_and_reap(pid)
end

puts "Per-call cost under --firehose: (traced - untraced) / calls, #{ITERS} calls a run, median of #{RUNS}"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}#{ENV['RUBYOPT'].to_s.empty? ? '' : " (RUBYOPT=#{ENV['RUBYOPT']})"}"
puts '- the client stopped during the traced runs (BENCH_CLIENT=stopped): events dropped' if STOPPED
puts "- the client's options: -f --stats #{CLIENT_ARGS.join(' ')}" unless CLIENT_ARGS.empty?
puts "- the app's looping thread pinned to CPU #{APP_CPU} (BENCH_APP_CPU), its other threads and the client to #{OTHER_CPUS}" if APP_CPU
if BURST.positive?
  puts "- the loop in bursts of #{BURST} iterations, #{PAUSE} s apart (BENCH_BURST, BENCH_PAUSE), so that the client keeps up"
else
  puts '- the loop without a pause (BENCH_BURST=0): the client may not keep up'
end
puts "- events' clock: #{clock_source}#{ENV['RBTRACE_CLOCK'] ? " (RBTRACE_CLOCK=#{ENV['RBTRACE_CLOCK']})" : ''}"
puts
puts '| loop | untraced (CPU ns/iteration) | floor hook | traced | added per iteration | ' \
     'added per traced call | floor per call | rbtrace over the floor per call | bytes an event | events lost |'
puts '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
LOOPS.each do |label, (setup, body)|
  untraced, floor, traced, per_event, lost = measure(setup, body)
  added = (traced - untraced) * 1e9 / ITERS
  calls = CALLS_AN_ITERATION
  puts format('| %s | %.1f | %.1f | %.1f | %.1f ns | %.1f ns | %.1f ns | %.1f ns | %s | %s |', label,
              untraced * 1e9 / ITERS, floor * 1e9 / ITERS, traced * 1e9 / ITERS, added, added / calls,
              (floor - untraced) * 1e9 / ITERS / calls, (traced - floor) * 1e9 / ITERS / calls,
              per_event ? format('%.1f', per_event) : '-', lost || '?')
end
puts
puts 'Each iteration makes 3 calls the firehose reports (the method, Integer#<, Integer#+),'
puts 'each a CALL and a RETURN event: "added per traced call" is a third of an iteration'
puts '(with bursts, the 3 calls a burst makes besides are counted too).'
puts '"floor hook": the loop under bench/hook_floor\'s plain_tsc hook (method and class as rbtrace\'s hook gets'
puts 'them, a TSC read, nothing recorded), in the same process; "rbtrace over the floor": (traced - floor) per call.'
puts '"bytes an event": what the client read from the socket (/proc rchar) over the events it received.'
puts '"events lost": the client\'s count (--stats), over the traced runs; a lost event costs the app less'
puts 'than one sent, so a figure with events lost flatters the tracer (with BENCH_CLIENT=stopped nearly all are).'
