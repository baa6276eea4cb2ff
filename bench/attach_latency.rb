# frozen_string_literal: true

# bench/attach_latency.rb - how long `rbtrace-client -p PID -e Process.pid`
# takes, from starting the compiled client to its exit with the answer,
# against a target in each of the states a production app is usually in.
# Runs on the Ruby that runs it (compile for that Ruby first):
#
#   bundle exec rake compile && ruby bench/attach_latency.rb
#   PATH=/var/cache/rbtrace/ruby-3.3/bin:$PATH sh -c 'bundle exec rake compile && ruby bench/attach_latency.rb'
#
# Prints a Markdown table: per state, how many of the runs answered, the
# median and the slowest. BENCH_RUNS sets the runs per state (default 20).
require 'open3'
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '20'))

STATES = {
  'busy in Ruby' => 'x = 0; loop { x += 1 }',
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

def measure(code)
  r, w = IO.pipe
  pid = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', "$stdout.sync = true; puts 'ready'; #{code}",
              out: w, err: File::NULL)
  w.close
  r.gets
  sleep 0.2
  times = []
  RUNS.times do
    t = now
    out, _err, st = Open3.capture3(CLIENT, '-p', pid.to_s, '-e', 'Process.pid', '--timeout', '5')
    times << (now - t) * 1000 if st.success? && out.include?("=> #{pid}")
  end
  times.sort
ensure
  if pid
    Process.kill(:KILL, pid)
    Process.wait(pid)
  end
  r&.close
end

puts "Attach latency: `rbtrace-client -p PID -e Process.pid`, #{RUNS} runs per state"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts
puts '| target state | answered | median | slowest |'
puts '| --- | ---: | ---: | ---: |'
STATES.each do |name, code|
  times = measure(code)
  median = times.empty? ? '-' : format('%.1f ms', times[times.size / 2])
  slowest = times.empty? ? '-' : format('%.1f ms', times.last)
  puts "| #{name} | #{times.size}/#{RUNS} | #{median} | #{slowest} |"
end
