# frozen_string_literal: true

# bench/memory.rb - what a session costs in memory: the app's resident set
# (VmRSS) before an attach, at its highest while `rbtrace -f` traces it
# (sampled every 10 ms), and after the detach; and the client's own VmRSS
# and VmHWM (its peak) while it renders that firehose (text, to /dev/null).
# Issue 4's bars: the app grows by at most 4 MiB and gives it back; the
# client stays under 8 MiB.
#
# The app loops over calls that allocate nothing (a Ruby method, Hash#key?,
# and, once in a while, many distinct methods so the method table fills
# too), so that its own RSS stays flat and what moves is the session's.
#
#   bundle exec rake compile && ruby bench/memory.rb   # BENCH_SECONDS (default 3)
require 'rbconfig'
require 'time'

require_relative 'support'
include BenchSupport # rubocop:disable Style/MixinUsage
SECONDS = Float(ENV.fetch('BENCH_SECONDS', '3'))

APP = <<~RUBY
  $stdout.sync = true
  class Many; end
  2000.times { |i| Many.define_method(:"m\#{i}") { i } }
  NAMES = Many.instance_methods(false)
  def m(x) = x
  h = { 1 => 2 }
  many = Many.new
  GC.start
  puts "ready"
  i = 0
  loop do
    m(i)
    h.key?(i)
    NAMES.each { |n| many.__send__(n) } if (i % 100_000).zero?
    i += 1
  end
RUBY

require_build!

def kib(pid, field)
  line = File.foreach("/proc/#{pid}/status").find { |l| l.start_with?("#{field}:") }
  Integer(line[/\d+/])
end

def mib(kib) = format('%.1f MiB', kib / 1024.0)

# Samples VmRSS of pid every 10 ms while the block runs; the highest seen.
def peak_rss(pid)
  peak = 0
  sampler = Thread.new do
    loop do
      peak = [peak, kib(pid, 'VmRSS')].max
      sleep 0.01
    end
  end
  yield
  peak
ensure
  sampler&.kill
end

def settle(pid)
  sleep 1
  kib(pid, 'VmRSS')
end

def main
  app = client = nil
  r, w = IO.pipe
  app = spawn(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', APP, out: w)
  w.close
  r.gets
  before = settle(app)
  client_rss = client_hwm = nil
  during = peak_rss(app) do
    client, = spawn_attached([CLIENT, '-p', app.to_s, '-f'])
    sleep SECONDS
    client_rss = kib(client, 'VmRSS')
    client_hwm = kib(client, 'VmHWM')
    Process.kill(:INT, client)
    Process.wait(client)
    client = nil
  end
  after = settle(app)

  puts "Memory: an app traced by `rbtrace -f` for #{SECONDS} s (bench/memory.rb)"
  puts
  puts "- date: #{Time.now.utc.iso8601}"
  puts "- ruby: #{RUBY_DESCRIPTION}"
  puts
  puts '| | VmRSS | vs before attach |'
  puts '| --- | ---: | ---: |'
  puts "| app before attach | #{mib(before)} | - |"
  puts "| app at its highest while traced | #{mib(during)} | +#{mib(during - before)} |"
  puts "| app 1 s after detach | #{mib(after)} | #{after >= before ? '+' : '-'}#{mib((after - before).abs)} |"
  puts "| client while rendering (VmRSS / VmHWM) | #{mib(client_rss)} / #{mib(client_hwm)} | - |"
  puts
  puts "- app grew by at most 4 MiB while traced: **#{during - before <= 4096 ? 'yes' : 'no'}**; " \
       "gave it back (within 256 KiB): **#{after - before <= 256 ? 'yes' : 'no'}**"
  puts "- client under 8 MiB: **#{client_hwm < 8192 ? 'yes' : 'no'}**"
ensure
  kill_and_reap(client, app)
end
main
