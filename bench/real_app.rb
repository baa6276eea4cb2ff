# frozen_string_literal: true

# bench/real_app.rb - requests per second of a real app traced: the Rails
# 6.1 app of the real-apps suite (spec/real/apps/rails, Active Record on
# sqlite3, Debian's packages) under `puma -w 2 --preload`, loaded by wrk
# (its ordinary, N+1 and slow actions in turn), untraced and with each mode
# attached to both workers; side by side in one run with the original gem
# (bench/original_gem.rb) in the modes it has (it ships no rack tracer; its
# activerecord.tracer names SQLiteAdapter#execute, gone from Rails 6.1, and
# traces nothing). Each figure is a pair, on a Puma booted for it: wrk
# untraced, then traced (these modes need global VM hooks, which leave a
# process somewhat slower after the detach: README, "Known limits"; a
# cluster serves one mode only). The ratio is the pair's, traced over
# untraced, seconds apart: this machine's speed moves too much between
# clusters for one untraced figure to serve them all.
#
#   bundle exec rake compile && ruby bench/real_app.rb   # BENCH_RUNS (3), BENCH_TIME (5 s)
#
# Debian's Ruby only (/usr/bin/ruby): Debian's Rails and Puma are built for it.
require 'fileutils'
require 'socket'
require 'time'
require 'timeout'
require 'tmpdir'

require_relative 'support'
require_relative 'original_gem'
include BenchSupport # rubocop:disable Style/MixinUsage

RUNS = Integer(ENV.fetch('BENCH_RUNS', '3'))
SECONDS = Integer(ENV.fetch('BENCH_TIME', '5'))
WARMUP = 3
APP = File.join(ROOT, 'spec', 'real', 'apps', 'rails')
WRK_SCRIPT = File.join(APP, 'wrk_load.lua')
# Mode => [our client's arguments, the original's] (nil: it has none).
# The first attaches nothing: what the pair's order alone does (the
# traced half comes later in the worker's life).
MODES = {
  '(nothing attached)' => [[], []],
  '-c activerecord' => [%w[-c activerecord], %w[-c activerecord]],
  '-c rack' => [%w[-c rack], nil],
  '--slow 5' => [%w[--slow 5], %w[--slow 5]],
  '-f' => [%w[-f], %w[-f]]
}.freeze

require_build!
abort 'bench/real_app.rb: run it with /usr/bin/ruby (Debian\'s Rails and Puma)' unless
  File.realpath(RbConfig.ruby) == File.realpath('/usr/bin/ruby')
%w[puma wrk].each do |cmd|
  abort "bench/real_app.rb: #{cmd} missing: run script/setup" unless system("command -v #{cmd} >/dev/null")
end
ORIGINAL = OriginalGem.find
warn "bench/real_app.rb: #{OriginalGem.why_not}; ours alone" unless ORIGINAL

def free_port
  server = TCPServer.new('127.0.0.1', 0)
  server.addr[1]
ensure
  server&.close
end

# A Puma cluster of the app loading rbtrace (ours, or the original gem's):
# [master pid, worker pids, port, its directory].
def boot(original)
  dir = Dir.mktmpdir('rbtrace-bench-rails')
  port = free_port
  log = File.join(dir, 'puma.log')
  env = (original ? OriginalGem.env : { 'RUBYLIB' => LIB })
        .merge('RUBYOPT' => '-rrbtrace', 'RAILS_APP_DB' => File.join(dir, 'shop.sqlite3'))
  master = OriginalGem.unbundled do
    spawn(env, 'puma', '-w', '2', '-t', '2:4', '--preload', '-e', 'production', '-b', "tcp://127.0.0.1:#{port}",
          'config.ru', chdir: APP, out: log, err: %i[child out], in: :close, pgroup: true)
  end
  workers = []
  Timeout.timeout(120) do
    until workers.size == 2
      sleep 0.2
      raise "puma exited:\n#{File.read(log)}" if Process.waitpid(master, Process::WNOHANG)

      workers = File.read(log).scan(/Worker \d \(PID: (\d+)\) booted/).flatten.map(&:to_i)
    end
  end
  [master, workers, port, dir]
rescue Exception # rubocop:disable Lint/RescueException -- interrupted too: no cluster left behind
  stop(master, dir) if master
  raise
end

def stop(master, dir)
  Process.kill(:KILL, -master)
  Process.wait(master)
rescue Errno::ESRCH, Errno::ECHILD
  nil
ensure
  FileUtils.rm_rf(dir)
end

