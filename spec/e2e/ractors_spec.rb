require_relative '../spec_helper'

# rbtrace traces the main Ractor only (ext/rbtrace/ractors.c): the event ring
# has one producer, and another Ractor runs in parallel with the main one.
# A traced method called from another Ractor is skipped and counted, and
# the count told once, at the detach (issue 20, item 3).
RSpec.describe 'Ractors' do
  it 'shows the main Ractor\'s calls of traced Ruby and C methods only, and counts the others\'' do
    skip 'this Ruby has no Ractors' unless defined?(Ractor)
    app = start_target(<<~'RUBY').ready
      class Probe
        def triple(x)
          x * 3
        end
      end

      # Each round, a batch of calls in each of two Ractors, and one call of
      # each method in the main one while they run. Each answers on a
      # Ractor::Port of its own where there are ports (Ruby 4.0, which has
      # no Ractor.yield nor #take any more), else with Ractor.yield.
      workers = Array.new(2) do
        port = Ractor::Port.new if defined?(Ractor::Port)
        worker = Ractor.new(port) do |out|
          loop do
            n = Ractor.receive
            h = { 1 => 2 }
            sum = n.times.sum { Probe.new.triple(1) + (h.key?(1) ? 1 : 0) }
            out ? out << sum : Ractor.yield(sum)
          end
        end
        [worker, port]
      end
      puts "ready"
      loop do
        workers.each { |r, _| r.send(2000) }
        mine = [Probe.new.triple(2), { 1 => 2 }.key?(1)]
        results = workers.map { |r, port| port ? port.receive : r.take }
        puts(results == [8000, 8000] && mine == [6, true] ? 'ok' : "BAD #{results.inspect} #{mine.inspect}")
        sleep 0.02
      end
    RUBY
    app.wait_for('ok')
    client = start_client('-p', app.pid, '-m', 'Probe#triple', 'Hash#key?')
    client.attached
    client.wait_for(/^Probe#triple <.*^Hash#key\? <.*^Probe#triple <.*^Hash#key\? </m)
    app.drain
    rounds = app.lines.size
    app.wait_for(->(_) { app.lines.size > rounds + 3 })
    expect(client.stop).to be_success
    app.drain
    expect(app).to be_alive
    expect(app.lines.grep(/BAD/)).to be_empty

    expect(client.stderr).not_to include('malformed')
    counts = client.stderr.scan(/^\*\*\* (\d+) calls in other Ractors not traced/).flatten.map(&:to_i)
    expect(counts.size).to eq(1)
    expect(counts.first).to be >= 2000            # one batch's calls at least
    # Only the main Ractor's thread: the client prefixes no line with one.
    expect(client.stdout).not_to match(/^\[t\d+\]/)
    lines = client.stdout.lines.map(&:chomp).reject(&:empty?)
    expect(lines).to all(match(/\A(Probe#triple|Hash#key\?) <\d+\.\d{6}>\z/))
    # One call of each a round, in the main Ractor: nowhere near a batch's.
    expect(lines.size).to be < 2 * (app.lines.size + 2)
  end

  # Ruby frees a Ractor's event hooks when its object is collected, and that
  # sets the VM's global event flags from its (empty) list: the main
  # Ractor's global hooks stay in place but no GC event nor Ruby method's
  # call fires for them any more (https://bugs.ruby-lang.org/issues/19112).
  # Each round of this app leaves two finished Ractors for its GC.start to
  # free: --gc and --raise must go on showing the main Ractor's events.
  describe 'in an app whose finished Ractors are collected' do
    APP_DEAD_RACTORS = <<~'RUBY'.freeze
      Warning[:experimental] = false
      def work(n) = n + 1
      # A finished Ractor's value: #value on Ruby 4.0 (#take is gone), else #take.
      def ractors = 2.times.map { |i| Ractor.new(i) { |k| k * 2 } }.map { |r| r.respond_to?(:value) ? r.value : r.take }
      puts "ready"
      n = 0
      loop do
        ok = ractors == [0, 2]
        GC.start
        (raise "round #{n}" rescue nil)
        puts(ok && work(n) == n + 1 ? "round #{n}" : 'BAD')
        n += 1
        sleep 0.05
      end
    RUBY

    let(:app) do
      skip 'this Ruby has no Ractors' unless defined?(Ractor)
      start_target(APP_DEAD_RACTORS).ready
    end

    # Traces the app for rounds rounds from the attach, then detaches.
    def trace_rounds(*args, rounds: 6)
      client = start_client('-p', app.pid, *args)
      client.attached
      seen = app.drain.size
      app.wait_for(->(_) { app.lines.size >= seen + rounds }, timeout: 30)
      expect(client.stop(:INT)).to be_success
      app.drain
      expect(app).to be_alive
      expect(app.lines.grep(/BAD/)).to be_empty
      client
    end

    it '--gc shows the GCs of the main Ractor, round after round' do
      out = trace_rounds('--gc').stdout
      expect(out.scan(/^GC major \(force\) by method <\d+\.\d{6}> \(mark \d+\.\d{6}, sweep \d+\.\d{6}\)$/).size).to be >= 4
    end

    # The workaround for Bug #19112 is seen to be needed, not assumed from the
    # version: Ruby 4.0 (the Ruby of Ractor::Port) fixed the bug, and there
    # gcwatch.c never switches the hooks on again; before, it must, or the
    # example above would see no collection after the first round.
    it '--gc switches the hooks on again only on a Ruby whose freed Ractors switch them off' do
      trace_rounds('--gc')
      r = rbtrace('-p', app.pid, '-e', 'RBTrace.gc_cut_offs')
      cut_offs = Integer(r.stdout[/^=> (\d+)$/, 1])
      if defined?(Ractor::Port)
        expect(cut_offs).to eq(0)
      else
        expect(cut_offs).to be >= 1
      end
    end

    it '--raise shows the main Ractor\'s exceptions, round after round' do
      expect(trace_rounds('--raise').stdout.scan(/^raise RuntimeError: round \d+ at /).size).to be >= 4
    end
  end

  # A collection stops every Ractor, but Ruby calls only the hooks of the
  # Ractor whose thread runs it: those are counted and told at the detach.
  it '--gc tells at the detach how many collections other Ractors ran' do
    skip 'this Ruby has no Ractors' unless defined?(Ractor)
    app = start_target(<<~'RUBY').ready
      Warning[:experimental] = false
      churner = Ractor.new { loop { 20_000.times { "y" * 40 }; sleep 0.01 } }
      puts "ready"
      loop { GC.start; puts "main GC"; sleep 0.1 }
    RUBY
    result = trace(app, '--gc', until_output: /(^GC major \(force\).*\n){3}/)
    expect(result.stdout.lines).to all(match(/^GC /))
    counts = result.stderr.scan(/^\*\*\* (\d+) garbage collections run by other Ractors not shown/).flatten
    expect(counts.size).to eq(1)
    expect(Integer(counts.first)).to be >= 1
    expect(app).to be_alive
  end

  # ext/rbtrace/inplace.c replaces trap (and channel.c exec) by C methods
  # marked Ractor-safe, as Ruby's own are, which call Ruby's through Method
  # objects no other Ractor could reach from Ruby. Each called from a
  # non-main Ractor, in a process with rbtrace loaded and in one without:
  # the app sees the same in both (what returned, what raised; exec runs
  # its program). Process.daemon is not among them: Ruby 3.1 itself dies
  # of it in a non-main Ractor ([BUG] rb_thread_terminate_all: called by
  # child thread), with rbtrace or without.
  RACTOR_PROBES = {
    'Kernel#trap' => "trap('USR2') { }",
    'Kernel.trap' => "Kernel.trap('USR2', 'IGNORE')",
    'Signal.trap' => 'Signal.trap(:USR2) { }',
    'Signal#trap' => "Signal.send(:trap, 'USR2', 'DEFAULT')",
    'trap of URG' => "trap('URG') { }",
    'a bad signal' => "trap('BOGUS') { }",
    'a reserved signal' => "Signal.trap('SEGV') { }",
    'no handler' => "trap('USR2')",
    'exec' => "exec('/bin/echo', 'exec ran')",
    'Kernel.exec' => "Kernel.exec('/bin/echo', 'exec ran')",
    'Process.exec' => "Process.exec('/bin/echo exec ran')"
  }.freeze

  def ractor_probe(code, rbtrace:)
    app = start_target(<<~RUBY, rbtrace: rbtrace)
      Warning[:experimental] = false
      r = Ractor.new do
        "returned \#{(#{code}).inspect}"
      rescue Exception => e # rubocop:disable Lint/RescueException
        "raised \#{e.class}: \#{e.message}"
      end
      puts(r.respond_to?(:value) ? r.value : r.take) # #take is gone in 4.0
      puts 'done'
    RUBY
    app.wait_for(/\A(done|exec ran)\z/, timeout: 30)
    app.wait
    [app.lines, app.status.exitstatus]
  end

  RACTOR_PROBES.each do |name, code|
    it "#{name} from a non-main Ractor: the same as without rbtrace" do
      skip 'this Ruby has no Ractors' unless defined?(Ractor)
      plain = ractor_probe(code, rbtrace: false)
      traced = ractor_probe(code, rbtrace: true)
      expect(traced).to eq(plain)
      # not vacuous: the probe ran in the Ractor
      expect(plain[0].first).to match(/\A(returned|raised|exec ran)/)
    end
  end
end
