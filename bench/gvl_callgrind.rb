# frozen_string_literal: true

# bench/gvl_callgrind.rb - what --gvl's hook costs one GVL hand-off, in
# instructions (valgrind's callgrind: the same count whatever else the
# machine does, unlike bench/gvl.rb's times). Two threads call Thread.pass
# N times each under `rbtrace --gvl`, the app under callgrind; every
# hand-off is two hook calls (READY, then RESUMED with its GVL event
# encoded into the ring), and RBTrace.gvl_stats counts the calls. The figure
# is gvl_hook_i's inclusive count (the clock, the READY time kept or taken,
# the event) over the calls; the threshold MS is set high so that the client
# prints nothing.
#
#   bundle exec rake compile && ruby bench/gvl_callgrind.rb   # BENCH_ITERS (default 20_000)
#
# Ruby 3.2+ (the thread event hooks): on 3.1 it says it is not run.
require 'open3'
require 'rbconfig'
require 'tempfile'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
ITERS = Integer(ENV.fetch('BENCH_ITERS', '20000'))

APP = <<~RUBY
  $stdout.sync = true
  puts "ready"
  $stdin.gets
  2.times.map { Thread.new { #{ITERS}.times { Thread.pass } } }.each(&:join)
  puts "done \#{RBTrace.gvl_stats.inspect}"
  $stdin.gets
RUBY

require_build!
require_valgrind!
unless IO.popen([RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', 'print RBTrace.gvl_supported?'], &:read) == 'true'
  puts "bench/gvl_callgrind.rb: not run: #{RUBY_DESCRIPTION} has no thread event hooks (--gvl needs Ruby 3.2+)"
  exit 0 # bench/all goes on
end

# [hook calls, gvl_hook_i's inclusive instructions, unmeasured waits]
def measure
  out = Tempfile.new('callgrind.out')
  app_in_r, app_in = IO.pipe
  app_out, app_out_w = IO.pipe
  app = spawn('valgrind', '--tool=callgrind', "--callgrind-out-file=#{out.path}", RbConfig.ruby,
              '-I', LIB, '-rrbtrace', '-e', APP, in: app_in_r, out: app_out_w, err: File::NULL)
  [app_in_r, app_out_w].each(&:close)
  app_out.gets # ready
  client, client_err = spawn_attached([CLIENT, '-p', app.to_s, '--gvl', '1000000', '--timeout', '60'])
  app_in.puts 'go'
  # "done [hooked, runs, unmeasured]" (RBTrace.gvl_stats)
  runs, unmeasured = app_out.gets[/\[.*\]/].delete('[]').split(', ').drop(1).map { |n| Integer(n) }
  Process.kill(:INT, client)
  Process.wait(client)
  client = nil
  app_in.close
  Process.wait(app)
  app = nil
  annotated, st = Open3.capture2('callgrind_annotate', '--inclusive=yes', '--threshold=100', out.path)
  raise "callgrind_annotate #{out.path} failed" unless st.success?

  line = annotated.lines.grep(/gvl_hook_i/).first or abort 'bench/gvl_callgrind.rb: no gvl_hook_i in the profile'
  [runs, Integer(line[/\A\s*([\d,]+)/, 1].delete(',')), unmeasured]
ensure
  client_err&.close
  kill_and_reap(client, app)
  out&.close!
end

runs, instructions, unmeasured = measure
puts "What --gvl's hook costs a call, in instructions (callgrind; bench/gvl_callgrind.rb)"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts "- two threads, #{ITERS} Thread.pass each, under `rbtrace --gvl 1000000`"
puts
puts '| hook calls | of them unmeasured waits | gvl_hook_i, inclusive | a hook call |'
puts '| ---: | ---: | ---: | ---: |'
puts format('| %d | %d | %d | %.1f |', runs, unmeasured, instructions, instructions.fdiv(runs))