# wrk for seconds: [requests/s, errors (socket errors and non-2xx)].
def wrk(port, seconds)
  out = IO.popen(['wrk', '-t', '1', '-c', '4', '-d', "#{seconds}s", '-s', WRK_SCRIPT, "http://127.0.0.1:#{port}"],
                 err: %i[child out], &:read)
  errors = out.scan(/(?:Non-2xx or 3xx responses|Socket errors: .*?):?\s*(\d+)/).flatten.sum(&:to_i)
  [out[%r{Requests/sec:\s*([\d.]+)}, 1].to_f, errors]
end

# The clients tracing both workers with args, once they are attached:
# ours takes both pids, the original one client a pid.
def attach(original, workers, args, dir)
  commands = if original
               workers.map { |w| [*OriginalGem.client_command, '-p', w.to_s, *args] }
             else
               [[CLIENT, '-p', *workers.map(&:to_s), *args]]
             end
  env = original ? OriginalGem.env : {}
  commands.each_with_index.map do |command, i|
    err = File.join(dir, "client-#{i}.err")
    pid = OriginalGem.unbundled { spawn(env, *command, out: File::NULL, err: err, in: :close) }
    Timeout.timeout(30) { sleep 0.05 until File.read(err).scan('attached to process').size >= (original ? 1 : 2) }
    pid
  rescue Timeout::Error
    warn "bench/real_app.rb: #{command.join(' ')} did not attach: #{File.read(err)}"
    pid
  end
end

def detach(clients)
  clients.each { |c| Process.kill(:INT, c) rescue nil }
  # rubocop:disable Style/CombinableLoops -- every client told first, then each waited for
  clients.each do |c|
    Timeout.timeout(30) { Process.wait(c) }
  rescue Timeout::Error
    Process.kill(:KILL, c) rescue nil
    Process.wait(c) rescue nil
  end
  # rubocop:enable Style/CombinableLoops
end

# One pair on a fresh cluster, warmed up: [requests/s untraced, traced
# with args, wrk's errors in both].
def measure(original, args)
  master, workers, port, dir = boot(original)
  wrk(port, WARMUP) # a fresh worker's first seconds are slower: the pair would favour the traced half
  untraced, errors = wrk(port, SECONDS)
  clients = args.empty? ? [] : attach(original, workers, args, dir)
  traced, traced_errors = wrk(port, SECONDS)
  detach(clients)
  [untraced, traced, errors + traced_errors]
ensure
  stop(master, dir) if master
end

servers = ORIGINAL ? [false, true] : [false]
results = Hash.new { |h, k| h[k] = [] } # [original, mode] => [[untraced, traced, errors], ...]
RUNS.times do |run|
  MODES.each do |mode, (ours, theirs)|
    servers.each do |original|
      args = original ? theirs : ours
      next unless args

      results[[original, mode]] << (pair = measure(original, args))
      warn format('run %d %-9s %-16s untraced %6.1f, traced %6.1f req/s', run + 1,
                  original ? 'original' : 'rbtrace', mode, pair[0], pair[1])
    end
  end
end

# [median untraced, median traced, median of the pairs' ratios].
summary = lambda do |original, mode|
  pairs = results[[original, mode]]
  [median(pairs.map(&:first)), median(pairs.map { |p| p[1] }), median(pairs.map { |u, t, _| t / u })]
end
puts 'Real app: the Rails 6.1 app of spec/real/apps/rails under puma -w 2 -t 2:4 --preload, ' \
     "wrk -t1 -c4 for #{SECONDS} s untraced then #{SECONDS} s traced on a fresh cluster " \
     "(after #{WARMUP} s of warm-up), " \
     "both workers traced, medians of #{RUNS} pairs"
puts
puts "- date: #{Time.now.utc.iso8601}"
puts "- ruby: #{RUBY_DESCRIPTION}"
puts "- machine: #{`nproc`.strip} CPUs, load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
puts
puts '| mode | rbtrace: untraced, traced req/s | traced / untraced | original gem: untraced, traced req/s | traced / untraced |'
puts '| --- | ---: | ---: | ---: | ---: |'
MODES.each do |mode, (_, theirs)|
  row = format('| `%s` | %.1f, %.1f | **%.2fx** |', mode, *summary.call(false, mode))
  row += if ORIGINAL && theirs
           format(' %.1f, %.1f | %.2fx |', *summary.call(true, mode))
         else
           ' n/a | |'
         end
  puts row
end
bad = results.select { |_, pairs| pairs.sum(&:last).positive? }.keys
puts
puts(if bad.empty?
       'wrk saw no errors.'
     else
       "wrk saw errors in: #{bad.map { |o, m| "#{o ? 'original' : 'rbtrace'} #{m}" }.join(', ')}"
     end)
