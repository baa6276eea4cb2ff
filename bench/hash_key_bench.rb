# bench/hash_key_bench.rb - one measurement of bench/run: `h.key?(keys.sample)`
# under benchmark-ips, on 1,000,000 keys of which half are in the hash.
#
# Talks to the driver over its stdin and stdout: prints "ready PID" once the
# data is built, waits for a line on stdin (the driver attaches a tracer
# first), measures, prints "RESULT ips=... sd=...", then waits for stdin to
# close so that the tracer detaches from a live process.
#
# With BENCH_BUSY_WAIT=1 it waits for that line busily: the original rbtrace
# gem attaches only to a process that runs Ruby code (its postponed job runs
# nobody's way while the main thread is blocked in a read).
#
# Run alone: echo | ruby -rbundler/setup bench/hash_key_bench.rb
require 'benchmark/ips'

warmup = Float(ENV.fetch('BENCH_WARMUP', '2'))
time = Float(ENV.fetch('BENCH_TIME', '5'))

n = 1_000_000
h = {}
keys = Array.new(n) { |i| i }
keys.sample(n >> 1).each { |k| h[k] = true }

$stdout.sync = true
puts "ready #{Process.pid}"
if ENV['BENCH_BUSY_WAIT']
  nil while $stdin.read_nonblock(1, exception: false) == :wait_readable
else
  $stdin.gets
end

report = Benchmark.ips do |x|
  x.config(warmup: warmup, time: time)
  x.report('h.key?(keys.sample)') { h.key?(keys.sample) }
end

entry = report.entries.first
puts format('RESULT ips=%.1f sd=%.1f', entry.ips, entry.ips_sd)
$stdin.read
