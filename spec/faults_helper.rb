# What spec/e2e/faults_spec.rb looks at in a target from outside, without
# attaching to it (an attach would change what is measured): its threads,
# fds and RSS in /proc, and the SysV message queues that are its own in
# /proc/sysvipc/msg. Also a client run with its stdout on a pipe, for a
# reader as slow as the spec wants.
require_relative 'spec_helper'

module FaultsSpec
  module_function

  # The target's threads (the kernel's count: Ruby threads and pthreads).
  def tasks(pid); Dir.children("/proc/#{pid}/task").size; end

  def fds(pid); Dir.children("/proc/#{pid}/fd").sort; end

  def rss_kb(pid); File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+) kB/, 1].to_i; end

  # pid's RSS once a full GC has freed its garbage and glibc has given back
  # what its arenas keep free (GC.start, then malloc_trim(0), through an
  # eval: itself one more session). What is live is not given back: a leak
  # is counted. Garbage is not: on Ruby 3.3+ each dead Thread keeps its VM
  # stack (malloc'd, ~15 kB of it resident) until the GC frees the Thread,
  # and each eval runs in a Thread of its own, so a trim alone counted the
  # dead eval threads not yet swept (0 to 34, up to 1.2 MB: docs/limits.md).
  MALLOC_TRIM = 'require "fiddle"; GC.start; ' \
                'Fiddle::Function.new(Fiddle::Handle::DEFAULT["malloc_trim"], ' \
                '[Fiddle::TYPE_SIZE_T], Fiddle::TYPE_INT).call(0)'
  def trimmed_rss_kb(pid)
    out = rbtrace('-p', pid, '-e', MALLOC_TRIM).stdout
    raise "malloc_trim failed in process #{pid}: #{out.inspect}" unless out.match?(/^=> [01]$/)

    rss_kb(pid)
  end

  # The size of YJIT's code region in pid (kB), 0 without YJIT.
  YJIT_CODE_KB = '(defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? ' \
                 'RubyVM::YJIT.runtime_stats[:code_region_size].to_i / 1024 : 0)'
  def yjit_code_kb(pid)
    out = rbtrace('-p', pid, '-e', YJIT_CODE_KB).stdout
    Integer(out[/^=> (\d+)$/, 1] || raise("no YJIT code size from process #{pid}: #{out.inspect}"))
  end

  # The message queues that are pid's (spec/queues_helper.rb).
  def queues_of(pid, born: nil); RBTraceSpec::Queues.of(pid, born: born); end

  # Everything a session could leave behind in the target, seen from outside.
  def footprint(pid)
    { tasks: tasks(pid), fds: fds(pid), queues: queues_of(pid) }
  end

  # The footprint once it holds still: a client exits as soon as the target
  # confirms its detach, a moment before the target has closed the socket.
  def settled_footprint(pid, timeout: 3)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    last = footprint(pid)
    loop do
      sleep 0.05
      now = footprint(pid)
      return now if now == last || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      last = now
    end
  end

  # Waits (a few seconds at most) for pid's footprint to come back to
  # expected; returns the latest, for the spec to compare.
  def footprint_back_to(pid, expected, timeout: 3)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      now = footprint(pid)
      return now if now == expected || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.01
    end
  end

  # A client whose stdout is a pipe the spec reads itself (at its own pace);
  # stderr goes to a file. Killed with the spec's other processes.
  class PipedClient
    include RBTraceSpec::ChildExit
    attr_reader :out

    def initialize(args)
      @err_path = File.join(Dir.tmpdir, "rbtrace-spec-piped-#{Process.pid}-#{object_id}.err")
      @out, w = IO.pipe
      @pid = Process.spawn(RBTraceSpec::CLIENT, *args.map(&:to_s), out: w, err: @err_path, in: :close)
      w.close
      @status = nil
    end

    def stderr; File.exist?(@err_path) ? File.read(@err_path) : ''; end

    def kill
      kill_child
      @out.close unless @out.closed?
      FileUtils.rm_f(@err_path)
    end
  end

  # Any spawned process the spec must kill when it ends.
  class Spawned
    include RBTraceSpec::ChildExit

    def initialize(pid); @pid = pid; end

    def kill; kill_child; end
  end
end
