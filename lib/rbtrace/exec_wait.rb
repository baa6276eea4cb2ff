module RBTrace
  # `rbtrace --exec CMD` (ext/rbtrace/cli/exec.c) starts CMD with rbtrace
  # loaded and RBTRACE_EXEC_FD / RBTRACE_EXEC_WAIT set: once the helper thread
  # runs, say "ready" on that pipe and wait here, in require 'rbtrace', until
  # the client has set up its tracing and sends RESUME, so that it sees the
  # program from its first line. Never longer than RBTRACE_EXEC_WAIT seconds.
  module ExecWait
    module_function

    def wait_if_asked(env = ENV)
      fd = env.delete('RBTRACE_EXEC_FD')
      limit = env.delete('RBTRACE_EXEC_WAIT')
      return unless fd

      tell_ready(Integer(fd, 10))
      wait_for_resume(Float(limit || '30'))
    rescue ArgumentError, SystemCallError, IOError => e
      warn "rbtrace: --exec: #{e.message}; going on without waiting for the tracer"
    end

    def tell_ready(fd)
      io = IO.new(fd, 'w', autoclose: true)
      io.write("ready\n")
      io.close
    end

    def wait_for_resume(limit)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + limit
      until RBTrace.resumed?
        if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          warn "rbtrace: --exec: the tracer did not start within #{limit} s; going on"
          return
        end
        sleep 0.002
      end
    end
  end
end
