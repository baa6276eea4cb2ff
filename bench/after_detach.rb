# frozen_string_literal: true

# bench/after_detach.rb - is an app as fast after rbtrace detached as before
# it was traced? For each way of tracing, one fresh process runs a fixed
# workload (a tight loop of Ruby method calls, C method calls and attribute
# reads) several times before anyone attaches, then is traced that way for a
# second, detached, and runs the workload again. The ratio is the median
# time before over the median time after, in the same process (1.00x: as
# fast as before; 0.80x: 20 % slower for the rest of its life).
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
  ['-m Worker#step (a wrapped Ruby method)', ['-m', 'Worker#step']],
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
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    i = 0
    while i < #{ITERS}
      w.other(i)
      H.key?(i)
      w.count
      i += 1
    end
    puts Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
  end
RUBY

require_build!

def runs(io_in, io_out, n)
  Array.new(n) do
    io_in.puts 'go'
    Float(io_out.gets)
  end
end

def trace_for_a_second(pid, args)
  if args.first == '-e'
    system(CLIENT, '-p', pid.to_s, *args, out: File::NULL, err: File::NULL)
    return
  end
  client = spawn(CLIENT, '-p', pid.to_s, *args, out: File::NULL, err: File::NULL)
  sleep 1
  Process.kill(:INT, client)
  Process.wait(client)
end

def measure(args)
  in_r, in_w = IO.pipe
  out_r, out_w = IO.pipe
  pid = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', WORKLOAD, in: in_r, out: out_w)
  in_r.close
  out_w.close
  out_r.gets # ready
  runs(in_w, out_r, 1) # warm up
  before = median(runs(in_w, out_r, RUNS))
  trace_for_a_second(pid, args) if args
  after = median(runs(in_w, out_r, RUNS))
  [before, after]
ensure
  in_w&.close
  if pid
    Process.kill(:KILL, pid) rescue nil
    Process.wait(pid) rescue nil
  end
end

wanted = ENV['BENCH_MODES']&.split(',')
modes = wanted ? MODES.select { |_, a| wanted.include?(a.join(' ')) || wanted.include?(a.first) } : MODES

puts "After detach: the workload's speed after tracing, over its speed before, in one process"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}#{ENV['RUBYOPT'].to_s.empty? ? '' : " (RUBYOPT=#{ENV['RUBYOPT']})"}"
puts "- workload: #{ITERS} iterations of `w.other(i); H.key?(i); w.count`; median of #{RUNS} runs each side"
puts
puts '| traced with | before (s) | after (s) | after vs before |'
puts '| --- | ---: | ---: | ---: |'
before, after = measure(nil)
puts format('| (never traced: two series) | %.3f | %.3f | %.2fx |', before, after, before / after)
modes.each do |label, args|
  before, after = measure(args)
  puts format('| %s | %.3f | %.3f | %.2fx |', label, before, after, before / after)
end
