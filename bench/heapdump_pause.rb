# frozen_string_literal: true

# bench/heapdump_pause.rb - how long `rbtrace --heapdump` stops an app with a
# big heap (BENCH_HEAP_MB, default 500 MB of strings), against the fork
# alone. The app's main thread loops and keeps the longest gap between two
# of its iterations (its pause); a second thread of the app, woken by this
# script, resets and reports it. Each run resets it, has the client do its
# work, and reads the longest gap:
#
#   heap dump:   rbtrace -p PID --heapdump FILE
#   fork alone:  rbtrace -p PID -e 'Process.wait(fork { exit!(0) })'
#   fork, child kept as long as the dump's:
#                rbtrace -p PID -e 'Process.wait(fork { sleep SECS; exit!(0) })'
#
# All go through the same eval (a thread of the app that needs the GVL from
# the busy main thread), so the difference between them is what the heap
# dump adds to the app's pause beyond the fork. The third is the fair
# baseline: while a child lives, every page the app writes to is copied
# first (copy-on-write faults in the app), which a child that exits at once
# spares it; SECS is the time the dump's child took in the same run. Also
# printed: the pause the client reports (the fork call's CPU time in the
# app). Median of BENCH_RUNS (default 3) runs each, the three interleaved.
#
#   bundle exec rake compile && ruby bench/heapdump_pause.rb
require 'open3'
require 'rbconfig'
require 'time'
require 'tmpdir'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
HEAP_MB = Integer(ENV.fetch('BENCH_HEAP_MB', '500'))
RUNS = Integer(ENV.fetch('BENCH_RUNS', '3'))

APP = <<~RUBY
  $stdout.sync = true
  # #{HEAP_MB} MB in 2.5 KB strings: a heap whose pages the fork must copy
  # the tables of, with few enough objects that the dump is quick to write.
  KEEP = Array.new(#{HEAP_MB} * 1024 * 1024 / 2560) { |i| i.to_s * 1 + "x" * 2550 }
  GC.start
  $max = 0.0
  $skip = true
  Thread.new do
    while (line = $stdin.gets)
      if line.start_with?("reset")
        $max = 0.0
        $skip = true
        puts "reset"
      else
        puts "max \#{$max}"
      end
    end
  end
  puts "ready"
  last = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  loop do
    now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    if $skip
      $skip = false
    elsif now - last > $max
      $max = now - last
    end
    last = now
  end
RUBY

require_build!

def rss_mib(pid)
  Integer(File.foreach("/proc/#{pid}/status").find { |l| l.start_with?('VmRSS:') }[/\d+/]) / 1024.0
end

# The app's longest pause (seconds) while command ran, and what it printed.
def pause_of(app_in, app_out, command)
  app_in.puts 'reset'
  app_out.gets
  out, err, st = Open3.capture3(*command)
  raise "#{command.join(' ')} failed: #{out}#{err}" unless st.success?

  sleep 0.3
  app_in.puts 'report'
  [Float(app_out.gets[/max (\S+)/, 1]), out]
end

def main
  app_in_r, app_in = IO.pipe
  app_out, app_out_w = IO.pipe
  app = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', APP, in: app_in_r, out: app_out_w)
  [app_in_r, app_out_w].each(&:close)
  app_in.sync = true
  app_out.gets
  rss = rss_mib(app)
  dump_pauses = []
  reported = []
  fork_pauses = []
  kept_pauses = []
  child_times = []
  RUNS.times do |i|
    file = File.join(Dir.tmpdir, "rbtrace-bench-heapdump-#{Process.pid}-#{i}.json")
    pause, out = pause_of(app_in, app_out, [CLIENT, '-p', app.to_s, '--heapdump', file])
    File.unlink(file)
    dump_pauses << pause
    reported << Float(out[/pause:\s+(\S+) s/, 1])
    child_secs = Float(out[/wrote the file in (\S+) s/, 1])
    child_times << child_secs
    fork_pauses << pause_of(app_in, app_out,
                            [CLIENT, '-p', app.to_s, '-e', 'Process.wait(fork { exit!(0) })']).first
    kept = format('Process.wait(fork { sleep %.3f; exit!(0) })', child_secs)
    kept_pauses << pause_of(app_in, app_out,
                            [CLIENT, '-p', app.to_s, '--timeout', (child_secs + 30).ceil.to_s, '-e', kept]).first
  end

  ms = ->(s) { format('%.1f ms', s * 1000) }
  puts "Heap dump pause: an app with #{HEAP_MB} MB of strings (VmRSS #{format('%.0f', rss)} MiB), " \
       "median of #{RUNS} runs (bench/heapdump_pause.rb)"
  puts
  puts "- date: #{Time.now.utc.iso8601}"
  puts "- ruby: #{RUBY_DESCRIPTION}"
  puts
  puts "| client's work | the app's longest pause | runs |"
  puts '| --- | ---: | --- |'
  puts "| `--heapdump FILE` | #{ms[median(dump_pauses)]} | #{dump_pauses.map(&ms).join(', ')} |"
  puts "| `-e 'Process.wait(fork { exit!(0) })'` | #{ms[median(fork_pauses)]} | " \
       "#{fork_pauses.map(&ms).join(', ')} |"
  puts "| `-e 'Process.wait(fork { sleep SECS; exit!(0) })'`, the child kept as long as the dump's | " \
       "#{ms[median(kept_pauses)]} | #{kept_pauses.map(&ms).join(', ')} |"
  puts
  puts "- the pause --heapdump reported (the fork call's CPU time): #{ms[median(reported)]} (median)"
  puts "- the dump's child took #{format('%.1f', median(child_times))} s (median)"
  puts "- heap dump pause / fork pause: #{format('%.2f', median(dump_pauses) / median(fork_pauses))}x; " \
       '/ the pause of a fork whose child lives as long: ' \
       "#{format('%.2f', median(dump_pauses) / median(kept_pauses))}x"
ensure
  kill_and_reap(app)
end

main
