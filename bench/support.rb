# frozen_string_literal: true

# bench/support.rb - what the bench/*.rb scripts share: where the build is,
# the checks that it runs with this Ruby, a median, callgrind's count, the
# build of bench/hook_floor, attaching a client, rounds of an app under
# modes side by side, the peer profilers (stackprof, vernier) installed
# aside, and each thread's CPU time.
require 'fileutils'
require 'open3'
require 'rbconfig'
require 'tempfile'

module BenchSupport
  ROOT = File.expand_path('..', __dir__)
  LIB = File.join(ROOT, 'lib')
  CLIENT = File.join(LIB, 'rbtrace', 'rbtrace-client')

  module_function

  # Aborts with what to do unless the client is built and this Ruby can load
  # the extension (it is compiled per Ruby: compile again after switching).
  def require_build!
    name = "bench/#{File.basename($PROGRAM_NAME)}"
    abort "#{name}: build first: bundle exec rake compile" unless File.executable?(CLIENT)
    return if system(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', '0', err: File::NULL)

    abort "#{name}: #{RbConfig.ruby} cannot load lib/rbtrace: compile for it (bundle exec rake compile)"
  end

  def require_valgrind!
    return if system('valgrind --version', out: File::NULL)

    abort "bench/#{File.basename($PROGRAM_NAME)}: needs valgrind (apt-get install valgrind)"
  end

  def median(values) = values.sort[values.size / 2]

  # Spawns command (an Array: the client, or a wrapper such as taskset, and
  # its arguments), its stdout to out, and waits for its "*** attached"
  # (which a trace's client says once the target has taken its modes).
  # [pid, its stderr: a pipe, left open for the --stats read at the end].
  # Aborts with what the client said if it ends without attaching.
  def spawn_attached(command, out: File::NULL)
    err_r, err_w = IO.pipe
    pid = spawn(*command, out: out, err: err_w)
    err_w.close
    said = +''
    while (line = err_r.gets)
      return [pid, err_r] if line.include?('*** attached')

      said << line
    end
    kill_and_reap(pid)
    abort "bench/#{File.basename($PROGRAM_NAME)}: #{command.join(' ')} did not attach:\n#{said}"
  end

  # Runs the block while a client with args (nil: none, the round is
  # untraced) is attached to pid (its "attached" comes once its modes are
  # on): the client's trace goes to a pipe read and dropped, and once the
  # block is done the client is interrupted (SIGINT, as ^C) and reaped.
  # What the block returns.
  def with_client(pid, args)
    return yield unless args

    out_r, out_w = IO.pipe
    client, err_r = spawn_attached([CLIENT, '-p', pid.to_s, *args], out: out_w)
    out_w.close
    reader = Thread.new { out_r.read } # the trace, read and dropped
    result = yield
    Process.kill(:INT, client)
    Process.wait(client)
    reader.join
    [out_r, err_r].each(&:close)
    result
  end

  # Starts app (Ruby code, run with rbtrace loaded, that prints "ready", then
  # answers each line it reads, a workload's name, with one line: its
  # figures for a round of that workload), and for each of workloads runs a
  # round untraced (a warm-up), then runs times each of modes ([name, the
  # client's arguments or nil for untraced]) in turn, so that the machine's
  # moods fall on every mode alike. {[workload, mode's name] => [what the
  # block makes of each round's line, ...]}
  def interleaved_rounds(app, workloads, modes, runs)
    app_in, app_out, app_err, wait = Open3.popen3(RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', app)
    app_out.gets # ready
    results = Hash.new { |h, k| h[k] = [] }
    workloads.each do |workload|
      app_in.puts(workload) # warm-up, untraced
      app_out.gets
      runs.times do
        modes.each do |name, args|
          line = with_client(wait.pid, args) do
            app_in.puts(workload)
            app_out.gets
          end
          results[[workload, name]] << yield(line)
        end
      end
    end
    app_in.close
    wait.value
    app_err.close
    results
  end

  # Whether this Ruby runs vernier (3.2.1 and later: its thread hooks).
  def vernier? = Gem::Version.new(RUBY_VERSION) >= Gem::Version.new('3.2.1')

  # The peers bench/profile.rb and bench/profile_accuracy.rb measure
  # --profile against (bench/profilers/Gemfile: stackprof, and vernier where
  # this Ruby runs it), installed once per Ruby by Bundler into
  # tmp/profilers-RUBY_VERSION (RubyGems); the environment of an app that
  # loads them (`require 'bundler/setup'` first).
  def profilers_env
    dir = File.join(ROOT, 'tmp', "profilers-#{RUBY_VERSION}")
    FileUtils.mkdir_p(dir)
    gemfile = File.join(dir, 'Gemfile')
    FileUtils.cp(File.join(__dir__, 'profilers', 'Gemfile'), gemfile)
    env = { 'BUNDLE_GEMFILE' => gemfile, 'BUNDLE_PATH' => dir, 'RUBYOPT' => nil }
    if defined?(Bundler)
      Bundler.with_unbundled_env { install_profilers(env, dir) }
    else
      install_profilers(env, dir)
    end
    env
  end

  def install_profilers(env, dir)
    return if system(env, 'bundle', 'check', out: File::NULL, err: File::NULL)

    warn "==> installing stackprof#{' and vernier' if vernier?} into #{dir} (once)"
    log = File.join(dir, 'install.log')
    return if system(env, 'bundle', 'install', out: log, err: %i[child out])

    abort "bench/#{File.basename($PROGRAM_NAME)}: bundle install failed: #{log}"
  end

  # Nanoseconds on a CPU of each thread of pid alive: {tid => ns}
  # (/proc/PID/task/TID/schedstat's first field).
  def cpu_ns(pid)
    Dir.children("/proc/#{pid}/task").map(&:to_i).filter_map do |tid|
      [tid, File.read("/proc/#{pid}/task/#{tid}/schedstat").split.first.to_i]
    rescue Errno::ENOENT
      nil
    end.to_h
  end

  # Kills each of pids (nil ones skipped) and reaps it: what every script's
  # ensure does with the app and client it started, pass or fail. One
  # already gone (or reaped) is passed over.
  def kill_and_reap(*pids)
    pids.compact.each do |pid|
      Process.kill(:KILL, pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end

  # Builds bench/hook_floor/ (a tiny extension of do-nothing hooks, not part
  # of rbtrace) into tmp/ for this Ruby; returns the directory to load it from.
  def build_hook_floor
    dir = File.join(ROOT, 'tmp', "hook_floor-#{RUBY_VERSION}")
    FileUtils.mkdir_p(dir)
    src = File.join(__dir__, 'hook_floor', 'extconf.rb')
    ok = Dir.chdir(dir) do
      system(RbConfig.ruby, src, out: File::NULL) && system('make', out: File::NULL)
    end
    abort "bench/#{File.basename($PROGRAM_NAME)}: could not build bench/hook_floor (see #{dir}/mkmf.log)" unless ok
    dir
  end

  # The events' clock in a process of this Ruby with rbtrace, once its rate
  # is measured, and the kernel's clocksource: "tsc (kernel: kvm-clock)".
  def clock_source
    code = 'RBTrace.clock_ns; sleep 0.05; RBTrace.clock_ns; print RBTrace.clock_source'
    ours = IO.popen([RbConfig.ruby, '-I', LIB, '-rrbtrace', '-e', code], &:read)
    kernel = File.read('/sys/devices/system/clocksource/clocksource0/current_clocksource').strip
    "#{ours} (kernel: #{kernel})"
  rescue SystemCallError
    ours.to_s
  end

  # Instructions callgrind counts for the whole of command (an Array).
  def instructions(command)
    out = Tempfile.new('callgrind.out')
    log = IO.popen(['valgrind', '--tool=callgrind', "--callgrind-out-file=#{out.path}", *command],
                   err: %i[child out], &:read)
    Integer(log[/Collected : (\d+)/, 1])
  ensure
    out&.close!
  end
end
