# frozen_string_literal: true

# bench/throughput.rb - how many events a second the whole pipeline carries
# (app's hook or wrapper -> ring -> writer thread -> socket -> client's
# decoder and text renderer, to /dev/null), and whether every event is
# accounted for. The app makes CALLS calls of Hash#key? (traced with -m,
# wrapped: two events a call) as fast as it can once it sees the method
# traced; the client runs with --stats, which counts the events it received
# and the process's reports of those it dropped. events/s = received /
# the app's loop time. Exact: received + lost must equal 2 x CALLS.
#
#   bundle exec rake compile && ruby bench/throughput.rb   # BENCH_RUNS (5), BENCH_CALLS (2_000_000)
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '5'))
CALLS = Integer(ENV.fetch('BENCH_CALLS', '2000000'))

APP = <<~RUBY
  $stdout.sync = true
  h = { 1 => 2 }
  puts "ready"
  sleep 0.01 while Hash.instance_method(:key?).owner == Hash
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  i = 0
  while i < #{CALLS}
    h.key?(1)
    i += 1
  end
  puts Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
  sleep
RUBY

require_build!

# One run: [seconds of the app's loop, events received, events lost].
def run_once
  out_r, out_w = IO.pipe
  app = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', APP, out: out_w)
  out_w.close
  out_r.gets
  # Not Open3.popen3: it would make the client's stdout a pipe nobody reads.
  err_r, err_w = IO.pipe
  client = spawn(CLIENT, '-p', app.to_s, '-m', 'Hash#key?', '--stats', out: File::NULL, err: err_w)
  err_w.close
  secs = Float(out_r.gets)
  sleep 0.5 # the client catches up with what is still in the ring
  Process.kill(:INT, client)
  stats = err_r.read.match(/(\d+) events received, (\d+) lost/)&.captures&.map(&:to_i)
  Process.wait(client)
  client = nil
  [secs, *stats]
ensure
  kill_and_reap(client, app)
  [out_r, err_r].each { |io| io&.close }
end

runs = Array.new(RUNS) { run_once }
puts "Throughput: #{CALLS} calls of Hash#key? traced with -m (#{2 * CALLS} events), client rendering to /dev/null, #{RUNS} runs"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts "- machine: #{`nproc`.strip} CPUs"
puts
puts '| run | app loop (s) | events received | events lost | received + lost = generated | events/s delivered |'
puts '| ---: | ---: | ---: | ---: | --- | ---: |'
runs.each_with_index do |(secs, received, lost), i|
  exact = received && received + lost == 2 * CALLS ? 'yes' : 'NO'
  puts format('| %d | %.3f | %d | %d | %s | %.2f M |', i + 1, secs, received.to_i, lost.to_i, exact, received.to_i / secs / 1e6)
end
rates = runs.map { |secs, received, _| received.to_i / secs / 1e6 }
puts
puts format('Median: %.2f M events/s delivered; runs with nothing lost: %d of %d', median(rates),
            runs.count { |r| r[2].to_i.zero? }, RUNS)
