# frozen_string_literal: true

# bench/per_call_callgrind.rb - what one traced call costs the app, in
# instructions (valgrind's callgrind counts them; the same binary and input
# give the same count whatever else the machine does, unlike
# bench/per_call.rb's times). The app, under callgrind, runs a loop N and 2N
# times, untraced and while traced; the difference between the two lengths
# is the loop's own count, free of start-up, attach and exit:
#
#   per iteration = (count(2N) - count(N)) / N
#   per traced call = (traced - untraced per iteration) / traced calls per iteration
#
# Three loops: Ruby method calls (`m(i)`) under `rbtrace -f`, which reports 3
# calls an iteration (m, Integer#< and Integer#+); operators (Array#[],
# Integer#+ - * / %) under `-f`, 8 calls an iteration: their IDs are their
# characters, which the hook's recent methods must tell apart; and
# `h.key?(i)` under `rbtrace -m 'Hash#key?'` (a wrapped C method: 1 traced
# call an iteration).
#
# Instructions of every thread of the app are counted: the hook's, and the
# writer thread's that sends the events (not the client's).
#
# No event may be lost, or the count mixes encoded events with dropped ones
# (which cost less): under valgrind the app's threads take turns on one
# CPU, and the writer drains the ring far slower than the loop fills it.
# So the loops are short enough for the ring (2 MiB) to hold every event
# of the longer run (2N = 20,000 iterations: 120,000 events of ~4.5 bytes
# under -f), and the client's count of lost events is printed with them.
#
# Then where a traced call's instructions go: the same difference taken per
# function (callgrind_annotate's self counts), summed by shared object
# (rbtrace.so, libruby, libc, ...) and the functions that add the most.
# Debian's libruby has no symbols (its static functions show as addresses);
# a Ruby built from source (bench/matrix 3.3) names them.
#
#   bundle exec rake compile && ruby bench/per_call_callgrind.rb   # BENCH_ITERS (default 10_000)
require 'open3'
require 'rbconfig'
require 'tempfile'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
ITERS = Integer(ENV.fetch('BENCH_ITERS', '10000'))

# iters: the shorter run's iterations (the longer runs twice as many).
Loop = Struct.new(:label, :body, :tracer_args, :traced_calls, :iters)
LOOPS = [
  Loop.new('`m(i); i += 1` under `-f`', 'm(i)', ['-f'], 3, ITERS),
  # Operators (8 traced calls an iteration: half as many iterations keep
  # the longer run's events in the ring).
  Loop.new('`(a[0] + 7 - 3) * 2 / 4 % 5; i += 1` under `-f`', '(a[0] + 7 - 3) * 2 / 4 % 5', ['-f'], 8,
           ITERS / 2),
  Loop.new("`h.key?(i); i += 1` under `-m 'Hash#key?'`", 'h.key?(i)', ['-m', 'Hash#key?'], 1, ITERS)
].freeze

def app(body)
  <<~RUBY
    $stdout.sync = true
    def m(x) = x
    h = { 1 => 2 }
    a = [1]
    n = Integer(ARGV[0])
    puts "ready"
    $stdin.gets
    i = 0
    while i < n
      #{body}
      i += 1
    end
    puts "done"
    $stdin.gets
  RUBY
end

require_build!
require_valgrind!

