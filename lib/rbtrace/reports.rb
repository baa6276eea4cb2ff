require 'rbtrace/quiet_children'

module RBTrace
  # The reports of `rbtrace -b`, `--backtrace`, `--memory`, `--heapdump`,
  # `--shapesdump` and `--fork`. The client runs each as an eval of one of
  # these methods, in the eval's own thread, and prints the String it
  # returns as it is.
  #
  # They keep no state and leave nothing behind in the app, except that
  # --memory, --heapdump and --shapesdump load the `objspace` extension.
  # The dumps are written by a forked child, so that the app pauses only
  # for the fork; --fork leaves a copy of the process that is not the
  # app's child (it is forked twice), so the app has nothing to reap.
  module Reports
    # An expected failure (a file that exists, a Ruby without a feature):
    # the client shows only its message.
    class Error < StandardError; end

    # A dump file is created, never opened: not one that exists, and not
    # through a symbolic link planted where it was to be.
    CREATE_FLAGS = File::CREAT | File::EXCL | File::WRONLY | File::NOFOLLOW | File::BINARY
    # The signals a forked copy exits on, at once: with exit!, so that the
    # app's at_exit handlers (which may remove its pid file or socket) do
    # not run in the copy.
    COPY_EXIT_SIGNALS = %w[TERM INT HUP QUIT].freeze
    # What a dump's child writes to its pipe when the file is complete.
    DUMP_OK = 'ok'.freeze

    module_function

    # rbtrace -b [N]: every app thread, N frames each (nil: all).
    def backtraces(limit = nil)
      app_threads.map { |t| thread_report(t, limit) }.join("\n")
    end

    # rbtrace --backtrace N: the thread(s) running now, or the main thread
    # if none is (the eval's own thread and the helper do not count).
    def backtrace(limit)
      running = app_threads.select { |t| thread_status(t) == 'run' }
      running = [Thread.main] if running.empty?
      running.map { |t| thread_report(t, limit) }.join("\n")
    end

    # rbtrace --memory
    def memory
      require 'objspace'
      [
        section('GC.stat', GC.stat.map { |k, v| [k.to_s, v.to_s] }),
        section('objects by type, most first (ObjectSpace.count_objects)',
                ObjectSpace.count_objects.sort_by { |_, n| -n }.map { |k, n| [k.to_s, n.to_s] }),
        section('memory by type, largest first (ObjectSpace.count_objects_size)',
                ObjectSpace.count_objects_size.sort_by { |_, n| -n }.map { |k, n| [k.to_s, bytes(n)] }),
        section('process (/proc/self/status)', process_memory)
      ].join("\n")
    end

    # rbtrace --heapdump [FILE]
    def heapdump(path = nil)
      require 'objspace'
      dump_in_child('heap dump', path, 'heapdump') do |io|
        GC.start   # in the child: only live objects, and no pause for the app
        ObjectSpace.dump_all(output: io)
      end
    end

    # rbtrace --shapesdump [FILE]
    def shapesdump(path = nil)
      require 'objspace'
      unless ObjectSpace.respond_to?(:dump_shapes)
        raise Error, "this Ruby (#{RUBY_VERSION}) cannot dump object shapes: it has no " \
                     'ObjectSpace.dump_shapes (object shapes came with Ruby 3.2)'
      end

      dump_in_child('shapes dump', path, 'shapesdump') do |io|
        ObjectSpace.dump_shapes(output: io)
      end
    end

    # rbtrace --fork: an idle copy of the process, for a debugger.
    def fork_copy
      QuietChildren.around { fork_copy_quietly }
    end

    def fork_copy_quietly
      reader, writer = IO.pipe
      child = RBTrace.fork_without_helper { fork_grandchild(reader, writer) }
      writer.close
      copy = reader.read.to_i   # until the copy (and the child) closed the pipe
      wait_child(child)
      child = nil
      raise Error, 'the copy of the process failed to start' unless copy.positive?

      fork_report(copy)
    ensure
      reader&.close
      writer&.close unless writer&.closed?
      reap(child)
    end

    # ---- backtraces ----

    def app_threads
      Thread.list.reject { |t| t == Thread.current || t == RBTrace.helper }
    end

    def thread_report(thread, limit)
      frames = thread.backtrace || []
      shown = limit ? frames.first(limit) : frames
      lines = ["Thread #{thread_label(thread)} (#{thread_status(thread)})"]
      lines.concat(shown.map { |f| "  #{f}" })
      hidden = frames.size - shown.size
      lines << "  ... #{hidden} more frame#{'s' if hidden > 1}" if hidden.positive?
      lines << '  (no backtrace)' if frames.empty?
      lines.map { |l| "#{l}\n" }.join
    end

    def thread_label(thread)
      return thread.name.inspect if thread.name
      return 'main' if thread == Thread.main

      "#{thread.inspect[/\A#<Thread:0x\h+/]}>"
    end

    # A thread passing the GVL to the report's thread (Ruby 3.3+: in
    # rbtrace's postponed job, ext/rbtrace/handoff_job.c) reads 'sleep'
    # because of us: it was running.
    def thread_status(thread)
      return 'run' if thread == RBTrace.handoff_yielder

      case (status = thread.status)
      when false then 'finished'
      when nil then 'died with an exception'
      else status
      end
    end

    # ---- memory ----

    def section(title, rows)
      width = rows.map { |k, _| k.size }.max || 0
      (["== #{title}"] + rows.map { |k, v| "  #{k.ljust(width)}  #{v}" }).map { |l| "#{l}\n" }.join
    end

    def bytes(n)
      units = %w[KiB MiB GiB TiB]
      return "#{n} bytes" if n < 1024

      value = n.to_f
      unit = units.find { (value /= 1024) < 1024 } || units.last
      format('%d bytes (%.1f %s)', n, value, unit)
    end

    PROC_FIELDS = %w[VmRSS VmHWM RssAnon RssFile VmSize VmSwap].freeze

    def process_memory
      fields = File.foreach('/proc/self/status').to_h { |l| l.chomp.split(/:\s*/, 2) }
      PROC_FIELDS.filter_map { |k| [k, fields[k]] if fields[k] }
    rescue SystemCallError => e
      [['RSS', "unavailable: #{e.message}"]]
    end

    # ---- dumps ----

    # Tries for the default file: its name is predictable (pid and time,
    # in the shared temporary directory), so another user may have put a
    # file, a socket or a symbolic link there first.
    DEFAULT_NAME_TRIES = 8

    def default_path(kind, suffix = nil)
      require 'tmpdir'
      name = "rbtrace-#{kind}-#{Process.pid}-#{Time.now.strftime('%Y%m%d-%H%M%S')}"
      File.join(Dir.tmpdir, suffix ? "#{name}-#{suffix}.json" : "#{name}.json")
    end

    # The default file: whatever sits at its name is left alone (never
    # opened, never followed), and a name with a random part is taken
    # instead. Returns [io, path].
    def create_default(kind)
      path = default_path(kind)
      DEFAULT_NAME_TRIES.times do
        return [open_new(path), path]
      rescue Errno::EEXIST
        path = default_path(kind, Random.urandom(6).unpack1('H*'))
      end
      raise Error, "could not create a new file in #{File.dirname(path)}: #{DEFAULT_NAME_TRIES} names " \
                   'were taken (give the file name, or set TMPDIR to a directory of your own)'
    rescue SystemCallError => e
      raise Error, "cannot create #{path}: #{e.message}"
    end

    def create_exclusive(path)
      raise Error, "#{path}: the file name must be absolute" unless path.start_with?('/')

      open_new(path)
    rescue Errno::EEXIST
      what = File.symlink?(path) ? 'is a symbolic link' : 'exists already'
      raise Error, "#{path} #{what}: rbtrace writes only a new file (choose another name or remove it)"
    rescue SystemCallError => e
      raise Error, "cannot create #{path}: #{e.message}"
    end

    def open_new(path)
      io = File.open(path, CREATE_FLAGS, 0o600)
      io.chmod(0o600)   # whatever the umask
      io
    end

    # Writes the dump (the block, given the file: path, or the default file
    # for kind when path is nil) from a forked child while this thread
    # waits for it without the GVL. The child says how it went on a pipe:
    # an app that reaps every child (a Unicorn or Puma master does) may
    # reap ours before we do. If this thread is killed (the eval's
    # timeout), the child is killed too and its partial file removed.
    def dump_in_child(what, path, kind, &dump)
      QuietChildren.around { dump_in_child_quietly(what, path, kind, &dump) }
    end

    def dump_in_child_quietly(what, path, kind, &dump)
      io, path = path ? [create_exclusive(path), path] : create_default(kind)
      reader, writer = IO.pipe
      started = clock
      cpu = thread_cpu
      child = Process.fork { dump_child(io, path, reader, writer, &dump) }
      pause = thread_cpu - cpu
      [io, writer].each(&:close)
      outcome = reader.read   # "ok LINES" or the child's error; EOF once it exited
      status = wait_child(child)
      pid = child
      child = nil
      ok, lines = outcome.split(' ', 2)
      unless ok == DUMP_OK && lines&.match?(/\A\d+\z/)
        why = outcome.empty? ? (status&.inspect || 'it died') : outcome
        raise Error, "the #{what} failed in child #{pid}: #{why}"
      end

      done = true
      dump_report(what, path, lines, pause, clock - started, pid)
    ensure
      [io, reader, writer].each { |f| f.close if f && !f.closed? }
      reap(child)
      remove_partial(path) if io && !done
    end

    def remove_partial(path)
      File.unlink(path)
    rescue SystemCallError
      nil
    end

    # The child also counts the file's lines: the app would pause while it
    # read the whole file with the GVL held. It runs at the lowest priority
    # (nice 19): its GC and dump, seconds of CPU and memory traffic, must
    # not take a CPU from the app's threads on a busy machine.
    def dump_child(io, path, reader, writer)
      reader.close
      lowest_priority
      yield io
      io.close
      writer.write("#{DUMP_OK} #{count_lines(path)}")
      exit!(0)
    rescue Exception => e # rubocop:disable Lint/RescueException
      writer.write("#{e.class}: #{e.message}") rescue nil # rubocop:disable Style/RescueModifier
      exit!(1)
    end

    def lowest_priority
      Process.setpriority(Process::PRIO_PROCESS, 0, 19)
    rescue SystemCallError
      nil # a priority we may not lower: the dump goes on as it is
    end

    def dump_report(what, path, lines, pause, total, child)
      size = File.size(path)
      [
        "#{what}: #{path}",
        "size:      #{bytes(size)}",
        "objects:   #{lines} (lines, one JSON object each)",
        format('pause:     %.6f s (the fork; child %d wrote the file in %.3f s)', pause, child, total)
      ].map { |l| "#{l}\n" }.join
    end

    def count_lines(path)
      count = 0
      File.open(path, File::RDONLY | File::NOFOLLOW | File::BINARY) do |f|
        while (chunk = f.read(1 << 20))
          count += chunk.count("\n")
        end
      end
      count
    end

    # ---- fork ----

    # The child: forks the copy and exits at once, so that the copy is
    # nobody's child in the app (no zombie, no thread to reap it). It has
    # no helper thread of its own (RBTrace.fork_without_helper); the copy
    # has.
    def fork_grandchild(reader, writer)
      reader.close
      Process.fork { idle_copy(writer) }
      exit!(0)
    rescue Exception # rubocop:disable Lint/RescueException
      exit!(1)
    end

    def idle_copy(writer)
      Process.setsid   # its own session: no signal of the app's terminal reaches it
      COPY_EXIT_SIGNALS.each { |sig| Signal.trap(sig) { exit!(0) } }
      writer.write(Process.pid.to_s)
      writer.close
      loop { sleep }
    rescue Exception # rubocop:disable Lint/RescueException
      exit!(1)
    end

    def fork_report(copy)
      [
        "forked an idle copy of process #{Process.pid}: pid #{copy}",
        '(in its own session, detached from the tracer, sleeping until killed)',
        "debug it:  gdb -p #{copy}    (as root where /proc/sys/kernel/yama/ptrace_scope is 1)",
        "trace it:  rbtrace -p #{copy} -e CODE",
        "kill it:   kill #{copy}      (it exits at once, without running at_exit handlers)"
      ].map { |l| "#{l}\n" }.join
    end

    # ---- helpers ----

    def clock
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # The app's pause is the fork, done with the GVL held: the forking
    # thread's CPU time measures it. Wall time would also count the time
    # this thread then waits for the GVL while the app runs.
    def thread_cpu
      Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    end

    # The exit status of our child, or nil if the app reaped it first.
    def wait_child(pid)
      Process.wait2(pid)[1]
    rescue Errno::ECHILD
      nil
    end

    # Kills and waits for a child left behind by an interrupted report.
    def reap(pid)
      return unless pid

      Process.kill(:KILL, pid)
      Process.wait(pid)
    rescue SystemCallError
      nil
    end
  end
end
