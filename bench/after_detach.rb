# frozen_string_literal: true

# bench/after_detach.rb - is an app as fast while rbtrace traces a method it
# does not call, and after rbtrace detached, as before it was traced? For
# each way of tracing, one fresh process runs a fixed workload (a tight loop
# of Ruby method calls, C method calls and attribute reads; it never calls
# Worker#step, the traced Ruby method) several times before anyone
# attaches, again while traced that way, and again after the detach. The
# ratios are the median time before over the median time while traced and
# after, in the same process (1.00x: as fast as before; 0.80x: 20 % slower,
# after a detach for the rest of its life). Times are the looping thread's
# CPU time, which other processes on the machine do not move much.
#
#   bundle exec rake compile && ruby bench/after_detach.rb
#
# BENCH_RUNS: workload runs before and after (default 5); BENCH_ITERS: loop
# iterations per run (default 2_000_000); BENCH_MODES: e.g. "-f,--gc".
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
ITERS = Integer(ENV.fetch('BENCH_ITERS', '2000000'))

MODES = [
  ['-m Worker#step (a Ruby method: its TracePoints)', ['-m', 'Worker#step']],
  ['-m Hash#key? (a wrapped C method)', ['-m', 'Hash#key?']],
  ['-m step (bare name: global hook)', ['-m', 'step']],
  ['-m Worker#step(x) (expressions: a TracePoint on it)', ['-m', 'Worker#step(x)']],
  ['-f (firehose)', ['-f']],
  ['--slow 1000', ['--slow', '1000']],
  ['--gc', ['--gc']],
  ['--raise', ['--raise']],
  ['-e 1 (attach, eval, detach)', ['-e', '1']]
].freeze

WORKLOAD = <<~RUBY
  class Worker
    attr_reader :count
    def initialize = @count = 0
    def step(x) = @count += x
    def other(x) = x + 1
  end
  $stdout.sync = true
  H = { 1 => true }
  puts "ready"
  while $stdin.gets
    w = Worker.new
    t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    i = 0
    while i < #{ITERS}
      w.other(i)
      H.key?(i)
      w.count
      i += 1
    end
    puts Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t
  end
RUBY

require_build!

def runs(io_in, io_out, n)
  Array.new(n) do
    io_in.puts 'go'
    Float(io_out.gets)
  end
end

# Starts a client tracing pid with args; returns its pid once attached
# and tracing.
def start_client(pid, args)
  client, err_r = spawn_attached([CLIENT, '-p', pid.to_s, *args])
  err_r.close # "attached": its tracers are set up
  client
end

# [before, while traced (nil for -e), after]: median seconds.
def measure(args)
  in_r, in_w = IO.pipe
  out_r, out_w = IO.pipe
  pid = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', WORKLOAD, in: in_r, out: out_w)
  in_r.close
  out_w.close
  out_r.gets # ready
  runs(in_w, out_r, 1) # warm up
  before = median(runs(in_w, out_r, RUNS))
  during = nil
  if args&.first == '-e'
    system(CLIENT, '-p', pid.to_s, *args, out: File::NULL, err: File::NULL)
  elsif args
    client = start_client(pid, args)
    during = median(runs(in_w, out_r, RUNS))
    Process.kill(:INT, client)
    Process.wait(client)
    client = nil
  end
  after = median(runs(in_w, out_r, RUNS))
  [before, during, after]
ensure
  in_w&.close
  kill_and_reap(client, pid)
end

wanted = ENV['BENCH_MODES']&.split(',')
modes = wanted ? MODES.select { |_, a| wanted.include?(a.join(' ')) || wanted.include?(a.first) } : MODES

puts "While traced and after detach: the workload's speed, over its speed before, in one process"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}#{ENV['RUBYOPT'].to_s.empty? ? '' : " (RUBYOPT=#{ENV['RUBYOPT']})"}"
puts "- workload: #{ITERS} iterations of `w.other(i); H.key?(i); w.count` (never Worker#step); " \
     "median of #{RUNS} runs each, thread CPU time"
puts
puts '| traced with | before (s) | while traced (s) | after (s) | while traced vs before | after vs before |'
puts '| --- | ---: | ---: | ---: | ---: | ---: |'
def row(label, (before, during, after))
  d = during ? [format('%.3f', during), format('%.2fx', before / during)] : %w[- -]
  format('| %s | %.3f | %s | %.3f | %s | %.2fx |', label, before, d[0], after, d[1], before / after)
end
puts row('(never traced: two series)', measure(nil))
modes.each { |label, args| puts row(label, measure(args)) }