# Self instructions by function ("function [object]") from a callgrind
# output file; recursion levels (name'2) are summed into one. Code inlined
# from another source file (a header's inline function) has a line of its
# own, "file.h:function" without the object: it counts for the function,
# in the object its own line names.
def by_function(path)
  out, st = Open3.capture2('callgrind_annotate', '--threshold=100', '--auto=no', path)
  raise "callgrind_annotate #{path} failed" unless st.success?

  objects = {}
  lines = out.each_line.filter_map do |line|
    m = line.match(/\A\s*([\d,]+)\s+\([^)]*\)\s+(?:[^:\s]*:)?(\S+?)(?:'\d+)?(?:\s+\[(.+)\])?\s*\z/)
    next unless m

    objects[m[2]] ||= File.basename(m[3]) if m[3]
    [m[2], Integer(m[1].delete(','))]
  end
  lines.each_with_object(Hash.new(0)) do |(function, n), counts|
    counts["#{function} [#{objects.fetch(function, '?')}]"] += n
  end
end

# Instructions of the app running iters iterations of loop, traced or not:
# [the total, by function, events lost (nil untraced)].
def count(loop, iters, traced)
  out = Tempfile.new('callgrind.out')
  app_in_r, app_in = IO.pipe
  app_out, app_out_w = IO.pipe
  log = Tempfile.new('callgrind.log')
  app = spawn('valgrind', '--tool=callgrind', "--callgrind-out-file=#{out.path}", RbConfig.ruby,
              '-I', LIB, '-rrbtrace', '-e', app(loop.body), iters.to_s,
              in: app_in_r, out: app_out_w, err: log.path)
  [app_in_r, app_out_w].each(&:close)
  app_out.gets # ready
  client, client_err = start_client(app, loop.tracer_args) if traced
  app_in.puts 'go'
  app_out.gets # done
  lost = stop_client(client, client_err) if client
  client = nil
  app_in.close
  Process.wait(app)
  app = nil
  [Integer(File.read(log.path)[/Collected : (\d+)/, 1]), by_function(out.path), lost]
ensure
  client_err&.close
  kill_and_reap(client, app)
  out&.close!
  log&.close!
end

# [pid, its stderr]
def start_client(pid, args)
  # "attached": its tracers are set up (slowly, under valgrind: the time-out)
  spawn_attached([CLIENT, '-p', pid.to_s, *args, '--stats', '--timeout', '60'])
end

# Events the client counted lost (its --stats line).
def stop_client(pid, err)
  Process.kill(:INT, pid)
  Process.wait(pid)
  stats = err.read
  Integer(stats[/(\d+) lost/, 1] || abort("bench/per_call_callgrind.rb: no --stats line from the client: #{stats}"))
end

# [instructions per iteration, by function per iteration, events lost in the two runs]
def per_iteration(loop, traced)
  long_total, long, long_lost = count(loop, 2 * loop.iters, traced)
  short_total, short, short_lost = count(loop, loop.iters, traced)
  [(long_total - short_total).fdiv(loop.iters),
   (long.keys | short.keys).to_h { |f| [f, (long[f] - short[f]).fdiv(loop.iters)] },
   traced ? short_lost + long_lost : 0]
end

# What the traced loop adds per traced call, by function.
def added_by_function(untraced, traced, calls)
  (untraced.keys | traced.keys).to_h { |f| [f, (traced.fetch(f, 0) - untraced.fetch(f, 0)) / calls] }
end

def breakdown(loop, added)
  by_object = added.group_by { |f, _| f[/\[(.+)\]\z/, 1].sub(/\.so.*/, '.so') }
                   .transform_values { |fs| fs.sum { |_, n| n } }
  puts
  puts "#### Where a traced call's instructions go: #{loop.label}"
  puts
  puts '| shared object | added per traced call |'
  puts '| --- | ---: |'
  by_object.select { |_, n| n.abs >= 1 }.sort_by { |_, n| -n }.each { |o, n| puts format('| %s | %.1f |', o, n) }
  puts
  puts '| function (the most added) | added per traced call |'
  puts '| --- | ---: |'
  added.sort_by { |_, n| -n }.first(15).each { |f, n| puts format('| `%s` | %.1f |', f, n) }
end

puts 'Per traced call, in instructions (callgrind; bench/per_call_callgrind.rb)'
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts "- #{ITERS} and #{2 * ITERS} iterations of each loop (of the operators' loop half as many), every thread of the app counted"
puts
puts '| loop | untraced per iteration | traced per iteration | added per traced call (a CALL and a RETURN event) | events lost |'
puts '| --- | ---: | ---: | ---: | ---: |'
lossy = false
added = LOOPS.to_h do |loop|
  untraced, untraced_fs = per_iteration(loop, false)
  traced, traced_fs, lost = per_iteration(loop, true)
  lossy ||= lost.positive?
  puts format('| %s | %.1f | %.1f | %.1f | %d |', loop.label, untraced, traced, (traced - untraced) / loop.traced_calls, lost)
  [loop, added_by_function(untraced_fs, traced_fs, loop.traced_calls)]
end
if lossy
  puts
  puts '**Events were lost: these counts mix encoded events with dropped ones (cheaper). Lower BENCH_ITERS.**'
end
added.each { |loop, fs| breakdown(loop, fs) }
