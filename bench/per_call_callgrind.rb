# frozen_string_literal: true

# bench/per_call_callgrind.rb - what one call traced by --firehose costs the
# app, in instructions (valgrind's callgrind counts them; the same binary
# and input give the same count whatever else the machine does, unlike
# bench/per_call.rb's times). The app, under callgrind, runs a loop of
# Ruby method calls (`m(i)`, with Integer#< and Integer#+ that the firehose
# reports too) N and 2N times, untraced and while `rbtrace -f` traces it;
# the difference between the two lengths is the loop's own count, free of
# start-up, attach and exit:
#
#   per iteration = (count(2N) - count(N)) / N
#   per traced call = (traced - untraced per iteration) / 3
#
# Instructions of every thread of the app are counted: the hook's, and the
# writer thread's that sends the events (not the client's).
#
#   bundle exec rake compile && ruby bench/per_call_callgrind.rb   # BENCH_ITERS (default 100_000)
require 'open3'
require 'rbconfig'
require 'tempfile'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
ITERS = Integer(ENV.fetch('BENCH_ITERS', '100000'))

APP = <<~RUBY
  $stdout.sync = true
  def m(x) = x
  n = Integer(ARGV[0])
  puts "ready"
  $stdin.gets
  i = 0
  while i < n
    m(i)
    i += 1
  end
  puts "done"
  $stdin.gets
RUBY

require_build!
require_valgrind!

# Instructions of the app running iters iterations, traced by -f or not.
def count(iters, traced)
  out = Tempfile.new('callgrind.out')
  app_in_r, app_in = IO.pipe
  app_out, app_out_w = IO.pipe
  log = Tempfile.new('callgrind.log')
  app = spawn('valgrind', '--tool=callgrind', "--callgrind-out-file=#{out.path}", RbConfig.ruby,
              '-I', LIB, '-rrbtrace', '-e', APP, iters.to_s,
              in: app_in_r, out: app_out_w, err: log.path)
  [app_in_r, app_out_w].each(&:close)
  app_out.gets # ready
  client = traced && start_client(app)
  app_in.puts 'go'
  app_out.gets # done
  stop_client(client) if client
  app_in.close
  Process.wait(app)
  app = nil
  Integer(File.read(log.path)[/Collected : (\d+)/, 1])
ensure
  [client, app].compact.each do |pid|
    Process.kill(:KILL, pid) rescue nil # rubocop:disable Style/RescueModifier
    Process.wait(pid) rescue nil # rubocop:disable Style/RescueModifier
  end
  out&.close!
  log&.close!
end

def start_client(pid)
  err_r, err_w = IO.pipe
  client = spawn(CLIENT, '-p', pid.to_s, '-f', '--timeout', '60', out: File::NULL, err: err_w)
  err_w.close
  nil until err_r.gets.to_s.start_with?('*** attached')
  err_r.close
  sleep 2 # the hook is installed after "attached" (slowly, under valgrind)
  client
end

def stop_client(pid)
  Process.kill(:INT, pid)
  Process.wait(pid)
end

def per_iteration(traced) = (count(2 * ITERS, traced) - count(ITERS, traced)).fdiv(ITERS)

untraced = per_iteration(false)
traced = per_iteration(true)
puts "Per traced call under --firehose, in instructions (callgrind; bench/per_call_callgrind.rb)"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts "- loop: `m(i); i += 1` (3 calls an iteration), #{ITERS} and #{2 * ITERS} iterations"
puts
puts '| | instructions per iteration |'
puts '| --- | ---: |'
puts format('| untraced | %.1f |', untraced)
puts format('| traced by -f | %.1f |', traced)
puts format('| added per traced call (a CALL and a RETURN event) | %.1f |', (traced - untraced) / 3)
