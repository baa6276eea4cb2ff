# frozen_string_literal: true

# bench/attach_latency.rb - how long `rbtrace-client -p PID -e Process.pid`
# takes, from starting the compiled client to the result on its stdout
# (issue 4's measure), and to its exit once the target confirmed the detach,
# against a target in each of the states a production app is usually in.
# Runs on the Ruby that runs it (compile for that Ruby first):
#
#   bundle exec rake compile && ruby bench/attach_latency.rb
#   PATH=/var/cache/rbtrace/ruby-3.3/bin:$PATH sh -c 'bundle exec rake compile && ruby bench/attach_latency.rb'
#
# Each run starts after a pause of 0-100 ms (a seeded random), so that it
# meets a busy target at any point of its work, as a user would: back to
# back, a run starts just after the previous one's detach, and meets a loop
# of long C calls at the start of one every time.
#
# Prints a Markdown table: per state, how many of the runs answered, the
# median and the slowest to the result and to the exit; then a busy app once more, with an eval that keeps
# the GVL for a while (LONG_EVAL). BENCH_RUNS sets the runs per state (default 20).
# Then the same for the original rbtrace gem (its `rbtrace -p PID -e
# Process.pid`, in a few of the states; bench/original_gem.rb installs it, or
# the report says why not), and the start-up of the bin/rbtrace stub (Ruby)
# that execs the compiled client, against the client alone (--version).
require 'rbconfig'
require 'time'

require_relative 'support'
require_relative 'original_gem'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '20'))

STATES = {
  'busy in Ruby' => 'x = 0; loop { x += 1 }',
  'busy in Ruby, not main' => 'Thread.new { x = 0; loop { x += 1 } }; sleep',
  'sleep' => 'sleep',
  'pipe read' => 'r, _w = IO.pipe; r.read',
  'IO.select' => 'r, _w = IO.pipe; IO.select([r])',
  'Queue#pop' => 'q = Queue.new; q.pop',
  'ConditionVariable#wait' => 'm = Mutex.new; c = ConditionVariable.new; m.synchronize { c.wait(m) }',
  'Thread#join' => 'Thread.new { sleep }.join',
  'Mutex#lock held elsewhere' => 'm = Mutex.new; Thread.new { m.lock; sleep }; sleep 0.1; m.lock',
  'busy in C (String#sum)' => 'loop { ("x" * 20_000_000).sum }'
}.freeze

require_build!

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# A target in the state code puts it in, loading rbtrace (ours, or the
# original gem's with original): its pid once it is there.
def start_target(code, original)
  r, w = IO.pipe
  env, load = original ? [OriginalGem.env, []] : [{}, ['-I', LIB]]
  pid = OriginalGem.unbundled do
    spawn(env, RbConfig.ruby, *load, '-rrbtrace', '-e', "$stdout.sync = true; puts 'ready'; #{code}",
          out: w, err: File::NULL)
  end
  w.close
  r.gets
  r.close
  sleep 0.2
  pid
end

# An eval that keeps the GVL for a while (~10-20 ms here) before it answers:
# rbtrace's thread then waits for the GVL again once it is done.
LONG_EVAL = 'x = 0; 300_000.times { x += 1 }; Process.pid'

# One client run: milliseconds from its start to the result on its stdout
# (answer: the line `=> PID`, or a trace's first line), and to its exit
# (after the detach; a trace is interrupted, as ^C, once it answered); nil
# if it did not answer within 10 s or failed.
def run_client(command, env, answer, trace: false)
  out_r, out_w = IO.pipe
  err_r, err_w = IO.pipe
  t = now
  client = OriginalGem.unbundled { spawn(env, *command, out: out_w, err: err_w) }
  out_w.close
  err_w.close
  answered = nil
  output = +''
  until answered || !IO.select([out_r], nil, nil, 10)
    chunk = out_r.read_nonblock(4096, exception: false)
    break if chunk.nil?
    next if chunk == :wait_readable

    output << chunk
    answered = now if output.include?(answer)
  end
  Process.kill(answered && trace ? :INT : :KILL, client) if trace || !answered
  err_r.read
  _, status = Process.wait2(client)
  exited = now
  status.success? && answered ? [(answered - t) * 1000, (exited - t) * 1000] : nil
