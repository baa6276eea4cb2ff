# Helpers of the transparency suite (spec/e2e/transparency_spec.rb): a
# probe app (probe_app.rb) asked for observations, a run of one tracing
# mode against it (before, while and after a client is attached), and a
# readable comparison of observations, key by key.
require_relative '../../spec_helper'

module TransparencySpec
  PROBE_APP = File.expand_path('probe_app.rb', __dir__)
  # The aspects each request of probe_app.rb observes: an app that died
  # before answering is reported under them.
  REQUEST_ASPECTS = {
    'observe' => ['introspection', 'calls', '$!', 'threads', 'foreign threads', 'joining', 'signals', 'trap errors',
                  'fork', 'exec', 'app code run'],
    'recursion' => %w[recursion], 'deepest' => ['stack edge'], 'ractor' => %w[ractor], 'urg' => %w[urg]
  }.freeze

  # The probe app, started with or without rbtrace loaded. `requests`: what
  # #observe asks it (see probe_app.rb); `name` labels its stderr.
  class Probe
    attr_reader :target, :dir, :name

    def initialize(rbtrace: true, requests: %w[observe recursion deepest ractor], name: 'app')
      @dir = Dir.mktmpdir('rbtrace-probe-')
      @target = RBTraceSpec::Target.new("load #{PROBE_APP.inspect}", rbtrace: rbtrace,
                                                                     env: { 'PROBE_DIR' => @dir })
      @requests = requests
      @name = name
      @ids = 0
      @stderr_read = 0
    end

    # Generous: on a loaded machine several apps start at once.
    def ready
      target.wait_for('ready', timeout: 60)
      self
    rescue Timeout::Error
      raise "the #{name} (pid #{pid}) did not print ready within 60 s; stderr: #{target.stderr}"
    end

    def pid; target.pid; end

    # A 10 ms poll that comes back this many seconds late: the spec's own
    # process was not run meanwhile. The machine stalled, the app with it
    # (seen on CI's VM, paused ~50 s by its host: the kernel log then says
    # "workqueue lockup ... stuck for 50s"), and the app is not to blame.
    STALL_S = 5

    # Asks the app for one answer (see probe_app.rb); an app that died or
    # did not answer gives a Hash that says so, under the request's aspects.
    def ask(word, timeout: 60)
      id = (@ids += 1)
      tmp = File.join(dir, 'req.tmp')
      File.write(tmp, "#{word} #{id}")
      File.rename(tmp, File.join(dir, 'req'))
      path = File.join(dir, "answer.#{id}")
      deadline = monotonic + timeout
      stalled = 0
      until File.exist?(path)
        return died(word, "exited (#{target.status.inspect}) before it answered #{word.inspect}") unless target.alive?
        return died(word, "did not answer #{word.inspect} within #{timeout} s#{stall_note(stalled)}") if monotonic > deadline

        polled = monotonic
        sleep 0.01
        late = monotonic - polled
        stalled += late if late > STALL_S
      end
      Marshal.load(File.binread(path))
    end

    # Says how much of a wait nothing ran, so that a machine that stalled
    # is not taken for an app that hung.
    def stall_note(stalled)
      return '' if stalled.zero?

      " (of which #{stalled.round} s with this spec not run at all: the machine stalled, " \
        "not only the app; see the kernel log, dmesg | grep -i 'lockup\\|stall')"
    end

    def died(word, why)
      REQUEST_ASPECTS.fetch(word, ['died']).to_h { |aspect| ["#{aspect}.(the #{name} died)", why] }
    end

    # Everything the app observes now (its requests), and what it wrote to
    # its stderr since the last time.
    def observe
      o = {}
      @requests.each do |word|
        o.merge!(target.alive? ? ask(word) : died(word, "had died before it was asked #{word.inspect}"))
      end
      o["stderr.written by the #{name} since the last observation"] = new_stderr.lines
      o
    end

    def new_stderr
      text = target.stderr
      fresh = text.byteslice(@stderr_read..) || ''
      @stderr_read = text.bytesize
      fresh
    end

    def attached?
      ask('status', timeout: 10)['attached']
    end

    # Pings the app (it calls every method a mode traces) until the block
    # is true, at most timeout seconds; returns the block's last value.
    def ping_until(timeout: 5)
      deadline = monotonic + timeout
      loop do
        ask('ping', timeout: timeout)
        done = yield
        return done if done || monotonic > deadline || !target.alive?

        sleep 0.05
      end
    end

    def kill
      target.kill
      FileUtils.rm_rf(dir)
    end

    def monotonic; Process.clock_gettime(Process::CLOCK_MONOTONIC); end
  end

  # One probe app of a mode's run and the client tracing it.
  class Subject
    attr_reader :probe, :client, :notes

    def initialize(requests, name)
      @probe = Probe.new(requests: requests, name: name)
      @notes = []
    end

    def start_client(args)
      @client = RBTraceSpec::Client.new(['-p', probe.pid, *args])
    end

    def output
      return "the #{probe.name}: no client" unless client

      "the #{probe.name}'s client: stdout (end): #{client.tail(:stdout, 1500)}
