# frozen_string_literal: true

# bench/tracepoint_leftovers.rb - what a TracePoint leaves behind in the VM
# once disabled, counted in instructions (valgrind's callgrind: repeatable,
# whatever else the machine does). Each variant is a fresh Ruby that runs a
# loop of method calls (a Ruby method, a C method, an attr_reader), then
# enables and disables one kind of TracePoint, then runs the loop again;
# the figure is the instructions of the whole process over those of the
# variant that enables nothing. This is the VM's behaviour, not rbtrace's:
# it is why rbtrace wraps methods and targets TracePoints where it can.
#
#   ruby bench/tracepoint_leftovers.rb        (needs valgrind; ~1 min)
#
# BENCH_ITERS: loop iterations per run (default 200_000).
require 'rbconfig'
require 'tempfile'
require 'time'
require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage

ITERS = Integer(ENV.fetch('BENCH_ITERS', '200000'))

WORKLOAD = <<~RUBY
  class Worker
    attr_reader :count
    def initialize = @count = 0
    def step(x) = @count += x
    def other(x) = x + 1
  end
  H = { 1 => true }
  def run(n)
    w = Worker.new
    i = 0
    while i < n
      w.other(i); H.key?(i); w.count
      i += 1
    end
  end
  run(#{ITERS})
  tp =
    case ARGV[0]
    when 'targeted' then TracePoint.new(:call, :return) {}.tap { |t| t.enable(target: Worker.instance_method(:step)) }
    when 'call' then TracePoint.new(:call, :return) {}.tap(&:enable)
    when 'c_call' then TracePoint.new(:c_call, :c_return) {}.tap(&:enable)
    when 'raise' then TracePoint.new(:raise) {}.tap(&:enable)
    end
  tp&.disable
  run(#{ITERS})
RUBY

VARIANTS = {
  'none' => 'nothing enabled',
  'targeted' => 'TracePoint(:call, :return).enable(target: Worker#step), disabled',
  'raise' => 'TracePoint(:raise).enable, disabled',
  'call' => 'TracePoint(:call, :return).enable (global), disabled',
  'c_call' => 'TracePoint(:c_call, :c_return).enable (global), disabled'
}.freeze

require_valgrind!

script = Tempfile.new(['tracepoint_leftovers', '.rb'])
script.write(WORKLOAD)
script.close

counts = VARIANTS.keys.to_h { |v| [v, instructions([RbConfig.ruby, script.path, v])] }
base = counts['none']
puts "TracePoint leftovers: instructions of the whole process, #{ITERS} iterations before and after"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts
puts '| enabled, then disabled, between the two loops | instructions | vs nothing | extra per iteration of the second loop |'
puts '| --- | ---: | ---: | ---: |'
# The second loop's share: half of (total - startup) is a loop; the extra is its slowdown.
VARIANTS.each do |v, label|
  extra = counts[v] - base
  puts format('| %s | %d | %+.2f%% | %+d |', label, counts[v],
              100.0 * extra / base, extra / ITERS)
end
script.unlink
