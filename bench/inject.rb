# frozen_string_literal: true

# bench/inject.rb - `rbtrace -p PID --inject -e Process.pid` against fresh
# apps started WITHOUT rbtrace, in the states a production app is usually
# in (docs/DESIGN.md, "Injection"): per state, how many injections
# answered, how long the app's main thread was stopped (the client's
# "*** injected ... stopped N ms"), and the time from starting the client
# to the eval's answer on its stdout. Runs on the Ruby that runs it
# (compile for it first; as root):
#
#   bundle exec rake compile && ruby bench/inject.rb
#   PATH=/var/cache/rbtrace/ruby-3.4/bin:$PATH sh -c 'bundle exec rake compile && ruby bench/inject.rb'
#
# BENCH_RUNS sets the injections per state (default 10), each into a new
# process; BENCH_STATES, a regular expression, the states run (all by
# default). Prints a Markdown table.
require 'rbconfig'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
RUNS = Integer(ENV.fetch('BENCH_RUNS', '10'))

STATES = {
  'sleep' => 'sleep',
  'IO.select' => 'r, _w = IO.pipe; IO.select([r])',
  'pipe read' => 'r, _w = IO.pipe; r.read',
  'Queue#pop' => 'Thread.new { sleep }; q = Queue.new; q.pop',
  'busy in Ruby' => 'x = 0; loop { x += 1 }',
  'asleep, 9 threads busy' => '9.times { Thread.new { loop { 1 + 1 } } }; sleep',
  '20 threads asleep' => '19.times { Thread.new { sleep } }; sleep',
  'timed sleeps' => 'loop { sleep 0.1 }'
}.freeze

require_build!
abort 'bench/inject.rb: --inject needs root (or CAP_SYS_PTRACE)' unless Process.uid.zero?

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# A new app in the state code puts it in, without rbtrace: its pid.
def start_app(code)
  r, w = IO.pipe
  pid = spawn(RbConfig.ruby, '-e', "$stdout.sync = true; puts 'ready'; #{code}", out: w, err: File::NULL)
  w.close
  r.gets
  r.close
  sleep 0.2 # in its state
  pid
end

# One injection: [answered?, stopped ms, ms to the answer, what it said].
def inject_once(pid)
  t0 = now
  out, err, = Open3.capture3(CLIENT, '-p', pid.to_s, '--inject', '--timeout', '10', '-e', 'Process.pid')
  answered = out.include?("=> #{pid}")
  [answered, err[/stopped ([\d.]+) ms/, 1]&.to_f, (now - t0) * 1000, err]
end

def fmt(values) = values.empty? ? '-' : format('%.2f (%.2f)', median(values), values.max)

puts "Ruby #{RUBY_VERSION}#{defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? ' +YJIT' : ''}, #{RUNS} injections per state"
puts
puts '| state | answered | main thread stopped, ms: median (max) | to the answer, ms: median (max) |'
puts '| --- | --- | --- | --- |'
only = Regexp.new(ENV.fetch('BENCH_STATES', ''))
STATES.select { |state, _| state.match?(only) }.each do |state, code|
  stopped = []
  answer = []
  ok = 0
  notes = []
  RUNS.times do
    pid = start_app(code)
    begin
      answered, ms, total, err = inject_once(pid)
      stopped << ms if ms
      if answered
        ok += 1
        answer << total
      else
        notes << err.lines.last.to_s.strip
      end
    ensure
      kill_and_reap(pid)
    end
  end
  note = notes.empty? ? '' : " (#{notes.uniq.first[0, 80]}...)"
  puts "| #{state} | #{ok}/#{RUNS}#{note} | #{fmt(stopped)} | #{fmt(answer)} |"
end
