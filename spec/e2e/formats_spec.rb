require 'json'
require_relative '../spec_helper'
require_relative 'formats_workload'

# --format text|json|chrome|folded (ext/rbtrace/cli/format.h): real traced
# apps, each format parsed (Ruby's JSON for json and chrome) and checked
# against its rules; one deterministic workload traced once per format
# gives the same calls per method in all four; the app's bytes give valid
# JSON whatever they are; a chrome file is whole however the trace ends.
RSpec.describe '--format' do
  # An app that always has a call open (Looper#wait sleeps inside
  # Looper#round), with calls nested under it, raises and GCs.
  APP_LOOP = <<~'RUBY'.freeze
    class Looper
      def round
        inner
        begin
          raise ArgumentError, "quote\" back\\ ctl\u0001"
        rescue ArgumentError
        end
        wait
      end

      def inner = deeper
      def deeper = Array.new(2000) { "x" * 10 }.size
      def wait = sleep(0.02)
    end
    puts "ready"
    loop { Looper.new.round; GC.start if rand < 0.3 }
  RUBY

  LOOP_SELECTORS = %w[Looper#round Looper#inner Looper#deeper Looper#wait].freeze

  # APP_LOOP that kills itself, once told to (a file appears), inside
  # Looper#deeper, half a second after the call: three calls are open when it
  # dies, and the writer has sent them. Killed from outside, it could be
  # between two rounds (in GC.start) with no call open, or just past a call
  # still in the ring, which SIGKILL loses.
  # APP_LOOP that stops inside Looper#wait (so inside Looper#round), once told
  # to (a file appears), and says so: the calls open when the client stops are
  # known. Stopped at a random moment, it could be between rounds (in
  # GC.start), with no call open.
  def app_parking(told)
    APP_LOOP.sub('def wait = sleep(0.02)',
                 "def wait = File.exist?(#{told.inspect}) ? (puts('parked'); $stdout.flush; sleep) : sleep(0.02)")
  end

  def park(app, told)
    File.write(told, '')
    app.wait_for(/parked/)
  end

  def app_killing_itself(told)
    APP_LOOP.sub('def deeper = ', "def deeper = File.exist?(#{told.inspect}) ? (sleep(0.5); Process.kill(:KILL, $$)) : ")
  end

  let(:dir) { Dir.mktmpdir('rbtrace-formats') }

  after { FileUtils.rm_rf(dir) }

  def exec_workload(format, *options)
    script = File.join(dir, 'workload.rb')
    File.write(script, FormatsWorkload::SOURCE)
    out = File.join(dir, "trace.#{format}")
    how = format == 'summary' ? ['--summary'] : ['--format', format]
    r = rbtrace('-m', *FormatsWorkload::SELECTORS, *how, *options, '-o', out, '--exec', 'ruby', script)
    expect(r.exitstatus).to eq(0), r.stderr
    File.read(out)
  end

  # ---- the rules of each format ----

  # ns as integers: ts and dur are microseconds with three decimals.
  def ns(us)
    (us * 1000).round
  end

  # The Chrome trace event format's rules: every event a known phase with
  # its fields; B and E paired per thread; X durations >= 0; X events of a
  # thread nested (a child inside its parent, never across its end).
  def check_chrome(text)
    doc = JSON.parse(text)
    expect(doc).to be_a(Hash)
    events = doc.fetch('traceEvents')
    expect(events).to be_a(Array)
    open_b = Hash.new { |h, k| h[k] = [] }
    complete = Hash.new { |h, k| h[k] = [] }
    events.each do |e|
      expect(%w[X B E i M]).to include(e['ph']), e.inspect
      expect(e['pid']).to be_a(Integer)
      expect(e['tid']).to be_a(Integer)
      expect(e['name']).to be_a(String)
      next if e['ph'] == 'M'

      expect(e['ts']).to be_a(Numeric)
      track = [e['pid'], e['tid']]
      case e['ph']
      when 'X'
        expect(e['dur']).to be >= 0
        complete[track] << [ns(e['ts']), ns(e['ts']) + ns(e['dur']), e['name']]
      when 'B' then open_b[track] << e
      when 'E'
        expect(open_b[track]).not_to be_empty, "E without B on #{track}: #{e.inspect}"
        b = open_b[track].pop
        expect(e['ts']).to be >= b['ts']
      when 'i' then expect(%w[t p g]).to include(e['s'])
      end
    end
    open_b.each { |track, bs| expect(bs).to be_empty, "B without E on #{track}" }
    complete.each_value { |xs| check_nesting(xs) }
    events
  end

  # Sorted by start (longest first), each event lies inside the one open
  # around it, or after it: never across its end.
  def check_nesting(xs)
    stack = []
    xs.sort_by { |s, e, _| [s, -e] }.each do |s, e, name|
      while (top = stack.last) && !(s >= top[0] && e <= top[1])
        stack.pop
        expect(s).to be >= top[1], "#{name} [#{s}, #{e}] crosses the end of #{top[2]} [#{top[0]}, #{top[1]}]"
      end
      stack << [s, e, name]
    end
  end

  def check_json_lines(text)
    expect(text).to end_with("\n")
    text.lines.map do |line|
      obj = JSON.parse(line)
      expect(obj).to be_a(Hash)
      expect(%w[attach thread call unfinished slow gc raise lost]).to include(obj['kind'])
      if %w[call slow gc].include?(obj['kind'])
        expect(obj['end'] - obj['start']).to eq(obj['duration'])
        expect(obj['duration']).to be >= 0
      end
      expect(obj['self']).to be <= obj['duration'] if obj['kind'] == 'call'
      obj
    end
  end

  # [[frames], weight] per line.
  def check_folded(text)
    text.lines.map do |line|
      m = line.chomp.match(/\A(.+) (\d+)\z/)
      expect(m).not_to be_nil, "not a folded stack: #{line.inspect}"
      frames = m[1].split(';')
      expect(frames).to all(satisfy { |f| !f.empty? })
      [frames, m[2].to_i]
    end
  end

  # --summary's table: {method => [calls, total, self, mean, p50, p99, max, raises]}
  def summary_rows(text)
    lines = text.lines
    expect(lines[0]).to match(/\A\*\*\* 1 thread, \d+\.\d{6} s traced, 0 events lost\n\z/)
    expect(lines[1].split).to eq(%w[method calls total self mean p50 p99 max raises])
    lines.drop(2).to_h do |l|
      name, calls, *times, raises = l.split
      [name, [calls.to_i, *times.map(&:to_f), raises.to_i]]
    end
  end

  def text_counts(text)
    text.lines.grep(/<\d+\.\d{6}>$/).map { |l| l.strip.sub(/ <.*/, '') }.tally
  end

  # ---- the same calls in every format ----

  it 'gives the same calls per method in text, json, chrome, folded and --summary' do
    summary = summary_rows(exec_workload('summary'))
    text = exec_workload('text')
    json = check_json_lines(exec_workload('json'))
    chrome = check_chrome(exec_workload('chrome'))
    folded = check_folded(exec_workload('folded'))

    expect(text_counts(text)).to eq(FormatsWorkload::COUNTS)
    calls = json.select { |o| o['kind'] == 'call' }
    expect(calls.map { |o| o['name'] }.tally).to eq(FormatsWorkload::COUNTS)
    expect(calls.map { |o| [o['class'], o['method']] }.uniq).to include(%w[Worker leaf], %w[Marker finished])
    expect(json.first).to include('kind' => 'attach')
    expect(json.count { |o| o['kind'] == 'thread' }).to eq(1)
    expect(chrome.select { |e| e['ph'] == 'X' }.map { |e| e['name'] }.tally).to eq(FormatsWorkload::COUNTS)
    expect(summary.transform_values(&:first)).to eq(FormatsWorkload::COUNTS)
    # sorted by total time; self <= total; p50 <= p99 <= max (within a bucket's 1/8)
    expect(summary.values.map { |r| r[1] }).to eq(summary.values.map { |r| r[1] }.sort.reverse)
    summary.each_value do |count, total, self_s, _mean, p50, p99, max, raises|
      expect(self_s).to be <= total
      expect(p50).to be <= p99
      expect(p99).to be <= max
      expect(max).to be <= total
      expect([count, raises]).to all(be >= 0)
    end
    expect(summary['Worker#run'][1]).to be >= summary['Worker#step'][1]

    # folded: the stacks the calls made, each once, weighted by self time
    expect(folded.map(&:first)).to contain_exactly(
      ['Worker#run'], %w[Worker#run Worker#step], %w[Worker#run Worker#step Worker#leaf],
      %w[Worker#run Worker#other], %w[Worker#run Worker#other Worker#leaf], ['Marker#finished']
    )
    expect(folded.map(&:last)).to all(be >= 0)
  end

  it "gives each json call its self time: its duration less its callees'" do
    json = check_json_lines(exec_workload('json'))
    calls = json.select { |o| o['kind'] == 'call' }
    calls.each do |c|
      callees = calls.select do |o|
        o['depth'] == c['depth'] + 1 && o['start'] >= c['start'] && o['end'] <= c['end']
      end
      expect(c['self']).to eq(c['duration'] - callees.sum { |o| o['duration'] })
    end
  end

  # ---- the rules, on a live app ----

  it 'writes chrome with nested calls, GC on its own track, raises as instant events, thread names' do
    told = File.join(dir, 'park')
    app = start_target(app_parking(told)).ready
    out = File.join(dir, 'loop.json')
    r = trace(app, '-m', *LOOP_SELECTORS, '--gc', '--raise', '--format', 'chrome', '-o', out) do
      Timeout.timeout(10) { sleep 0.05 until File.size?(out).to_i > 20_000 }
      park(app, told)
    end
    expect(r.status).to be_success, r.stderr
    events = check_chrome(File.read(out))
    xs = events.select { |e| e['ph'] == 'X' && e['cat'].start_with?('call') }
    expect(xs.map { |e| e['name'] }.uniq).to include('Looper#round', 'Looper#deeper')
    gc = events.select { |e| e['cat'] == 'gc' }
    expect(gc).not_to be_empty
    expect(gc.map { |e| e['tid'] }.uniq).to eq([0])
    expect(events).to include(include('ph' => 'M', 'name' => 'thread_name', 'tid' => 0,
                                      'args' => { 'name' => 'GC' }))
    expect(events).to include(include('ph' => 'M', 'name' => 'thread_name', 'tid' => 1))
    raises = events.select { |e| e['cat'] == 'raise' }
    expect(raises.first).to include('ph' => 'i', 's' => 't', 'name' => 'raise ArgumentError')
    expect(raises.first['args']['message']).to eq("quote\" back\\ ctl\u0001")
    # the call open at ^C (Looper#round, in its sleep) is there, ended
    expect(xs.last(2)).to all(include('cat' => 'call,unfinished').and(satisfy { |e| !e.key?('args') }))
  end

  it 'writes json lines for calls, GC and raises, and folded stacks, on a live app' do
    told = File.join(dir, 'park')
    app = start_target(app_parking(told)).ready
    json_out = File.join(dir, 'loop.jsonl')
    r = trace(app, '-m', *LOOP_SELECTORS, '--gc', '--raise', '--format', 'json', '-o', json_out) do
      Timeout.timeout(10) { sleep 0.05 until File.read(json_out).include?('"kind":"gc"') }
      park(app, told)
    end
    expect(r.status).to be_success, r.stderr
    json = check_json_lines(File.read(json_out))
    gc = json.find { |o| o['kind'] == 'gc' }
    expect(gc.keys).to include('major', 'major_by', 'gc_by', 'mark', 'sweep')
    raise_line = json.find { |o| o['kind'] == 'raise' }
    expect(raise_line).to include('exception' => 'ArgumentError', 'message' => "quote\" back\\ ctl\u0001",
                                  'reraise' => 0)
    expect(raise_line['at']).to match(/\A-e:\d+\z/)
    expect(json.last).to include('kind' => 'unfinished', 'name' => 'Looper#round')

    folded_out = File.join(dir, 'loop.folded')
    app = start_target(APP_LOOP).ready # the first stays parked
    r = trace(app, '-m', *LOOP_SELECTORS, '--format', 'folded', '-o', folded_out, seconds: 0.5)
    expect(r.status).to be_success, r.stderr
    stacks = check_folded(File.read(folded_out)).map(&:first)
    expect(stacks).to include(%w[Looper#round Looper#inner Looper#deeper], %w[Looper#round Looper#wait])
  end

  it 'writes --slow calls in every format, folded stacks rebuilt from their depths' do
    app = start_target(APP_LOOP).ready
    outs = %w[json chrome folded].to_h do |format|
      out = File.join(dir, "slow.#{format}")
      r = trace(app, '--slow', '15', '--format', format, '-o', out, seconds: 0.6)
      expect(r.status).to be_success, r.stderr
      [format, File.read(out)]
    end
    slow = check_json_lines(outs['json']).select { |o| o['kind'] == 'slow' }
    expect(slow.map { |o| [o['name'], o['depth']] }.uniq).to include(['Looper#round', 0], ['Looper#wait', 1])
    expect(check_chrome(outs['chrome']).select { |e| e['cat'] == 'slow' }.map { |e| e['name'] })
      .to include('Looper#wait', 'Kernel#sleep')
    expect(check_folded(outs['folded']).map(&:first))
      .to include(%w[Looper#round Looper#wait Kernel#sleep])
  end

  # ---- however the trace ends, the chrome file is whole ----

  { 'a ^C' => :INT, 'SIGTERM of the client' => :TERM }.each do |how, signal|
    it "leaves valid chrome JSON after #{how}, with the open calls ended" do
      app = start_target(APP_LOOP).ready
      out = File.join(dir, 'end.json')
      client = start_client('-p', app.pid, '-m', *LOOP_SELECTORS, '--format', 'chrome', '-o', out)
      client.attached
      Timeout.timeout(10) { sleep 0.02 until File.size?(out).to_i > 5000 }
      expect(client.stop(signal)).to be_success
      events = check_chrome(File.read(out))
      expect(events.count { |e| e['ph'] == 'X' }).to be > 10
    end
  end

  it 'leaves valid chrome JSON and json lines when the app is killed mid-trace' do
    %w[chrome json].each do |format|
      told = File.join(dir, "die.#{format}")
      app = start_target(app_killing_itself(told)).ready
      out = File.join(dir, "killed.#{format}")
      client = start_client('-p', app.pid, '-m', *LOOP_SELECTORS, '--format', format, '-o', out)
      client.attached
      Timeout.timeout(10) { sleep 0.02 until File.size?(out).to_i > 5000 }
      File.write(told, '')
      expect(client.wait.exitstatus).to eq(3)
      expect(client.stderr).to include("process #{app.pid} exited")
      if format == 'chrome'
        expect(check_chrome(File.read(out)).count { |e| e['ph'] == 'X' }).to be > 10
      else
        expect(check_json_lines(File.read(out)).last['kind']).to eq('unfinished')
      end
    end
  end

  it 'leaves valid chrome JSON when the app exits on its own' do
    script = File.join(dir, 'exits.rb')
    File.write(script, "#{FormatsWorkload::SOURCE}\ndef hold = sleep(0.3)\nhold\n")
    out = File.join(dir, 'exits.json')
    r = rbtrace('-m', *FormatsWorkload::SELECTORS, 'hold', '--format', 'chrome', '-o', out, '--exec', 'ruby', script)
    expect(r.exitstatus).to eq(0), r.stderr
    expect(check_chrome(File.read(out)).select { |e| e['ph'] == 'X' }.map { |e| e['name'] }.tally)
      .to eq(FormatsWorkload::COUNTS.merge('Object#hold' => 1))
  end

  it 'marks events lost where they happened' do
    app = start_target(<<~'RUBY').ready
      class Busy
        def tick = 1
      end
      $calm = false
      trap('USR1') { $calm = true }
      puts "ready"
      loop { Busy.new.tick; sleep 0.01 if $calm }
    RUBY
    out = File.join(dir, 'lost.json')
    client = start_client('-p', app.pid, '-m', 'Busy#tick', '--format', 'chrome', '-o', out)
    client.attached
    Timeout.timeout(10) { sleep 0.02 until File.size?(out).to_i > 1000 }
    Process.kill(:STOP, client.pid)
    sleep 1.5
    Process.kill(:USR1, app.pid)
    Process.kill(:CONT, client.pid)
    Timeout.timeout(10) { sleep 0.05 until File.read(out).include?('events lost') }
    expect(client.stop).to be_success
    lost = check_chrome(File.read(out)).select { |e| e['cat'] == 'lost' }
    expect(lost).not_to be_empty
    expect(lost.first).to include('ph' => 'i', 's' => 'p')
    expect(lost.first['args']['count']).to be > 0
    expect(lost.first['name']).to eq("#{lost.first['args']['count']} events lost")
  end

  # ---- the app's bytes, untrusted ----

  it 'gives valid JSON for names and values with quotes, backslashes, control bytes and invalid UTF-8' do
    app = start_target(<<~'RUBY').ready
      NAME = "q\"b\\s\x01\e[2J\xff\xc3".b
      class Odd
        define_method(NAME) { |v| v }
        def show(s) = s
      end
      puts "ready"
      loop { o = Odd.new; o.send(NAME, 1); o.show("v\"\\\n\u0002"); sleep 0.01 }
    RUBY
    shown = "q\"b\\s\u0001\e[2J\ufffd\ufffd"
    %w[json chrome].each do |format|
      out = File.join(dir, "odd.#{format}")
      r = trace(app, '-f', '--format', format, '-o', out, seconds: 0.3)
      expect(r.status).to be_success, r.stderr
      text = File.read(out)
      expect(text.b).not_to match(/[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]/n)
      expect(text).to be_valid_encoding
      names = if format == 'json'
                check_json_lines(text).map { |o| o['name'] }
              else
                check_chrome(text).map { |e| e['name'] }
              end
      expect(names).to include("Odd##{shown}")
    end
    out = File.join(dir, 'odd-args.jsonl')
    r = trace(app, '-m', 'Odd#show(s)', '--format', 'json', '-o', out, seconds: 0.3)
    expect(r.status).to be_success, r.stderr
    call = check_json_lines(File.read(out)).find { |o| o['kind'] == 'call' }
    expect(call['args']).to eq([{ 'expr' => 's', 'value' => "v\"\\\n\u0002".inspect }])
  end

  it 'writes one whole document per process with several processes and -o FILE' do
    apps = Array.new(2) { start_target(APP_LOOP) }.each(&:ready)
    out = File.join(dir, 'multi.json')
    client = start_client('-p', *apps.map(&:pid), '-m', *LOOP_SELECTORS, '--format', 'chrome', '-o', out)
    Timeout.timeout(10) do
      sleep 0.05 until apps.all? { |a| File.size?("#{out}.#{a.pid}").to_i > 5000 }
    end
    expect(client.stop).to be_success
    apps.each do |a|
      events = check_chrome(File.read("#{out}.#{a.pid}"))
      expect(events.map { |e| e['pid'] }.uniq).to eq([a.pid])
      expect(events.count { |e| e['ph'] == 'X' }).to be > 10
    end
  end

  it 'sorts --summary by --sort, and gives one table per process with several' do
    rows = summary_rows(exec_workload('summary', '--sort', 'calls'))
    expect(rows.keys).to eq(FormatsWorkload::COUNTS.sort_by { |_, n| -n }.map(&:first))

    apps = Array.new(2) { start_target(APP_LOOP) }.each(&:ready)
    r = trace(apps[0], apps[1].pid, '-m', *LOOP_SELECTORS, '--raise', '--summary', seconds: 0.5)
    expect(r.status).to be_success, r.stderr
    apps.each do |a|
      table = r.stdout.lines.grep(/\A\[#{a.pid}\] /).map { |l| l.sub(/\A\[\d+\] /, '') }.join
      rows = summary_rows(table)
      expect(rows.keys).to include('Looper#round', 'Looper#deeper', 'Looper#wait')
      expect(rows['Looper#round'].last).to be > 0   # the raise in #round
    end
  end

  # A table's header and rows, whatever its first line says.
  def table_rows(lines)
    expect(lines[1].split).to eq(%w[method calls total self mean p50 p99 max raises])
    lines.drop(2).to_h do |l|
      name, calls, *times, raises = l.split
      [name, [calls.to_i, *times.map(&:to_f), raises.to_i]]
    end
  end

  # The combined table against the processes' own: calls and raises are
  # their sums, max the largest, p50 between theirs (the union's median;
  # up to 1/8 above the largest: a table's p50 is its bucket's top, cut
  # down to its own max, and the union's max may be larger).
  def expect_combined(all, each)
    expect(all.keys.sort).to eq(each.flat_map(&:keys).uniq.sort)
    all.each do |name, (calls, total, _self, _mean, p50, _p99, max, raises)|
      mine = each.filter_map { |rows| rows[name] }
      expect(calls).to eq(mine.sum(&:first))
      expect(raises).to eq(mine.sum(&:last))
      expect(max).to eq(mine.map { |r| r[6] }.max)
      expect(total).to be_within(0.000002 * mine.size).of(mine.sum { |r| r[1] })
      expect(p50).to be_between(mine.map { |r| r[4] }.min, (mine.map { |r| r[4] }.max * 1.125) + 0.000001)
    end
  end

  it 'gives a combined table of several processes after theirs, on stdout or in -o FILE' do
    apps = Array.new(2) { start_target(APP_LOOP) }.each(&:ready)
    r = trace(apps[0], apps[1].pid, '-m', *LOOP_SELECTORS, '--raise', '--summary', seconds: 0.5)
    expect(r.status).to be_success, r.stderr
    lines = r.stdout.lines
    combined = lines.grep(/\A\[all\] /).map { |l| l.sub('[all] ', '') }
    expect(lines.last(combined.size)).to eq(combined.map { |l| "[all] #{l}" })   # after theirs
    expect(combined[0]).to match(/\A\*\*\* 2 processes, 2 threads, \d+\.\d{6} s traced, 0 events lost\n\z/)
    each = apps.map do |a|
      table_rows(lines.grep(/\A\[#{a.pid}\] /).map { |l| l.sub(/\A\[\d+\] /, '') })
    end
    all = table_rows(combined)
    expect(all['Looper#round'].first).to be > 2
    expect_combined(all, each)

    out = File.join(dir, 'summary')
    r = trace(apps[0], apps[1].pid, '-m', *LOOP_SELECTORS, '--summary', '-o', out, seconds: 0.5)
    expect(r.status).to be_success, r.stderr
    expect(r.stdout).to eq('')
    each = apps.map { |a| summary_rows(File.read("#{out}.#{a.pid}")) }
    combined = File.readlines(out)
    expect(combined[0]).to match(/\A\*\*\* 2 processes, 2 threads, /)
    expect_combined(table_rows(combined), each)
  end

  # ---- the command line ----

  it 'refuses an unknown format, a format for -e, and several processes without -o' do
    r = rbtrace('-p', Process.pid, '-f', '--format', 'xml')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include("invalid value 'xml' for --format: expected text, json, chrome, folded, speedscope or pprof")
    r = rbtrace('-p', Process.pid, '-e', '1', '--format', 'json')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include('--format json applies to traces (-m, -c, -f, --slow, --gc, --raise), not to -e')
    r = rbtrace('-p', Process.pid, '-f', '--summary', '--format', 'json')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include('--summary is a table instead of the trace')
    r = rbtrace('-p', Process.pid, '-f', '--sort', 'calls')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include('--sort orders the --summary table: add --summary')
    r = rbtrace('-p', Process.pid, Process.ppid, '-f', '--format', 'chrome')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include('needs -o FILE')
  end
end
