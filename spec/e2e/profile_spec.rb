require_relative '../spec_helper'
require_relative 'profile_workload'
require 'json'
require 'pty'
require 'stringio'
require 'zlib'

# --profile [wall|cpu]: the target samples every Ruby thread's stack at
# --hz (100 by default) until ^C or --duration; the client writes a table
# of methods (text, --summary) or collapsed stacks (--format folded), the
# thread as the root frame. Checked against a workload of known
# proportions (profile_workload.rb), and for what the app must not see:
# its own SIGPROF timer keeps firing, and nothing samples after the end.
RSpec.describe '--profile' do
  let(:app) { start_target(ProfileWorkload::SOURCE).ready }
  # Whether the samples can say "GVL wait": the thread event hooks (3.2+),
  # asked of a child Ruby with the extension under test.
  PROFILE_GVL_STATE = IO.popen([RbConfig.ruby, '-I', RBTraceSpec::LIB, '-rrbtrace', '-e',
                                'print RBTrace.gvl_supported?'], &:read) == 'true'

  # "Thread t1 sleeper;a;b;c 12" lines -> { [thread, stack...] => weight }
  def folded(text)
    text.lines.to_h do |line|
      expect(line).to match(/\AThread t\d+[^;]*(;[^;\n]+)+ \d+\n\z/)
      stack, weight = line.chomp.split(/ (?=\d+\z)/)
      [stack.split(';'), Integer(weight)]
    end
  end

  # The weights of the stacks whose frames include every one of names.
  def weight_of(stacks, *names)
    stacks.sum { |frames, w| (names - frames).empty? ? w : 0 }
  end

  def profile(*args, seconds:)
    r = rbtrace('-p', app.pid, '--profile', *args, '--duration', seconds.to_s, timeout: seconds + 30)
    expect(r.exitstatus).to eq(0), r.stderr
    expect(r.stderr).to end_with("*** detached from process #{app.pid}\n")
    r
  end

  it 'samples every thread in wall mode: a third each, the sleeper blocked in Kernel#sleep' do
    r = profile('--format', 'folded', seconds: 4)
    stacks = folded(r.stdout)
    total = stacks.values.sum
    expect(total).to be > 100 # 3 threads x 100 Hz x 4 s = 1,200 on an idle machine
    { 'Sleeper#run' => 'Kernel#sleep', 'Spinner#run' => 'Work#spin', 'Work#run' => 'Work#spin' }.each do |run, leaf|
      share = 100.0 * weight_of(stacks, run) / total
      say format('wall: %-12s %5.1f %% of %d samples (truth 33.3)', run, share, total)
      expect(share).to be_within(5).of(100.0 / 3)
      # (a few samples fall in the loop around it, Work.new...)
      expect(weight_of(stacks, run, leaf)).to be >= weight_of(stacks, run) * 0.95
    end
    # The thread is the root frame, each its own.
    roots = stacks.keys.map(&:first).uniq
    expect(roots.size).to eq(3)
    expect(app).to be_alive
  end

  it 'says each thread\'s state and each method\'s self and total samples in the table' do
    r = profile(seconds: 3)
    expect(r.stdout).to match(/\A\*\*\* profile: \d+ samples of 3 threads, \d+ missed\n% self  % total  self  total  method\n/)
    rows = r.stdout.lines.grep(/\A *\d+\.\d\d +\d+\.\d\d +\d+ +\d+  /).to_h do |l|
      self_pct, total_pct, self_n, total_n, name = l.split(' ', 5)
      [name.chomp, [Float(self_pct), Float(total_pct), Integer(self_n), Integer(total_n)]]
    end
    expect(rows.keys).to include('Work#spin', 'Kernel#sleep', 'Work#heavy', 'Work#light', 'Kernel#loop')
    expect(rows['Kernel#loop'][1]).to eq(100.0) # every thread's stack has it
    expect(rows['Work#spin'][2] + rows['Kernel#sleep'][2]).to be >= rows.values.sum { |v| v[2] } * 0.98
    # The sleeper: blocked (but for its waits for the GVL each second, as
    # it wakes); the others ran about half the time each (one GVL) and,
    # where Ruby has the thread hooks (3.2+), waited for the GVL the rest.
    states = r.stdout.lines.grep(/\AThread t\d+/)
    expect(states.size).to eq(3)
    sleeper, *spinners = states.sort_by { |l| -l[/blocked (\d+\.\d)%/, 1].to_f }
    expect(sleeper[/blocked (\d+\.\d)%/, 1].to_f).to be >= 85, states.join
    spinners.each do |line|
      expect(line[/running (\d+\.\d)%/, 1].to_f).to be_within(20).of(50), states.join
      expect(line[/GVL wait (\d+\.\d)%/, 1].to_f).to be_within(20).of(50), states.join if PROFILE_GVL_STATE
    end
  end

  # Frames of one name are one method in the table: code eval'd at the top
  # level is a "<main>" of its own, under the program's "<main>" (and Ruby
  # adds a third); each sample counts once in <main>'s total, as recursion
  # does in a method's (300 % before).
  it 'counts a sample once in a method\'s total when frames of its name are on the stack twice' do
    evaled = start_target(<<~RUBY).ready
      def spin(n) = (i = 0; i += 1 while i < n; i)
      def deep(n) = n.zero? ? spin(20_000) : deep(n - 1)
      puts "ready"
      eval("loop { deep(3) }")
    RUBY
    r = rbtrace('-p', evaled.pid, '--profile', '--duration', '1', timeout: 31)
    expect(r.exitstatus).to eq(0), r.stderr
    total = Integer(r.stdout[/\A\*\*\* profile: (\d+) samples of 1 thread/, 1])
    rows = r.stdout.lines.grep(/\A *\d+\.\d\d +\d+\.\d\d +\d+ +\d+  /).to_h do |l|
      _self_pct, total_pct, _self_n, total_n, name = l.split(' ', 5)
      [name.chomp, [Float(total_pct), Integer(total_n)]]
    end
    expect(rows.keys).to include('<main>', 'Kernel#eval', 'Object#deep', 'Object#spin')
    expect(rows['<main>']).to eq([100.0, total])
    # (a sample may fall in the loop between two calls of deep: ASan runs saw 99 of 100)
    expect(rows['Object#deep'][1]).to be_between(total * 0.9, total)
    expect(rows.values.map(&:last).max).to eq(total)
    expect(evaled).to be_alive
  end

  # A share measured from n samples is off by sqrt(p(1-p)/n): 1.8 points
  # at 600 samples, so 5 points is 2.8 of those. The app gets what CPU a
  # loaded machine leaves it (cpu mode samples CPU time): profiles of 5 s
  # until 600 samples of the two came.
  it 'gives Work#heavy three times Work#light\'s samples in cpu mode (within 5 points), and the sleeper none' do
    heavy = light = sleeper = all = runs = 0
    while heavy + light < 600 && runs < 20
      stacks = folded(profile('cpu', '--format', 'folded', seconds: 5).stdout)
      heavy += weight_of(stacks, 'Work#heavy')
      light += weight_of(stacks, 'Work#light')
      sleeper += weight_of(stacks, 'Sleeper#run')
      all += stacks.values.sum
      runs += 1
    end
    share = 100.0 * heavy / (heavy + light)
    say format('cpu: Work#heavy %.1f %% of Work#heavy + Work#light (%d samples, %d runs; truth 75)',
               share, heavy + light, runs)
    expect(heavy + light).to be >= 600
    expect(share).to be_within(5).of(75)
    expect(sleeper).to be <= all * 0.02
  end

  it 'leaves the app\'s own SIGPROF timer firing, and samples nothing after the end' do
    timer = start_target(<<~RUBY).ready
      require 'fiddle'
      #{ProfileWorkload::CLASSES}
      $ticks = 0
      trap('PROF') { $ticks += 1 }
      # setitimer(ITIMER_PROF, 10 ms): what stackprof's cpu mode sets.
      tv = [0, 10_000, 0, 10_000].pack('q4')
      setitimer = Fiddle::Function.new(Fiddle.dlopen(nil)['setitimer'],
                                       [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_VOIDP], Fiddle::TYPE_INT)
      raise 'setitimer failed' unless setitimer.call(2, tv, nil).zero?
      Thread.new { Sleeper.new.run }
      puts "ready"
      loop do
        Work.new.spin(2_000_000)
        puts "ticks \#{$ticks} samples \#{RBTrace.profile_stats[1]} active \#{RBTrace.profile_stats[0]}"
        sleep 0.05
      end
    RUBY
    ticks = ->(line) { line[/ticks (\d+)/, 1].to_i }
    before = ticks.call(timer.wait_for(/ticks [1-9]/))
    r = rbtrace('-p', timer.pid, '--profile', '--hz', '500', '--duration', '2', timeout: 30)
    expect(r.exitstatus).to eq(0), r.stderr
    expect(r.stdout).to match(/samples of 2 threads/)
    during = timer.drain.grep(/active true/)
    expect(during).not_to be_empty
    say "SIGPROF handler: #{before} ticks before, #{ticks.call(during.last)} at the end of the profile"
    expect(ticks.call(during.last)).to be > before + 10 # 100 a CPU second
    # After the detach: no more samples, and the timer still fires.
    last = timer.wait_for(->(l) { l.include?('active false') && l[/samples (\d+)/, 1].to_i.positive? })
    samples = last[/samples (\d+)/, 1].to_i
    expect(samples).to be > 0
    seen = timer.drain.size
    timer.wait_for(->(_) { timer.drain.size > seen + 5 }, timeout: 30)
    expect(timer.lines.last[/samples (\d+)/, 1].to_i).to eq(samples)
    expect(ticks.call(timer.lines.last)).to be > ticks.call(last)
    expect(timer).to be_alive
  end

  # speedscope's file format: the parts its schema (file-format-schema.json)
  # requires, checked by hand (no JSON Schema validator here), and the
  # samples against the workload's threads.
  it 'writes speedscope\'s format: the frames once, a sampled profile per thread' do
    out = File.join(Dir.tmpdir, "rbtrace-profile-#{Process.pid}.speedscope.json")
    begin
      profile('--format', 'speedscope', '-o', out, seconds: 2)
      doc = JSON.parse(File.read(out))
    ensure
      FileUtils.rm_f(out)
    end
    expect(doc['$schema']).to eq('https://www.speedscope.app/file-format-schema.json')
    frames = doc.dig('shared', 'frames')
    expect(frames).to all(include('name' => a_kind_of(String)))
    expect(frames.map { |f| f['name'] }).to include('Work#heavy', 'Work#light', 'Kernel#sleep')
    profiles = doc['profiles']
    expect(profiles.size).to eq(3)
    profiles.each do |prof|
      expect(prof).to include('type' => 'sampled', 'unit' => 'milliseconds', 'startValue' => 0)
      expect(prof['name']).to match(/\AThread t\d+/)
      expect(prof['samples'].size).to eq(prof['weights'].size)
      expect(prof['samples'].flatten).to all(be_between(0, frames.size - 1))
      expect(prof['endValue']).to be_within(0.01).of(prof['weights'].sum)
      expect(prof['weights'].sum).to be_between(1000, 3000) # 2 s of wall time, in ms
    end
    sleeper = profiles.find { |prof| prof['samples'].flatten.map { |i| frames[i]['name'] }.include?('Sleeper#run') }
    expect(sleeper['samples'].map { |st| frames[st.last]['name'] }.uniq).to eq(['Kernel#sleep'])
  end

  # -m with --profile in speedscope's format: the traced calls as an
  # evented profile (O/C events) beside the sampled ones, in one file.
  it 'writes the traced calls (-m) as an evented profile beside the samples in speedscope\'s format' do
    out = File.join(Dir.tmpdir, "rbtrace-profile-m-#{Process.pid}.speedscope.json")
    begin
      profile('-m', 'Work#heavy', 'Work#light', '--format', 'speedscope', '-o', out, seconds: 2)
      doc = JSON.parse(File.read(out))
    ensure
      FileUtils.rm_f(out)
    end
    frames = doc.dig('shared', 'frames').map { |f| f['name'] }
    sampled, evented = doc['profiles'].partition { |prof| prof['type'] == 'sampled' }
    expect(sampled.size).to eq(3)
    expect(evented.size).to eq(1) # the main thread's: it alone calls the traced methods
    traced = evented.first
    main = sampled.find { |prof| prof['samples'].flatten.map { |i| frames[i] }.include?('Work#heavy') }
    expect(traced['name']).to eq("#{main['name']} (traced)")
    expect(traced).to include('unit' => 'milliseconds')
    # Balanced and nested: each C closes the frame the last O opened, in
    # time order, nothing left open; only the traced methods.
    open = []
    last = traced['startValue']
    count = Hash.new(0)
    traced['events'].each do |e|
      expect(e['at']).to be >= last
      last = e['at']
      if e['type'] == 'O'
        open << e['frame']
        count[frames[e['frame']]] += 1
      else
        expect(e['type']).to eq('C')
        expect(open.pop).to eq(e['frame'])
      end
    end
    expect(open).to be_empty
    expect(last).to be <= traced['endValue']
    expect(count.keys).to contain_exactly('Work#heavy', 'Work#light')
    expect(count['Work#heavy']).to be_within(1).of(count['Work#light'])
    expect(count['Work#heavy']).to be > 10
  end

  # An evented profile's spans, checked balanced and nested (each C closes
  # the frame the last O opened, in time order, nothing left open) ->
  # [[name, start ms, end ms, names of the spans open around it]...]
  def evented_spans(prof, frames)
    open = []
    spans = []
    last = prof['startValue']
    prof['events'].each do |e|
      expect(e['at']).to be >= last
      last = e['at']
      if e['type'] == 'O'
        open << [e['frame'], e['at'], open.map { |o| frames[o.first] }]
      else
        expect(e['type']).to eq('C')
        frame, at, around = open.pop
        expect(frame).to eq(e['frame'])
        spans << [frames[frame], at, e['at'], around]
      end
    end
    expect(open).to be_empty
    expect(last).to be <= prof['endValue']
    spans
  end

  # --slow's calls (longer than its threshold) in a profile of their own per
  # thread, "(slow)", nested as they ran; beside -m's "(traced)" one.
  it 'writes --slow\'s calls as an evented profile of their own in speedscope\'s format' do
    shop = start_target(<<~'RUBY').ready
      class Shop
        def query = sleep(0.02)
        def render = sleep(0.01)
        def quick = nil
        def handle = (query; render; quick)
      end
      shop = Shop.new
      puts "ready"
      loop { shop.handle }
    RUBY
    out = File.join(Dir.tmpdir, "rbtrace-profile-slow-#{Process.pid}.speedscope.json")
    begin
      r = rbtrace('-p', shop.pid, '--profile', '--slow', '5', '-m', 'Shop#handle', '--format', 'speedscope',
                  '-o', out, '--duration', '2', timeout: 32)
      expect(r.exitstatus).to eq(0), r.stderr
      expect(r.stderr).to end_with("*** detached from process #{shop.pid}\n")
      doc = JSON.parse(File.read(out))
    ensure
      FileUtils.rm_f(out)
    end
    frames = doc.dig('shared', 'frames').map { |f| f['name'] }
    sampled = doc['profiles'].select { |prof| prof['type'] == 'sampled' }
    evented = doc['profiles'].select { |prof| prof['type'] == 'evented' }
    expect(sampled.size).to eq(1)
    expect(evented.map { |prof| prof['name'] }).to eq(["#{sampled.first['name']} (traced)", "#{sampled.first['name']} (slow)"])
    traced, slow = evented.map { |prof| evented_spans(prof, frames) }
    expect(traced.map(&:first).uniq).to eq(['Shop#handle'])
    # every slow call took 5 ms or more; the quick one never shows
    names = slow.map(&:first)
    expect(names).to include('Shop#handle', 'Shop#query', 'Shop#render')
    expect(names).not_to include('Shop#quick')
    slow.each { |name, from, to, _| expect(to - from).to be >= 5, "#{name}: #{to - from} ms" }
    # query and render inside handle (but the first, if the trace began in it)
    inside = slow.select { |name, *| %w[Shop#query Shop#render].include?(name) }
    expect(inside.count { |*, around| around.include?('Shop#handle') }).to be >= inside.size - 2
    expect(names.count('Shop#handle')).to be_between(5, 80) # 2 s of 30 ms calls
    # (a query before the first handle's end, after the last's)
    expect(names.count('Shop#query')).to be_within(2).of(names.count('Shop#handle'))
  end

  # A speedscope file too big to parse into Ruby objects whole (~80 MB):
  # the evented profiles' events checked with a pattern, the rest parsed
  # with the events taken out. -> [doc, { profile name => [O count, C count] }]
  def speedscope_outline(text)
    counts = {}
    event = /\{"type":"[OC]","frame":\d+,"at":\d+\.\d+\}/
    profile = /("name":("(?:[^"\\]|\\.)*"),"unit":"milliseconds","startValue":[\d.]+,"endValue":[\d.]+,"events":\[)([^\]]*)\]/
    rest = text.gsub(profile) do
      head, name, events = Regexp.last_match.captures
      # each event whole, a comma between two (no pattern over millions of repeats)
      marks = events.gsub(event, 'E')
      expect(marks == (['E'] * marks.count('E')).join(',')).to be(true), "#{name}: an event is malformed"
      counts[JSON.parse(name)] = [events.scan('"type":"O"').size, events.scan('"type":"C"').size]
      "#{head}]"
    end
    [JSON.parse(rest), counts]
  end

  # The traced spans are kept to the end; an app sets their pace (a tight
  # loop of a traced method, millions a second), so the client keeps the
  # first 1,000,000 (32 MB) and counts the rest, said on stderr and in the
  # file's name. The app makes 1,500,000 traced calls, paced so that the
  # ring keeps up, once the client is attached.
  it 'keeps at most 1,000,000 traced spans in speedscope\'s format, and says how many it left out' do
    cap = 1_000_000
    calls = 1_500_000
    go = File.join(Dir.mktmpdir('rbtrace-spans'), 'go')
    out = File.join(Dir.tmpdir, "rbtrace-profile-cap-#{Process.pid}.speedscope.json")
    app = start_target(<<~RUBY).ready
      class Tick; def tick = nil; end
      t = Tick.new
      puts "ready"
      sleep 0.01 until File.exist?(#{go.inspect})
      #{calls / 5_000}.times { 5_000.times { t.tick }; sleep 0.002 }
      puts "done"
      sleep
    RUBY
    begin
      client = start_client('-p', app.pid, '--profile', '-m', 'Tick#tick', '--format', 'speedscope',
                            '--stats', '-o', out)
      client.attached
      FileUtils.touch(go)
      app.wait_for('done', timeout: 120)
      sleep 1 # the last events on their way
      expect(client.stop(:INT, timeout: 120)).to be_success, client.outputs
      text = File.read(out)
    ensure
      FileUtils.rm_rf([File.dirname(go), out])
    end
    stderr = client.stderr
    received, lost = stderr.match(/^\*\*\* (\d+) events received, (\d+) lost$/).captures.map(&:to_i)
    note = stderr.lines.last
    expect(note).to match(/\A\*\*\* speedscope: (\d+) traced spans .* were left out of the file, which keeps the first 1000000 .*: trace fewer methods, or for a shorter --duration\n\z/)
    left_out = Integer(note[/(\d+) traced spans/, 1])
    doc, counts = speedscope_outline(text)
    expect(doc['name']).to end_with(" (#{left_out} traced spans left out past the first #{cap})")
    traced = doc['profiles'].select { |prof| prof['type'] == 'evented' }
    expect(traced.size).to eq(1)
    expect(counts).to eq(traced.first['name'] => [cap, cap])
    say "#{received} events received, #{lost} lost; #{cap} spans kept, #{left_out} left out; " \
        "a file of #{text.bytesize >> 20} MiB"
    if lost.zero?
      # every call a span: kept or counted
      expect(received).to eq(2 * calls)
      expect(left_out).to eq(calls - cap)
    else
      expect(left_out).to be_between(1, calls - cap)
    end
  end

  # --format json: a line per sample, for jq; the app's names escaped per
  # JSON (a thread named with an escape sequence, a quote, a backslash).
  it 'writes a JSON line per sample with --format json: thread, name, time, state, weight, stack' do
    evil = "x\e]0;PWNED\a\e[2J\"q\\"
    app = start_target(<<~RUBY).ready
      #{ProfileWorkload::CLASSES}
      Thread.new { Spinner.new.run }.name = #{"spin#{evil}".inspect}
      Thread.new { Sleeper.new.run }
      puts "ready"
      sleep
    RUBY
    r = rbtrace('-p', app.pid, '--profile', '--format', 'json', '--duration', '2', timeout: 32)
    expect(r.exitstatus).to eq(0), r.stderr
    expect(r.stdout.b).not_to match(/[\x00-\x09\x0b-\x1f\x7f]/n) # the escape sequence escaped
    lines = r.stdout.lines.map { |l| JSON.parse(l) }
    expect(lines.first).to include('kind' => 'attach', 'pid' => app.pid)
    expect(lines.last).to include('kind' => 'profile')
    samples = lines.select { |l| l['kind'] == 'sample' }
    expect(lines.last['samples']).to eq(samples.sum { |l| l['weight'] })
    expect(samples.size).to be > 100 # 3 threads x 100 Hz x 2 s = 600 on an idle machine
    samples.each do |l|
      expect(l.keys).to eq(%w[kind thread thread_name time state weight stack])
      expect(['running', 'GVL wait', 'blocked', 'GC']).to include(l['state'])
      expect(l['stack']).to all(be_a(String))
    end
    # each thread's line comes before its samples, its number theirs
    threads = lines.select { |l| l['kind'] == 'thread' }
    expect(samples.map { |l| l['thread'] }.uniq).to match_array([1, 2, 3])
    # the spinner, named: its samples (once its name came) spin, outermost first
    spinner = samples.select { |l| l['thread_name'] == "spin#{evil}" }
    expect(threads.map { |l| l['name'] }).to include("spin#{evil}")
    expect(spinner.size).to be > 20
    expect(spinner.map { |l| l['stack'].last }.tally.max_by(&:last).first).to eq('Work#spin')
    expect(spinner.first['stack'].first(2)).to eq(['block in <main>', 'Spinner#run'])
    # the sleeper, unnamed: blocked in Kernel#sleep (but as it wakes each second)
    sleeper = samples.select { |l| l['stack'].include?('Sleeper#run') }
    expect(sleeper.map { |l| l['thread_name'] }.uniq).to eq([nil])
    asleep = sleeper.count { |l| l['state'] == 'blocked' && l['stack'].last == 'Kernel#sleep' }
    expect(asleep).to be >= sleeper.size * 0.85
    # times on the trace's clock, in order per thread
    samples.group_by { |l| l['thread'] }.each_value do |ls|
      expect(ls.map { |l| l['time'] }).to eq(ls.map { |l| l['time'] }.sort)
    end
  end

  # profile.proto's wire format, read back by a decoder of its own: fields
  # as [number, value] (value an Integer or a String of bytes).
  def protobuf_fields(bytes)
    io = StringIO.new(bytes)
    fields = []
    varint = lambda do
      v = shift = 0
      loop do
        b = io.readbyte
        v |= (b & 0x7f) << shift
        shift += 7
        break if b < 0x80
      end
      v
    end
    until io.eof?
      key = varint.call
      case key & 7
      when 0 then fields << [key >> 3, varint.call]
      when 2 then fields << [key >> 3, io.read(varint.call)]
      else raise "wire type #{key & 7} in a pprof profile"
      end
    end
    fields
  end

  it 'writes pprof: gzipped profile.proto, samples and cpu nanoseconds, a thread label' do
    out = File.join(Dir.tmpdir, "rbtrace-profile-#{Process.pid}.pb.gz")
    begin
      profile('cpu', '--format', 'pprof', '-o', out, seconds: 4)
      raw = Zlib::GzipReader.open(out, &:read)
    ensure
      FileUtils.rm_f(out)
    end
    top = protobuf_fields(raw)
    strings = top.select { |f, _| f == 6 }.map(&:last)
    expect(strings.first).to eq('')
    read_varints = lambda do |s|
      io = StringIO.new(s)
      vals = []
      until io.eof?
        v = shift = 0
        loop do
          b = io.readbyte
          v |= (b & 0x7f) << shift
          shift += 7
          break if b < 0x80
        end
        vals << v
      end
      vals
    end
    types = top.select { |f, _| f == 1 }.map { |_, m| protobuf_fields(m).to_h.values_at(1, 2).map { |i| strings[i] } }
    expect(types).to eq([%w[samples count], %w[cpu nanoseconds]])
    functions = top.select { |f, _| f == 5 }.to_h do |_, m|
      h = protobuf_fields(m).to_h
      [h[1], strings[h[2]]]
    end
    locations = top.select { |f, _| f == 4 }.to_h do |_, m|
      h = protobuf_fields(m)
      line = protobuf_fields(h.find { |f, _| f == 4 }.last).to_h
      [h.find { |f, _| f == 1 }.last, functions.fetch(line[1])]
    end
    self_ns = Hash.new(0)
    threads = Hash.new(0)
    in_work = Hash.new(0)
    period = top.find { |f, _| f == 12 }.last
    expect(period).to eq(10_000_000) # 100 Hz
    top.select { |f, _| f == 2 }.each do |_, m|
      sample = protobuf_fields(m)
      locs = read_varints.call(sample.find { |f, _| f == 1 }.last)
      count, ns = read_varints.call(sample.find { |f, _| f == 2 }.last)
      expect(ns).to eq(count * period)
      label = protobuf_fields(sample.find { |f, _| f == 3 }.last).to_h
      expect(strings[label[1]]).to eq('thread')
      threads[strings[label[2]]] += count
      self_ns[locations.fetch(locs.first)] += ns
      # a sample may land in Work#run's loop itself, between its calls
      in_work[(locs.map { |l| locations.fetch(l) } & ['Work#heavy', 'Work#light', 'Spinner#run']).any?] += count
    end
    expect(in_work[true]).to be >= (in_work[true] + in_work[false]) * 0.95
    expect(threads.keys).to all(match(/\At\d+/))
    expect(threads.size).to eq(2) # cpu mode: the sleeper never ran a tick's worth
    expect(self_ns['Work#spin']).to be >= self_ns.values.sum * 0.95
  end

  # --inject: rbtrace loaded into an app started without it, then profiled
  # in the same command; nothing in the sampler depends on how it came.
  it 'profiles an app started without rbtrace, with --inject' do
    skip '--inject needs root (or CAP_SYS_PTRACE)' unless Process.uid.zero?
    plain = start_target(ProfileWorkload::SOURCE, rbtrace: false).ready
    r = rbtrace('-p', plain.pid, '--inject', '--timeout', '60', '--profile', '--duration', '2', timeout: 90)
    expect(r.exitstatus).to eq(0), r.stderr
    expect(r.stderr).to match(/\*\*\* injected rbtrace into process #{plain.pid}/)
    expect(r.stdout).to match(/\A\*\*\* profile: (\d+) samples of 3 threads, \d+ missed\n/)
    expect(r.stdout[/(\d+) samples/, 1].to_i).to be > 30
    expect(r.stdout).to match(/ Work#spin$/).and match(/ Kernel#sleep$/)
    expect(r.stdout.lines.grep(/\AThread t\d+/).map { |l| l[/\AThread t\d+(?: (\w+))? \d+ samples/, 1].to_s })
      .to contain_exactly('', 'sleeper', 'spinner')
    expect(plain).to be_alive
  end

  # --top's blocks ("*** top of process PID ..." to a blank line) from a
  # text: [header, rows { name => [last self %, last total %, self, total] },
  # thread lines].
  def top_blocks(text)
    text.scan(/^\*\*\* top of process .*?\n\n/m).map do |block|
      head, _columns, *lines = block.lines
      rows, threads = lines.map(&:chomp).reject(&:empty?).partition { |l| l.start_with?('      ') }
      rows = rows.grep(/\A +\d/).to_h do |l|
        last_self, last_total, self_n, total_n, name = l.split(' ', 5)
        [name, [Float(last_self), Float(last_total), Integer(self_n), Integer(total_n)]]
      end
      [head, rows, threads]
    end
  end

  # Not on a terminal: a block of lines a second, each for the samples of
  # its second; the table of the whole profile at the end, as without --top.
  it '--top writes a block a second when stdout is no terminal: the last second\'s samples, each thread\'s states' do
    r = profile('--top', seconds: 4)
    blocks = top_blocks(r.stdout)
    expect(blocks.size).to be >= 2, r.stdout # a view a second over 4 s (a loaded machine may starve one)
    in_all = checked = 0
    blocks.each_with_index do |(head, rows, threads), i|
      header = /\A\*\*\* top of process #{app.pid} \(--profile wall, 100 Hz\): (\d+) samples in the last [\d.]+ s, \d+ missed; (\d+) in all\n\z/
      last, all = head.match(header).captures.map(&:to_i)
      # the views' samples add up to the cumulative count each shows
      in_all += last
      expect(all).to eq(in_all)
      next if last.zero?

      expect(rows['Kernel#loop'][1]).to eq(100.0) # every thread's stack has it
      expect(rows.values.sum { |v| v[0] }).to be_within(0.1).of(100)
      # (the first view may come before a thread's first sample)
      next if i.zero?

      expect(threads.map { |l| l[/\AThread t\d+(?: (\w+))?:/, 1].to_s }).to contain_exactly('', 'sleeper', 'spinner')
      expect(rows.keys).to include('Work#spin', 'Kernel#sleep')
      expect(threads.find { |l| l.include?('sleeper') }).to match(/blocked/)
      checked += 1
    end
    expect(checked).to be >= 1
    expect(r.stdout.lines.last(4).join).to match(/^Thread t\d+ spinner \d+ samples: /)
    expect(r.stdout).to include("*** profile: #{r.stdout[/^\*\*\* profile: (\d+)/, 1]} samples of 3 threads")
    expect(r.stdout).not_to include("\e")
    expect(in_all).to be <= r.stdout[/^\*\*\* profile: (\d+)/, 1].to_i
  end

  # On a terminal: the screen cleared and redrawn for each view; what the
  # app names (a thread, here with escape sequences in its name) escaped.
  it '--top redraws a terminal each second, the app\'s names escaped' do
    evil = start_target(<<~RUBY).ready
      #{ProfileWorkload::CLASSES}
      Thread.new { Sleeper.new.run }.name = "bad\\e[2Jname"
      puts "ready"
      Work.new.run
    RUBY
    read, write, pid = PTY.spawn(RBTraceSpec::SPAWN_ENV.merge('TERM' => 'xterm'), RBTraceSpec::CLIENT,
                                 '-p', evil.pid.to_s, '--profile', '--top', '--duration', '3')
    out = +''
    status = nil
    begin
      Timeout.timeout(60) do
        loop do
          IO.select([read], nil, nil, 0.5)
          chunk = read.read_nonblock(4096, exception: false)
          break if chunk.nil?

          out << chunk if chunk.is_a?(String)
        end
      rescue Errno::EIO
        nil # the client closed the terminal: all is read
      end
      status = Process.wait2(pid).last
    ensure
      unless status
        Process.kill(:KILL, pid) rescue nil
        Process.wait(pid) rescue nil
      end
      [read, write].each { |io| io.close unless io.closed? }
    end
    expect(status.exitstatus).to eq(0), out
    views = out.split("\e[H\e[2J").drop(1)
    expect(views).not_to be_empty, out
    views.each { |v| expect(v).to start_with("*** top of process #{evil.pid} ") }
    # the app's ESC, shown as \x1b: only the client's own clears are escape sequences
    expect(out.scan("\e").size).to eq(2 * views.size)
    expect(out).to include('Thread t2 bad\x1b[2Jname').or include('Thread t1 bad\x1b[2Jname')
    expect(out).to include('*** profile: ')
  end

  it 'refuses a bad mode or rate (exit 2), and --hz without --profile' do
    [%w[--profile wal], %w[--profile --hz 0], %w[--profile --hz 20000], %w[--hz 100 -m Foo#bar],
     %w[--profile --format chrome], %w[--format pprof -m Foo#bar], %w[--format speedscope -f],
     %w[--top], %w[--top -m Foo#bar], %w[--profile --top -m Foo#bar], %w[--profile --top --gc],
     %w[--profile --top --format folded], %w[--profile --top --summary]].each do |args|
      r = rbtrace('-p', Process.pid, *args)
      expect(r.exitstatus).to eq(2), "#{args.join(' ')}: #{r.stderr}"
      expect(r.stderr).to match(/--profile|--hz|--top/)
    end
  end
end
