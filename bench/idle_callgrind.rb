# frozen_string_literal: true

# bench/idle_callgrind.rb - what loading rbtrace costs a process nobody is
# attached to, in instructions (valgrind's callgrind: repeatable, whatever
# else the machine does). A fixed workload (the reference article's
# `h.key?(keys.sample)` plus a Ruby method call, N times) runs in four
# processes: without and with `-rrbtrace`, each with N iterations and with
# none. The workload's own instructions are the difference between the two
# of a kind (start-up and loading cancel out); the figure is rbtrace's over
# plain Ruby's.
#
#   bundle exec rake compile && ruby bench/idle_callgrind.rb     (~1 min)
#
# BENCH_ITERS: iterations (default 300_000).
require 'rbconfig'
require 'tempfile'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
ITERS = Integer(ENV.fetch('BENCH_ITERS', '300000'))

WORKLOAD = <<~RUBY
  def work(h, keys) = h.key?(keys.sample)
  h = (1..100).to_h { |i| [i, i] }
  keys = h.keys
  i = 0
  n = Integer(ARGV[0])
  while i < n
    work(h, keys)
    i += 1
  end
RUBY

require_valgrind!
require_build!

script = Tempfile.new(['idle_callgrind', '.rb'])
script.write(WORKLOAD)
script.close

def workload_instructions(script, rbtrace, iters)
  ruby = [RbConfig.ruby]
  ruby += ['-I', LIB, '-rrbtrace'] if rbtrace
  instructions([*ruby, script, iters.to_s])
end

plain = workload_instructions(script.path, false, ITERS) - workload_instructions(script.path, false, 0)
traced = workload_instructions(script.path, true, ITERS) - workload_instructions(script.path, true, 0)
script.unlink

puts "Idle cost in instructions: #{ITERS} iterations of `work(h, keys)` (`h.key?(keys.sample)`)"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts
puts '| process | workload instructions | per iteration | vs plain |'
puts '| --- | ---: | ---: | ---: |'
puts format('| plain Ruby | %d | %.1f | 1.0000x |', plain, plain.to_f / ITERS)
puts format('| with -rrbtrace, not attached | %d | %.1f | %.4fx |', traced, traced.to_f / ITERS,
            traced.to_f / plain)
