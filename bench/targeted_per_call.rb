# frozen_string_literal: true

# bench/targeted_per_call.rb - what one traced call of a Ruby method costs the
# app, traced by its targeted TracePoint (how rbtrace traces a Ruby method
# now) against the wrapper that traced it before (a prepended C method of
# arity -1 calling super through rb_ensure, as ext/rbtrace/wrapper.c still
# does for C methods). (traced - untraced) / calls, for a tight loop of
# `w.step(i)` in one process: untraced, then `rbtrace -p PID -m Worker#step`
# attached one way, then the other, in alternating rounds (the host's slow
# spells move both), each the median of several runs of the thread's CPU
# time; last, untraced again after the detaches (as fast as before?).
#
# Then bench/hash_key_bench.rb's loop, `h.key?(keys.sample)` on 1,000,000
# keys, untraced and under `-m 'Hash#key?'` (a wrapped C method), in the
# same alternating rounds: its speed traced over untraced, by the thread's
# CPU time (benchmark-ips's wall clock moves by 2x on a loaded host).
#
# The old wrapper is asked for by the bench alone: the app it starts makes
# RBTrace::Selector answer, for that round only, that Worker#step has no
# bytecode and takes a wrapper of arity -1 (the old wrapper's), before the
# client attaches. rbtrace itself has no switch for it.
#
#   bundle exec rake compile && ruby bench/targeted_per_call.rb
#
# BENCH_RUNS (default 5), BENCH_ITERS (default 1_000_000), BENCH_ROUNDS
# (default 3), BENCH_BURST (default 5000), BENCH_PAUSE (default 0.002 s): as
# in bench/per_call.rb, the loop in bursts so that the client keeps up.
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
ITERS = Integer(ENV.fetch('BENCH_ITERS', '1000000'))
ROUNDS = Integer(ENV.fetch('BENCH_ROUNDS', '3'))
BURST = Integer(ENV.fetch('BENCH_BURST', '5000'))
PAUSE = Float(ENV.fetch('BENCH_PAUSE', '0.002'))
abort "bench/targeted_per_call.rb: BENCH_ITERS (#{ITERS}) must be a multiple of BENCH_BURST (#{BURST})" if
  BURST.positive? && (ITERS % BURST).nonzero?

require_build!

LOOP = if BURST.positive?
         "while i < n; lim = i + #{BURST}; while i < lim; w.step(i); i += 1; end; sleep(#{PAUSE}); end"
       else
         'while i < n; w.step(i); i += 1; end'
       end

WORKLOAD = <<~RUBY
  $stdout.sync = true
  H = {}
  KEYS = Array.new(1_000_000) { |i| i }
  KEYS.sample(500_000).each { |k| H[k] = true }
  class Worker
    def initialize = @sum = 0
    def step(x) = @sum += x
  end
  # The old wrapper, for this bench only: Worker#step as if it had no
  # bytecode, wrapped by a C method of arity -1.
  module OldWrapper
    def ruby_method(owner, meth) = $old_wrapper ? nil : super
    def wrapper_arity(owner, meth) = $old_wrapper ? -1 : super
  end
  RBTrace::Selector.singleton_class.prepend(OldWrapper)
  def run(n)
    w = Worker.new
    t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    i = 0
    #{LOOP}
    Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t
  end
  def run_key(n)
    h = H
    keys = KEYS
    t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    i = 0
    #{LOOP.sub('w.step(i)', 'h.key?(keys.sample)')}
    Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t
  end
  puts "ready"
  while (line = $stdin.gets)
    case line.chomp
    when 'old' then $old_wrapper = true; puts 'ok'
    when 'new' then $old_wrapper = false; puts 'ok'
    when 'ancestors' then puts Worker.ancestors.first(2).inspect
    when 'key' then puts run_key(#{ITERS})
    else puts run(#{ITERS})
    end
  end
RUBY

def runs(input, output, command = 'go')
  Array.new(RUNS) do
    input.puts command
    Float(output.gets)
  end
end

def ask(input, output, command)
  input.puts command
  output.gets.chomp
end

# The loop's median while `rbtrace -m Worker#step` is attached, the way
# (old or new) set first; and the client's count of lost events.
def traced_runs(pid, input, output, way, selector = 'Worker#step', command = 'go')
  ask(input, output, way)
  client, err_r = spawn_attached([CLIENT, '-p', pid.to_s, '-m', selector, '--stats'])
  wrapped = ask(input, output, 'ancestors')
  runs(input, output, command) # warm-up: the method named, the clock's rate measured
  traced = median(runs(input, output, command))
  Process.kill(:INT, client)
  Process.wait(client)
  client = nil
  [traced, err_r.read[/events received, (\d+) lost/, 1], wrapped]
ensure
  kill_and_reap(client)
end

in_r, in_w = IO.pipe
out_r, out_w = IO.pipe
pid = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', WORKLOAD, in: in_r, out: out_w)
in_r.close
out_w.close
out_r.gets
begin
  runs(in_w, out_r) # warm-up
  rows = Array.new(ROUNDS) do
    untraced = median(runs(in_w, out_r))
    new, new_lost, new_anc = traced_runs(pid, in_w, out_r, 'new')
    old, old_lost, old_anc = traced_runs(pid, in_w, out_r, 'old')
    [untraced, new, old, new_lost, old_lost, new_anc, old_anc]
  end
  after = median(runs(in_w, out_r))
  runs(in_w, out_r, 'key') # warm-up
  key_rows = Array.new(ROUNDS) do
    untraced = median(runs(in_w, out_r, 'key'))
    traced, lost, = traced_runs(pid, in_w, out_r, 'new', 'Hash#key?', 'key')
    [untraced, traced, lost]
  end
ensure
  in_w.close
  kill_and_reap(pid)
end

ns = ->(t) { t * 1e9 / ITERS }
puts 'Per-call cost of a traced Ruby method (Worker#step): targeted TracePoint against the old wrapper, ' \
     "#{ITERS} calls a run, median of #{RUNS}"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts "- cpu: #{File.read('/proc/cpuinfo')[/^model name\s*:\s*(.*)$/, 1]}"
puts "- ancestors while traced: new #{rows[0][5]}, old #{rows[0][6]}"
puts
puts '| round | untraced (CPU ns/call) | targeted: added per call | old wrapper: added per call | ' \
     'targeted / wrapper | lost (targeted, wrapper) |'
puts '| --- | ---: | ---: | ---: | ---: | ---: |'
rows.each_with_index do |(untraced, new, old, new_lost, old_lost), i|
  puts format('| %d | %.1f | %.1f ns | %.1f ns | %.2fx | %s, %s |', i + 1, ns[untraced], ns[new - untraced],
              ns[old - untraced], (new - untraced) / (old - untraced), new_lost || '?', old_lost || '?')
end
puts
puts format('After the detaches: %.1f ns a call untraced, %.3fx of before (first round: %.1f ns)',
            ns[after], rows[0][0] / after, ns[rows[0][0]])
puts
puts "`h.key?(keys.sample)` (bench/hash_key_bench.rb's loop), untraced and under `-m 'Hash#key?'` (wrapped):"
puts
puts '| round | untraced (CPU ns/call) | traced (CPU ns/call) | traced speed / untraced | lost |'
puts '| --- | ---: | ---: | ---: | ---: |'
key_rows.each_with_index do |(untraced, traced, lost), i|
  puts format('| %d | %.1f | %.1f | %.2fx | %s |', i + 1, ns[untraced], ns[traced], untraced / traced, lost || '?')
end