ensure
  out_r&.close
  err_r&.close
end

# Per run that answered: milliseconds to the result and to the exit.
def measure(code, runs: RUNS, original: false, eval: 'Process.pid')
  pid = start_target(code, original)
  client = original ? OriginalGem.client_command : [CLIENT, '--timeout', '5']
  env = original ? OriginalGem.env : {}
  phase = Random.new(RUNS)
  Array.new(runs) do
    sleep phase.rand(0.1)
    run_client([*client, '-p', pid.to_s, '-e', eval], env, "=> #{pid}\n")
  end.compact
ensure
  kill_and_reap(pid)
end

def row(name, results, runs)
  cells = [0, 1].map do |i|
    times = results.map { |r| r[i] }.sort
    times.empty? ? '- | -' : format('%.1f ms | %.1f ms', times[times.size / 2], times.last)
  end
  "| #{name} | #{results.size}/#{runs} | #{cells.join(' | ')} |"
end

HEADER = "| target state | answered | to the result: median | slowest | to the exit: median | slowest |\n" \
         '| --- | ---: | ---: | ---: | ---: | ---: |'

# Median milliseconds of running command (an Array) RUNS times.
def startup(command)
  median(Array.new(RUNS) do
    t = now
    system(*command, out: File::NULL, err: File::NULL) or abort "bench: #{command.join(' ')} failed"
    (now - t) * 1000
  end)
end

puts "Attach latency: `rbtrace-client -p PID -e Process.pid`, #{RUNS} runs per state"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts
puts HEADER
STATES.each { |name, code| puts row(name, measure(code), RUNS) }
puts row("busy in Ruby, and `-e '#{LONG_EVAL}'`", measure(STATES.fetch('busy in Ruby'), eval: LONG_EVAL), RUNS)

# A trace's start: from the client's start to its first line, a call of
# tick, which the app makes every millisecond or so (while busy in Ruby or
# asleep between), with TRACE_MODES asked: their commands reach the app
# together and are carried out in one turn with the GVL.
TICKING = {
  'busy in Ruby' => 'def tick = nil; x = 0; loop { x += 1; tick if (x & 0x3fff).zero? }',
  'asleep between' => 'def tick = nil; loop { tick; sleep 0.001 }'
}.freeze
TRACE_MODES = ['-m', 'Object#tick', '--raise', '--gc', '--slow', '100'].freeze

def measure_trace(code)
  pid = start_target(code, false)
  phase = Random.new(RUNS)
  Array.new(RUNS) do
    sleep phase.rand(0.1)
    run_client([CLIENT, '--timeout', '5', '-p', pid.to_s, *TRACE_MODES], {}, 'Object#tick', trace: true)
  end.compact
ensure
  kill_and_reap(pid)
end

puts
puts "A trace's start: `rbtrace-client -p PID #{TRACE_MODES.join(' ')}`, to its first line, #{RUNS} runs per state"
puts
puts HEADER.sub('to the result', 'to the first call')
TICKING.each { |name, code| puts row(name, measure_trace(code), RUNS) }

ORIGINAL_STATES = ['busy in Ruby', 'sleep', 'pipe read'].freeze
ORIGINAL_RUNS = [RUNS / 2, 3].max
puts
if OriginalGem.find
  puts "The original rbtrace gem #{OriginalGem::VERSION}, `rbtrace -p PID -e Process.pid`, " \
       "#{ORIGINAL_RUNS} runs per state:"
  puts
  puts HEADER
  ORIGINAL_STATES.each do |name|
    puts row(name, measure(STATES.fetch(name), runs: ORIGINAL_RUNS, original: true), ORIGINAL_RUNS)
  end
else
  puts "The original rbtrace gem: not measured: #{OriginalGem.why_not}"
end

stub = startup([File.join(ROOT, 'bin', 'rbtrace'), '--version'])
bare = startup([CLIENT, '--version'])
puts
puts "Start-up, median of #{RUNS}: `bin/rbtrace --version` (the Ruby stub, then the client) " \
     "#{format('%.1f', stub)} ms; the compiled client alone #{format('%.1f', bare)} ms: " \
     "the stub adds #{format('%.1f', stub - bare)} ms."
