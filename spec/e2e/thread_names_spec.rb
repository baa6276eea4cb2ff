require_relative '../spec_helper'
require 'json'
require 'tmpdir'
require 'fileutils'

# --thread-names (docs/usage.md, "Thread names"): each thread's name
# (Thread#name) after its [tN], from THREAD_NAME events the target sends
# before a thread's calls; on by default in --format json and chrome.
# Real apps with named, unnamed, renamed and hostile-named threads, traced
# by the real client.
RSpec.describe 'thread names' do
  let(:dir) { Dir.mktmpdir('rbtrace-thread-names') }

  after { FileUtils.rm_rf(dir) }

  # Three threads calling Worker#step: one named as Puma names its pool's,
  # one never named, one named only after it has been traced a while (it
  # waits for the file `go` in dir), and renamed later (`again`).
  def app_with_threads
    start_target(<<~RUBY).ready
      class Worker
        def step(x) = x + 1
      end
      w = Worker.new
      dir = #{dir.inspect}
      Thread.new { Thread.current.name = 'puma srv tp 001'; loop { w.step(1); sleep 0.005 } }
      Thread.new { loop { w.step(2); sleep 0.005 } }
      Thread.new do
        loop { w.step(3); sleep 0.005; break if File.exist?(File.join(dir, 'go')) }
        Thread.current.name = 'late'
        loop { w.step(4); sleep 0.005; break if File.exist?(File.join(dir, 'again')) }
        Thread.current.name = 'renamed'
        loop { w.step(5); sleep 0.005 }
      end
      puts 'ready'
      sleep
    RUBY
  end

  it 'shows no names without --thread-names' do
    app = app_with_threads
    out = trace(app, '-m', 'Worker#step', until_output: ->(o) { o.scan('[t3] Worker#step <').size >= 3 }).stdout
    expect(out).to match(/^\[t\d\] Worker#step/)
    expect(out).not_to include('puma srv tp 001')
    expect(out.lines.grep(/^\[t\d+ /)).to eq([])
  end

  it 'shows a thread named before, after and again during the trace, and none for an unnamed one' do
    app = app_with_threads
    client = start_client('-p', app.pid, '-m', 'Worker#step', '--thread-names')
    client.attached
    client.wait_for(/^\[t\d+ puma srv tp 001\] Worker#step/)
    # the late thread is traced unnamed first: its lines carry a number only
    client.wait_for(->(o) { o.scan(/^\[t\d+\] Worker#step </).size >= 6 })
    FileUtils.touch(File.join(dir, 'go'))
    client.wait_for(/^\[t\d+ late\] Worker#step/)
    FileUtils.touch(File.join(dir, 'again'))
    client.wait_for(/^\[t\d+ renamed\] Worker#step/)
    expect(client.stop(:INT)).to be_success
    lines = client.stdout.lines.grep(/Worker#step/)
    prefixes = lines.map { |l| l[/\A\[t\d+[^\]]*\]/] }
    # an unnamed thread's lines have no prefix while it is the only one seen
    expect(prefixes.drop_while(&:nil?)).to all(be_a(String))
    prefixes.compact!
    by_number = prefixes.group_by { |p| p[/t\d+/] }
    names = by_number.transform_values { |ps| ps.map { |p| p[/\A\[t\d+ ?(.*)\]\z/, 1] }.uniq }
    # one thread only ever puma's name, and the renamed one its names in order
    expect(names.values).to include(['puma srv tp 001'])
    expect(names.values).to include(['', 'late', 'renamed'])
    # the main thread and the unnamed worker: never a name
    expect(names.values.count([''])).to be >= 1
    # the late thread's lines before its name: number alone, the same number
    late = names.find { |_, v| v.include?('late') }.first
    expect(prefixes.grep(/\A\[#{late}\]\z/)).not_to be_empty
  end

  it 'escapes and bounds a hostile name (newlines, ANSI escapes, 10 KB)' do
    app = start_target(<<~'RUBY').ready
      class Worker
        def step(x) = x + 1
      end
      Thread.new do
        Thread.current.name = "evil\n\e[31m\e]0;title\a]fake] " + ('A' * 10_240)
        loop { Worker.new.step(1); sleep 0.005 }
      end
      puts 'ready'
      sleep
    RUBY
    r = trace(app, '-m', 'Worker#step', '--thread-names', until_output: ->(o) { o.scan('Worker#step <').size >= 5 })
    expect(r.status).to be_success, r.stderr
    lines = r.stdout.lines.grep(/Worker#step/)
    expect(lines.size).to be >= 5
    line = lines.first
    expect(line).not_to include("\e", "\a")
    expect(line.count("\n")).to eq(1)
    expect(line).to start_with('[t1 evil\n\x1b[31m\x1b\x5d0;title\x07\x5dfake\x5d AAAA')
    # 48 bytes of the name at most, escaped, then "..."
    prefix = line[/\A\[t1 (.*?)\] Worker#step/, 1]
    expect(prefix).to end_with('A...')
    expect(prefix.size).to be < (48 * 4) + 3
    expect(line.size).to be < 300

    json_out = File.join(dir, 'hostile.jsonl')
    r = trace(app, '-m', 'Worker#step', '--format', 'json', '-o', json_out) do
      Timeout.timeout(10) { sleep 0.05 until File.read(json_out).include?('"kind":"call"') }
    end
    expect(r.status).to be_success, r.stderr
    thread = File.readlines(json_out).map { |l| JSON.parse(l) }.find { |o| o['kind'] == 'thread' }
    expect(thread['name']).to start_with("evil\n\e[31m\e]0;title\a]fake] AAA").and end_with('A...')
    expect(thread['name'].bytesize).to eq(48 + 3)
  end

  it 'names the threads in --format json and chrome by default, each valid' do
    app = app_with_threads
    FileUtils.touch(File.join(dir, 'go'))
    json_out = File.join(dir, 'trace.jsonl')
    # until every thread checked below has its line, and puma's a call: a
    # loaded machine may run the late thread well before puma's
    json_done = lambda do |o|
      puma = o[/"thread":(\d+),"thread_id":\d+,"name":"puma srv tp 001"/, 1]
      puma && o.include?(%("kind":"call","thread":#{puma},)) && o.include?('"name":"late"') && o.include?('"name":null')
    end
    r = trace(app, '-m', 'Worker#step', '--format', 'json', '-o', json_out) do
      Timeout.timeout(10) { sleep 0.05 until json_done.call(File.read(json_out)) }
    end
    expect(r.status).to be_success, r.stderr
    objs = File.readlines(json_out).map { |l| JSON.parse(l) }
    threads = objs.select { |o| o['kind'] == 'thread' }
    expect(threads.map { |t| t['name'] }).to include('puma srv tp 001', 'late', nil)
    expect(threads).to all(include('thread', 'thread_id', 'name'))
    # each thread's line comes before its calls
    puma = threads.find { |t| t['name'] == 'puma srv tp 001' }['thread']
    first_call = objs.index { |o| o['kind'] == 'call' && o['thread'] == puma }
    expect(objs.index { |o| o['kind'] == 'thread' && o['thread'] == puma }).to be < first_call

    chrome_out = File.join(dir, 'trace.json')
    chrome_done = lambda do |o|
      puma = o[/puma srv tp 001 \(thread (\d+)\)/, 1]
      puma && o.match?(/"ph":"X".*"tid":#{puma},/) && o.include?('late (thread') && o.match?(/"name":"thread \d+"/)
    end
    r = trace(app, '-m', 'Worker#step', '--format', 'chrome', '-o', chrome_out) do
      Timeout.timeout(10) { sleep 0.05 until chrome_done.call(File.read(chrome_out)) }
    end
    expect(r.status).to be_success, r.stderr
    events = JSON.parse(File.read(chrome_out)).fetch('traceEvents')
    labels = events.select { |e| e['ph'] == 'M' && e['name'] == 'thread_name' }
                   .to_h { |e| [e['tid'], e['args']['name']] }
    expect(labels.values).to include(match(/\Apuma srv tp 001 \(thread \d+\)\z/), match(/\Alate \(thread \d+\)\z/),
                                     match(/\Athread \d+\z/))
    tid = labels.key(labels.values.grep(/\Apuma/).first)
    expect(events.select { |e| e['ph'] == 'X' && e['tid'] == tid }.map { |e| e['name'] }).to include('Worker#step')
  end

  # Reading a name calls Thread#name, and Ruby checks interrupts as a
  # method returns: a timer's thread switch there lets other threads run
  # while one thread is inside the read (load made it likely: the json
  # example above failed a run in 6). Here an app's own Thread#name, defined
  # before rbtrace was loaded (so the one rbtrace calls), lets another
  # thread make its first traced call meanwhile (yield_how): that thread is
  # named all the same, at its first line. main runs on the main thread.
  def app_with_a_thread_name_that_yields(yield_how, main = 'sleep')
    start_target(<<~RUBY, rbtrace: false).ready
      class Worker
        def step(x) = x + 1
        def late(x) = x + 1
      end
      GO = Queue.new
      KILL = Queue.new
      class Thread
        alias_method :spec_real_name, :name
        def name
          n = spec_real_name
          if n == 'reader' && !$yielded
            $yielded = true
            #{yield_how}
          end
          n
        end
      end
      require 'rbtrace'
      w = Worker.new
      Thread.new { Thread.current.name = 'reader'; loop { w.step(1); sleep 0.005 } }
      Thread.new { GO.pop; Thread.current.name = 'other'; loop { w.step(2); sleep 0.005 } }
      puts 'ready'
      #{main}
    RUBY
  end

  def json_threads(out)
    out.lines.map { |l| JSON.parse(l) }.select { |o| o['kind'] == 'thread' }
  end

  it 'names a thread that ran while another thread\'s name was read' do
    app = app_with_a_thread_name_that_yields('GO << 1; sleep 0.3')
    r = trace(app, '-m', 'Worker#step', '--format', 'json',
              until_output: ->(o) { o.include?('"name":"reader"') })
    expect(r.status).to be_success, r.stderr
    threads = json_threads(r.stdout)
    expect(threads).to all(include('name'))
    expect(threads.map { |t| t['name'] }.uniq).to contain_exactly('reader', 'other')
  end

  # A thread killed while its name is read (its Thread#name waits here, as
  # an interrupt check may run a Thread#kill): the later threads are named.
  it 'names the threads that come after a thread killed while its name was read' do
    app = app_with_a_thread_name_that_yields('GO << 1; KILL << Thread.current; sleep', <<~'MAIN')
      t = KILL.pop
      t.kill
      t.join
      Thread.new { Thread.current.name = 'after'; loop { w.late(3); sleep 0.005 } }
      sleep
    MAIN
    r = trace(app, '-m', 'Worker#step', 'Worker#late', '--format', 'json',
              until_output: ->(o) { o.scan('"name":"Worker#late"').size >= 3 })
    expect(r.status).to be_success, r.stderr
    threads = json_threads(r.stdout)
    expect(threads.map { |t| t['name'] }).to include('after')
    expect(threads).to all(include('name'))
  end

  it 'names the threads of --slow and --raise lines' do
    app = start_target(<<~'RUBY').ready
      class Worker
        def step(x) = (sleep 0.002; raise ArgumentError, 'bad' if x == 1; x)
      end
      Thread.new { Thread.current.name = 'alpha'; loop { Worker.new.step(1) rescue nil } }
      Thread.new { Thread.current.name = 'beta'; loop { Worker.new.step(2) } }
      puts 'ready'
      sleep
    RUBY
    slow = trace(app, '--slow', '1', '--slow-methods', 'Worker#step', '--thread-names',
                 until_output: ->(o) { o.include?('alpha] Worker#step <') && o.include?('beta] Worker#step <') })
    expect(slow.status).to be_success, slow.stderr
    expect(slow.stdout.lines).to all(match(/\A\[t\d+ (alpha|beta)\] Worker#step <\d+\.\d{6}>\n\z/))
    raised = trace(app, '--raise', '--thread-names', until_output: ->(o) { o.scan('alpha] raise ArgumentError').size >= 2 })
    expect(raised.status).to be_success, raised.stderr
    expect(raised.stdout).to match(/^\[t\d+ alpha\] raise ArgumentError: bad at -e:3/)
    expect(raised.stdout).not_to include('beta] raise')
  end

  # The name is read by Ruby's own Thread#name, taken at load: an app that
  # redefines it (here, a module prepended after rbtrace was loaded, which
  # counts its calls and lies) never sees rbtrace call it, traced or not;
  # rbtrace called it, and the app saw calls it never made.
  it 'never runs an app\'s redefinition of Thread#name' do
    app = start_target(<<~'RUBY').ready
      module CountedName
        CALLS = Hash.new(0)
        def name = (CALLS[Thread.current] += 1; 'fake')
      end
      Thread.prepend(CountedName)
      class Worker
        def step(x) = x + 1
      end
      2.times { |i| Thread.new { Thread.current.name = "real #{i}"; loop { Worker.new.step(i); sleep 0.002 } } }
      puts 'ready'
      loop { sleep 0.05; puts "calls #{CountedName::CALLS.values.sum}" }
    RUBY
    out = trace(app, '-m', 'Worker#step', '--thread-names',
                until_output: ->(o) { o.include?('real 0] Worker#step <') && o.include?('real 1] Worker#step <') }).stdout
    expect(out).not_to include('fake')
    # Nor does a trace of Thread#name see rbtrace's reads (the app makes none).
    named = trace(app, '-m', 'Worker#step', 'Thread#name', '--thread-names',
                  until_output: ->(o) { o.include?('real 0] Worker#step <') && o.include?('real 1] Worker#step <') })
    expect(named.stdout).not_to include('Thread#name')
    expect(named.stderr).to include('attached')
    seen = app.drain.size
    app.wait_for(->(_) { app.lines.size > seen }) # a count made after the traces
    expect(app.lines.uniq).to eq(['ready', 'calls 0'])
  end

  # RUBY_MN_THREADS=1 (Ruby 3.3+): Ruby threads take turns on one native
  # thread; each [tN] is one Ruby thread, so each keeps its own name.
  it 'names Ruby threads that share native threads (M:N)' do
    mn_env = { 'RUBY_MN_THREADS' => '1', 'RUBY_MAX_CPU' => '1' }
    code = 'ids = 4.times.map { Thread.new { 5.times.map { sleep 0.005; Thread.current.native_thread_id } } }' \
           '.flat_map(&:value); print ids.compact.uniq.size < 4'
    shared = IO.popen(RBTraceSpec::SPAWN_ENV.merge(mn_env), [RbConfig.ruby, '-e', code], &:read) == 'true'
    skip 'this Ruby runs every Ruby thread on a native thread of its own (M:N threads: Ruby 3.3+)' unless shared
    app = start_target(<<~'RUBY', env: mn_env).ready
      class Worker
        def step(i) = i
      end
      3.times.map { |i| Thread.new { Thread.current.name = "w#{i}"; loop { Worker.new.step(i); sleep 0.002 } } }
      puts 'ready'
      sleep
    RUBY
    tagged = /^\[t\d+ (w\d)\] Worker#step\(i=(\d)\)/
    out = trace(app, '-m', 'Worker#step(i)', '--thread-names',
                until_output: ->(o) { o.scan(tagged).uniq.size >= 3 && o.scan(tagged).size > 30 }).stdout
    pairs = out.scan(tagged)
    expect(pairs.uniq.sort).to eq([%w[w0 0], %w[w1 1], %w[w2 2]])
  end

  it 'reads a --thread-names trace back with --convert' do
    app = app_with_threads
    r = trace(app, '-m', 'Worker#step', '--thread-names', until_output: ->(o) { o.scan('puma srv tp 001] Worker#step <').size >= 3 })
    expect(r.status).to be_success, r.stderr
    text = File.join(dir, 'trace.txt')
    File.write(text, r.stdout)
    c = rbtrace('--convert', 'json', text)
    expect(c.exitstatus).to eq(0), c.stderr
    calls = c.stdout.lines.map { |l| JSON.parse(l) }.select { |o| o['kind'] == 'call' }
    expect(calls.size).to eq(r.stdout.lines.grep(/Worker#step <\d/).size)
  end
end