stderr: #{client.tail(:stderr, 1500)}"
    end

    def kill
      client&.kill
      probe.kill
    end
  end

  # Whether this Ruby runs a mode's Ractor app (ractors_from: the first
  # version where the mode cannot crash it).
  def self.ractors?(mode)
    !mode[:ractors_from] || Gem::Version.new(RUBY_VERSION) >= Gem::Version.new(mode[:ractors_from])
  end

  # {aspect => why} for the aspects a mode does not observe on this Ruby.
  def self.not_run(mode)
    return {} if ractors?(mode)

    { 'ractor' => "#{mode[:args].join(' ')} can crash an app that starts Ractors before Ruby " \
                  "#{mode[:ractors_from]} (docs/limits.md, \"Ractors\"): the Ractor app is not run" }
  end

  # One mode (client arguments) run against fresh probe apps: observations
  # before any client attached, while one is (once its output shows that
  # it traces: `shows`), and after it detached. `ending`: :interrupt (^C),
  # :sigkill, :eval (the client runs an -e that lasts until released), or
  # :gave_up (no observation while traced: see #run_gave_up).
  # The parts of the observation that may kill an app (deep recursion, a
  # Ractor) are made in apps of their own, so that the rest is observed
  # whole; the apps are traced alike, side by side.
  class ModeRun
    PARTS = { 'app' => %w[observe], 'recursion app' => %w[recursion deepest], 'Ractor app' => %w[ractor] }.freeze

    attr_reader :subjects, :before, :during, :after, :took

    # ractors: whether to run the Ractor app (a mode that can crash it on
    # this Ruby does not: TransparencySpec.not_run).
    def initialize(args, shows:, ending: :interrupt, ractors: true)
      @args = args
      @shows = shows
      @ending = ending
      @parts = ractors ? PARTS : PARTS.reject { |name, _| name == 'Ractor app' }
    end

    def run
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      @subjects = @parts.map { |name, requests| Subject.new(requests, name) }
      subjects.each { |s| s.probe.ready }
      prime_queues if @ending == :gave_up
      @before = observe
      case @ending
      when :eval then run_eval
      when :gave_up then run_gave_up
      else run_trace
      end
      @after = observe
      @took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      warn format('transparency: %s ran in %.1f s', @args.inspect, @took) if ENV['RBTRACE_SPEC_TIMES']
      self
    end

    def kill
      subjects&.each(&:kill)
    end

    def notes; subjects.flat_map(&:notes); end

    # The apps whose client did not show what the mode traces (on stderr
    # for a client that gave up).
    def untraced
      subjects.reject { |s| @shows === (@ending == :gave_up ? s.client.stderr : s.client.stdout) }.map { |s| s.probe.name }
    end

    def client_output; subjects.map(&:output).join("\n"); end

    # The clients' lines that match pattern, each prefixed with its app's name.
    def client_lines(pattern)
      subjects.flat_map do |s|
        (s.client.stdout + s.client.stderr).lines.grep(pattern).map { |l| "the #{s.probe.name}'s client: #{l}" }
      end
    end

    private

    # The apps observe themselves side by side.
    def observe
      threads = subjects.map { |s| Thread.new { s.probe.observe } }
      threads.map(&:value).reduce(:merge)
    end

    def run_trace
      subjects.each { |s| s.start_client(@args) }
      subjects.each do |s|
        s.client.wait_for(/\*\*\* attached/, stream: :stderr, timeout: 30)
        unless s.probe.ping_until { @shows === s.client.stdout }
          s.notes << "the #{s.probe.name}'s client never showed #{@shows.inspect} while the app was pinged"
        end
      end
      @during = observe
      subjects.each do |s|
        s.probe.ask('ping')   # one more traced call, so that a killed client is noticed
        if @ending == :sigkill
          Process.kill(:KILL, s.client.pid)
          s.client.wait
        else
          s.client.stop(:INT)
        end
      end
      subjects.each { |s| wait_detached(s) }
    end

    # The eval signals that it runs, and returns once the spec releases it.
    def run_eval
      subjects.each do |s|
        running = File.join(s.probe.dir, 'eval-running')
        release = File.join(s.probe.dir, 'eval-release')
        # --timeout: the eval lasts as long as the observation, slow on a loaded machine
        s.start_client(['--timeout', '120', '-e',
                        "File.write(#{running.inspect}, ''); sleep 0.01 until File.exist?(#{release.inspect}); :released"])
        Timeout.timeout(10) { sleep 0.02 until File.exist?(running) || s.client.exited? }
      end
      @during = observe
      subjects.each do |s|
        File.write(File.join(s.probe.dir, 'eval-release'), '')
        begin
          s.client.wait(timeout: 30)
        rescue Timeout::Error
          # Seen once on 3.4 with YJIT under load, cause unknown: say where the client was.
          raise "the -e client did not exit within 30 s of the eval's release\n#{s.client.outputs}"
        end
        wait_detached(s)
      end
    end

    # The app makes its message queue at its first attach: one -e first, so
    # that a client that gives up has sent its commands.
    def prime_queues
      subjects.each do |s|
        s.start_client(['-e', '1'])
        s.client.wait(timeout: 30)
        s.client.kill
      end
    end

    # The app is stopped (SIGSTOP) while a client with --timeout 1 attaches;
    # the client gives up, and then the app continues and finds the
    # commands in its queue, from a tracer that went away.
    def run_gave_up
      subjects.each do |s|
        Process.kill(:STOP, s.probe.pid)
        s.start_client(['--timeout', '1', *@args])
        s.client.wait(timeout: 30)
        Process.kill(:CONT, s.probe.pid)
      end
      subjects.each do |s|
        s.probe.ping_until { queued(s.probe.pid).zero? }
        wait_detached(s)
      end
    end

    # Messages in pid's queue (/proc/sysvipc/msg: key msqid perms cbytes qnum ...).
    def queued(pid)
      line = File.readlines('/proc/sysvipc/msg').find { |l| l.split[0].to_i == (RBTraceSpec::Queues::KEY_BASE | pid) }
      line ? line.split[4].to_i : 0
    end

    def wait_detached(subject)
      return unless subject.probe.target.alive?
      return if subject.probe.ping_until(timeout: 5) { subject.probe.attached? == false }

      subject.notes << "the #{subject.probe.name} still said RBTrace.attached? 5 s after its client " \
                       "#{@ending == :sigkill ? 'was killed' : 'ended'}"
    end
  end

  # The mode runs of one spec run, made ahead, WORKERS at a time, in the
  # order given: most of a run is waiting (for an attach, an answer, a
  # detach), and runs side by side divide the suite's time.
  module Pool
    WORKERS = 3

    class << self
      def start(modes)
        @lock = Mutex.new
        @todo = modes.dup
        @runs = {}
        @workers = Array.new(WORKERS) { Thread.new { work } }
      end

      # The run of a mode once it is done; an error in it is raised here.
      def fetch(name)
        sleep 0.05 until @lock.synchronize { @runs.key?(name) && @runs[name].done }
        @runs[name].value
      end

      def kill(name)
        @lock.synchronize { @runs[name] }&.kill
      end

      def kill_all
        @lock&.synchronize { @todo.clear }
        @workers&.each(&:join)
        @runs&.each_value(&:kill)
      end

      private

      def work
        while (name, args = @lock.synchronize { @todo.shift })
          job = Job.new
          @lock.synchronize { @runs[name] = job }
          job.perform(args)
        end
      end
    end

    # One mode's run: its ModeRun, or the error that ended it.
    class Job
      attr_reader :done

      def perform(args)
        ending = args.fetch(:ending, :interrupt)
        @run = ModeRun.new(args[:args], shows: args[:shows], ending: ending, ractors: TransparencySpec.ractors?(args))
        @run.run
      rescue Exception => e   # rubocop:disable Lint/RescueException
        @error = e
      ensure
        @done = true
      end

      def value
        raise @error if @error

        @run
      end

      def kill; @run&.kill; end
    end
  end

  # The keys of an observation under an aspect (the text before the first dot).
  def self.aspect_keys(aspect, *observations)
    observations.flat_map(&:keys).uniq.select { |k| k.start_with?("#{aspect}.") }
  end

  # The keys where a labelled observation differs from the first, with a
  # readable account of each; empty if all agree.
  def self.differences(keys, labelled)
    (base_label, base), *others = labelled.to_a
    keys.filter_map do |key|
      diffs = others.reject { |_, o| o[key] == base[key] }
      next if diffs.empty?

      lines = ["  #{key}:", "    #{base_label.ljust(14)} #{show(base.fetch(key, :absent))}"]
      diffs.each { |label, o| lines << "    #{label.ljust(14)} #{show_against(base.fetch(key, :absent), o.fetch(key, :absent))}" }
      lines.join("\n")
    end
  end

  def self.show(value)
    text = value.inspect
    text.size > 600 ? "#{text[0, 600]}... (#{text.size} chars)" : text
  end

  # A long Array or a Hash is shown by what differs from the base.
  def self.show_against(base, value)
    if base.is_a?(Array) && value.is_a?(Array) && (base.size + value.size) > 6
      missing = base - value
      extra = value - base
      return "same elements, other order: #{show(value)}" if missing.empty? && extra.empty?

      "#{"without #{show(missing)} " unless missing.empty?}#{"with #{show(extra)} added" unless extra.empty?}".strip
    elsif base.is_a?(Hash) && value.is_a?(Hash)
      (base.keys | value.keys).reject { |k| base[k] == value[k] }
                              .map { |k| "#{k}: #{show(value.fetch(k, :absent))} (was #{show(base.fetch(k, :absent))})" }
                              .join('; ')
    else
      show(value)
    end
  end
end
