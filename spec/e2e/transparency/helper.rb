# Helpers of the transparency suite (spec/e2e/transparency_spec.rb): a
# probe app (probe_app.rb) asked for observations, a run of one tracing
# mode against it (before, while and after a client is attached), and a
# readable comparison of observations, key by key.
require_relative '../../spec_helper'

module TransparencySpec
  PROBE_APP = File.expand_path('probe_app.rb', __dir__)

  # The probe app, started with or without rbtrace loaded.
  class Probe
    attr_reader :target, :dir

    def initialize(rbtrace: true)
      @dir = Dir.mktmpdir('rbtrace-probe-')
      @target = RBTraceSpec::Target.new("load #{PROBE_APP.inspect}", rbtrace: rbtrace,
                                                                      env: { 'PROBE_DIR' => @dir })
      @ids = 0
      @stderr_read = 0
      @target.wait_for('ready', timeout: 20)
    end

    def pid; target.pid; end

    # Asks the app for one answer (see probe_app.rb); an app that died or
    # did not answer gives a Hash that says so, under the key 'died'.
    def ask(word, timeout: 60)
      id = (@ids += 1)
      tmp = File.join(dir, 'req.tmp')
      File.write(tmp, "#{word} #{id}")
      File.rename(tmp, File.join(dir, 'req'))
      answer = File.join(dir, "answer.#{id}")
      deadline = monotonic + timeout
      until File.exist?(answer)
        return { 'died' => "the app exited (#{target.status.inspect}) before it answered #{word.inspect}" } unless target.alive?
        return { 'died' => "the app did not answer #{word.inspect} within #{timeout} s" } if monotonic > deadline

        sleep 0.01
      end
      Marshal.load(File.binread(answer))
    end

    # Everything the app observes now, and what it wrote to its stderr
    # since the last time.
    def observe
      o = ask('observe')
      o.merge!(ask('ractor')) unless o['died']
      o['stderr.written by the app since the last observation'] = new_stderr.lines
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
    def ping_until(timeout: 10)
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

  # One mode (client arguments) run against a fresh probe: observations
  # before any client attached, while one is (once its output shows that it
  # traces: `shows`), and after it detached. `ending`: :interrupt (^C),
  # :sigkill, or :eval (the client runs an -e that lasts until released).
  class ModeRun
    attr_reader :probe, :client, :before, :during, :after, :notes

    def initialize(args, shows:, ending: :interrupt)
      @args = args
      @shows = shows
      @ending = ending
      @notes = []
    end

    def run
      @probe = Probe.new
      @before = probe.observe
      @ending == :eval ? run_eval : run_trace
      @after = probe.observe
      self
    end

    def kill
      @client&.kill
      @probe&.kill
    end

    # Whether the client showed what the mode traces while the app was observed.
    def traced?
      @shows === client.stdout
    end

    def client_output
      "client stdout (end): #{client.tail(:stdout, 1500)}\nclient stderr: #{client.tail(:stderr, 1500)}"
    end

    private

    def start_client(args)
      @client = RBTraceSpec::Client.new(['-p', probe.pid, *args])
    end

    def run_trace
      start_client(@args)
      client.attached
      @notes << "the client never showed #{@shows.inspect} while the app was pinged" unless probe.ping_until { traced? }
      @during = probe.observe
      probe.ask('ping')   # one more traced call, so that a killed client is noticed
      if @ending == :sigkill
        Process.kill(:KILL, client.pid)
        client.wait
      else
        client.stop(:INT)
      end
      wait_detached
    end

    # The eval signals that it runs, and returns once the spec releases it.
    def run_eval
      running = File.join(probe.dir, 'eval-running')
      release = File.join(probe.dir, 'eval-release')
      start_client(['-e', "File.write(#{running.inspect}, ''); sleep 0.01 until File.exist?(#{release.inspect}); :released"])
      Timeout.timeout(10) { sleep 0.02 until File.exist?(running) || client.exited? }
      @during = probe.observe
      File.write(release, '')
      client.wait(timeout: 10)
      wait_detached
    end

    def wait_detached
      return if probe.ping_until(timeout: 5) { probe.attached? == false }

      @notes << "the app still said RBTrace.attached? 5 s after the client #{@ending == :sigkill ? 'was killed' : 'ended'}"
    end
  end

  # The keys of an observation under an aspect (the text before the first dot).
  def self.aspect_keys(aspect, *observations)
    observations.flat_map(&:keys).uniq.select { |k| k.start_with?("#{aspect}.") || k == 'died' }
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
