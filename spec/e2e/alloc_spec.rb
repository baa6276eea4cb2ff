require_relative '../spec_helper'

# rbtrace --alloc [--alloc-sample N]: the objects the app allocates, from
# Ruby's NEWOBJ internal event, counted per traced call (" alloc N" on its
# line: the objects its thread allocated between its call and its return,
# its callees' included) and, at the detach, the sites that allocated most
# (file:line, class) and the traced methods that did.
# docs/DESIGN.md, "Allocations".
RSpec.describe 'Allocations (--alloc)' do
  # Maker#strings(n) makes exactly n Strings (String.new, no literal);
  # Outer#run makes 100 Arrays itself, calls Inner#make (200 Hashes) and
  # an untraced helper (50 Strings); the loop makes 1000 Arrays outside
  # every traced call. USR1: a fork from the loop, whose child says its
  # RBTrace.alloc_stats before and after allocating.
  APP_ALLOC = <<~'RUBY'.freeze
    class Maker
      def strings(n)
        i = 0
        while i < n
          String.new # the String site
          i += 1
        end
        nil
      end
    end
    class Inner
      def make
        i = 0
        while i < 200
          h = {} # the Hash site
          i += 1
        end
      end
    end
    def untraced_helper
      i = 0
      while i < 50
        String.new
        i += 1
      end
    end
    class Outer
      def run
        i = 0
        while i < 100
          a = [] # the Array site
          i += 1
        end
        Inner.new.make
        untraced_helper
        nil
      end
    end
    trap('USR1') { $fork = true }
    N = Integer(ENV.fetch('N', '5000'))
    puts "ready"
    loop do
      Maker.new.strings(N)
      Outer.new.run
      1000.times { [] }
      sleep 0.01
      next unless $fork
      $fork = false
      fork do
        before = RBTrace.alloc_stats
        Maker.new.strings(10_000)
        puts "child #{before.inspect} #{RBTrace.alloc_stats.inspect}"
      end
    end
  RUBY

  # The script runs as -e after one line of the helper's (spec_helper.rb).
  def line_of(marker)
    APP_ALLOC.lines.index { |l| l.include?(marker) } + 2
  end

  def start_app(n: 5000)
    start_target(APP_ALLOC, env: { 'N' => n.to_s }).ready
  end

  # The counts on the lines of method's calls ("Maker#strings <d> alloc N").
  def counts(out, method)
    out.scan(/^ *#{Regexp.escape(method)} <\d+\.\d{6}> alloc (\d+)$/).flatten.map { |c| Integer(c) }
  end

  def calls_done(method, count)
    ->(out) { out.scan(/^ *#{Regexp.escape(method)} <.*> alloc \d+$/).size >= count }
  end

  # RBTrace.alloc_stats in the app: [hooked, samples ever, sites kept].
  def alloc_stats(app)
    r = rbtrace('-p', app.pid, '-e', 'RBTrace.alloc_stats')
    expect(r).to be_success, r.stderr
    eval(r.stdout[/^=> (.*)$/, 1]) # rubocop:disable Security/Eval: an Array literal of ours
  end

  it 'counts every object of a call with --alloc-sample 1, and names the site and its class' do
    app = start_app
    out = trace(app, '-m', 'Maker#strings', '--alloc-sample', '1',
                until_output: calls_done('Maker#strings', 3)).stdout
    seen = counts(out, 'Maker#strings')
    expect(seen.size).to be >= 3
    expect(seen).to all(eq(5000))
    expect(out).to include('*** allocations (--alloc-sample 1: every object counted)')
    expect(out).to match(/^ +\d+  Maker#strings  \(\d+ calls?\)$/)
    # The site of String.new, as the top one: the loop's Arrays come next.
    sites = out[/^\*\*\* sites that allocated most:\n((?: .*\n)*)/, 1].lines
    expect(sites.first).to match(/^ +\d+  String  -e:#{line_of('# the String site')}  in Maker#strings$/)
    expect(sites.join).to match(/  Array  -e:#{line_of('# the Array site')}  in Outer#run$/)
    expect(sites.join).to match(/  Hash  -e:#{line_of('# the Hash site')}  in Inner#make$/)
  end

  it 'samples one object in N, each counted as N: the total within sampling error' do
    app = start_app(n: 50_000)
    out = trace(app, '-m', 'Maker#strings', '--alloc-sample', '100',
                until_output: calls_done('Maker#strings', 4)).stdout
    seen = counts(out, 'Maker#strings')
    expect(seen.size).to be >= 4
    # ~500 samples a call at random gaps of 1..199: a call's count has a
    # standard deviation of ~1,300 (2.6 %); their sum, less.
    expect(seen.sum).to be_within(0.08 * 50_000 * seen.size).of(50_000 * seen.size)
    expect(seen).to all(be_within(0.2 * 50_000).of(50_000))
    expect(seen).to all(satisfy { |c| (c % 100).zero? })
    expect(out).to include('*** allocations (--alloc-sample 100: one object in 100 seen, counted as 100)')
  end

  it "counts a call's callees, traced or not, and nothing made outside the traced calls" do
    app = start_app
    out = trace(app, '-m', 'Outer#run', 'Inner#make', '--alloc-sample', '1',
                until_output: calls_done('Outer#run', 3)).stdout
    # Inclusive: 100 Arrays of its own, Inner#make's 200 Hashes (and the
    # Inner), untraced_helper's 50 Strings; not the loop's 1000 Arrays.
    expect(counts(out, 'Outer#run').size).to be >= 3
    expect(counts(out, 'Outer#run')).to all(eq(100 + 1 + 200 + 50))
    expect(counts(out, 'Inner#make')).to all(eq(200))
    expect(out).to match(/^ +\d+  Outer#run  \(\d+ calls?\)\n +\d+  Inner#make  \(\d+ calls?\)$/)
  end

  it "counts each thread's objects into its own calls, the threads taking turns mid-call" do
    app = start_target(<<~'RUBY').ready
      class Churner
        def churn(n)
          i = 0
          while i < n
            String.new
            i += 1
            Thread.pass if i % 100 == 0 # the other thread allocates meanwhile
          end
        end
      end
      puts "ready"
      2.times.map { |k| Thread.new { loop { Churner.new.churn(3000 + k * 1000) } } }.each(&:join)
    RUBY
    out = trace(app, '-m', 'Churner#churn', '--alloc-sample', '1',
                until_output: ->(o) { o.scan(/alloc \d+$/).size >= 8 }).stdout
    seen = out.scan(/^\[t(\d+)\] Churner#churn <\d+\.\d{6}> alloc (\d+)$/).map { |t, c| [t, Integer(c)] }
    expect(seen.size).to be >= 6
    # Each thread makes one count, 3000 or 4000, every call: whichever it is,
    # a thread's calls all show it, and the two threads differ.
    by_thread = seen.group_by(&:first).transform_values { |l| l.map(&:last).uniq }
    expect(by_thread.size).to eq(2)
    expect(by_thread.values.map(&:size)).to all(eq(1))
    expect(by_thread.values.flatten.sort).to eq([3000, 4000])
  end

  it 'reaches --format json (an "alloc" per call, alloc_site lines), chrome ("alloc" args) and --summary' do
    require 'json'
    app = start_app
    out = trace(app, '-m', 'Maker#strings', '--alloc-sample', '1', '--format', 'json',
                until_output: ->(o) { o.scan('"kind":"call"').size >= 2 }).stdout
    lines = out.lines.map { |l| JSON.parse(l) }
    calls = lines.select { |l| l['kind'] == 'call' }
    expect(calls.size).to be >= 2
    expect(calls.map { |c| c['alloc'] }).to all(eq(5000))
    sites = lines.select { |l| l['kind'] == 'alloc_site' }
    expect(sites.first).to include('class' => 'String', 'path' => '-e', 'line' => line_of('# the String site'),
                                   'label' => 'Maker#strings')
    expect(sites.map { |s| s['count'] }).to eq(sites.map { |s| s['count'] }.sort.reverse)

    out = trace(app, '-m', 'Maker#strings', '--alloc-sample', '1', '--format', 'chrome',
                until_output: /Maker#strings(.*\n)*.*Maker#strings/).stdout
    slices = JSON.parse(out).fetch('traceEvents').select { |e| e['cat'] == 'call' }
    expect(slices.map { |e| e.dig('args', 'alloc') }).to all(eq(5000))

    out = trace(app, '-m', 'Maker#strings', '--alloc-sample', '1', '--summary', seconds: 1).stdout
    expect(out).to match(/^method +calls .* raises +alloc$/)
    row = out[/^Maker#strings .*$/].split
    expect(Integer(row.last)).to eq(5000 * Integer(row[1]))
    expect(out).to match(/^\*\*\* sites that allocated most:\n +\d+  String  -e:#{line_of('# the String site')}/)
  end

  # A --summary table's rows with --alloc: name => [calls, alloc].
  def alloc_rows(lines)
    expect(lines[1].split).to eq(%w[method calls total self mean p50 p99 max raises alloc])
    lines.drop(2).take_while { |l| !l.start_with?('***') }.to_h do |l|
      name, calls, *, alloc = l.split
      [name, [Integer(calls), Integer(alloc)]]
    end
  end

  # Its sites: "Class path:line  in label" => count.
  def alloc_sites(lines)
    sites = lines.drop_while { |l| l != "*** sites that allocated most:\n" }.drop(1)
    sites.to_h { |l| l.strip.split('  ', 2).then { |count, site| [site, Integer(count)] } }
  end

  it "gives the combined table of several processes the alloc column and the sites, both processes' summed" do
    apps = Array.new(2) { start_app }
    client = start_client('-p', *apps.map(&:pid), '-m', 'Maker#strings', 'Outer#run', '--alloc-sample', '1',
                          '--summary')
    client.wait_for(->(err) { err.scan('*** attached').size >= 2 }, stream: :stderr)
    sleep 0.5 # each app makes a few calls of both every 10 ms
    expect(client.stop(:INT)).to be_success, client.stderr
    lines = client.stdout.lines
    each = apps.map { |a| lines.grep(/\A\[#{a.pid}\] /).map { |l| l.sub(/\A\[\d+\] /, '') } }
    combined = lines.grep(/\A\[all\] /).map { |l| l.sub('[all] ', '') }
    expect(combined[0]).to match(/\A\*\*\* 2 processes, 2 threads, /)
    all = alloc_rows(combined)
    mine = each.map { |l| alloc_rows(l) }
    expect(all.keys.sort).to eq(%w[Maker#strings Outer#run])
    # --alloc-sample 1 counts exactly: 5000 Strings a call, 351 objects an
    # Outer#run (alloc_spec's APP_ALLOC); the combined rows are the sums.
    all.each do |name, (calls, alloc)|
      expect(mine.map { |rows| rows.fetch(name).first }).to all(be > 0)
      expect(calls).to eq(mine.sum { |rows| rows[name].first })
      expect(alloc).to eq(mine.sum { |rows| rows[name].last })
    end
    expect(all['Maker#strings'].last).to eq(5000 * all['Maker#strings'].first)
    expect(all['Outer#run'].last).to eq(351 * all['Outer#run'].first)
    # The sites: each app's, the same site of both one, their counts summed.
    expect(combined).to include("*** allocations (--alloc-sample 1: every object counted)\n")
    sites = alloc_sites(combined)
    string_site = "String  -e:#{line_of('# the String site')}  in Maker#strings"
    expect(sites.keys.first).to eq(string_site)
    [string_site, "Array  -e:#{line_of('# the Array site')}  in Outer#run",
     "Hash  -e:#{line_of('# the Hash site')}  in Inner#make"].each do |site|
      expect(sites[site]).to eq(each.sum { |l| alloc_sites(l).fetch(site) })
    end
  end

  it 'shows no alloc without --alloc, and leaves nothing behind: the hook is removed at the detach' do
    app = start_app
    trace(app, '-m', 'Maker#strings', '--alloc', until_output: calls_done('Maker#strings', 1))
    hooked, samples, sites = alloc_stats(app)
    expect([hooked, sites]).to eq([false, 0])
    expect(samples).to be > 0
    sleep 0.3 # the app allocates ~600,000 objects a second
    expect(alloc_stats(app)[0..1]).to eq([false, samples])
    out = trace(app, '-m', 'Maker#strings', until_output: /Maker#strings </).stdout
    expect(out).to match(/^Maker#strings <\d+\.\d{6}>$/)
    expect(out).not_to match(/alloc/)
    expect(alloc_stats(app)[0..1]).to eq([false, samples])
  end

  it 'removes the hook when the client dies' do
    app = start_app
    client = start_client('-p', app.pid, '-m', 'Maker#strings', '--alloc')
    client.wait_for(/Maker#strings <.*> alloc/)
    Process.kill(:KILL, client.pid)
    client.wait
    # The target notices the socket hang up and detaches by itself.
    sleep 0.5
    hooked, samples, = alloc_stats(app)
    expect(hooked).to be(false)
    sleep 0.3
    expect(alloc_stats(app)[0..1]).to eq([false, samples])
  end

  it 'a child forked while traced has no hook' do
    app = start_app
    trace(app, '-m', 'Maker#strings', '--alloc', until_output: /alloc/) do
      Process.kill(:USR1, app.pid)
      app.wait_for(/^child /)
    end
    line = app.lines.grep(/^child /).first
    # [hooked, samples, sites] as the child started, and after 10,000 Strings.
    before, after = line.scan(/\[[^\]]*\]/).map { |a| eval(a) } # rubocop:disable Security/Eval
    expect(before).to eq([false, before[1], 0])
    expect(after).to eq(before)
  end

  # Ruby 4.0 keeps an object's id in its shape: an object that was asked
  # for its object_id gets a shape of its own (and object_id inside a NEWOBJ
  # hook is unsafe there: Ruby's Bug #21710). The hook names no object: the
  # objects made while every one is sampled have the shape of one made
  # untraced. (Before 4.0 an id changes no shape: the same on any Ruby.)
  it 'gives no object an id: the objects made while traced have the shape of one made untraced' do
    app = start_target(<<~'RUBY').ready
      require 'objspace'
      class Item; end
      class Keeper
        def keep = ($kept << Item.new if RBTrace.attached? && $kept.size < 1000)
      end
      $kept = []
      keeper = Keeper.new
      puts "ready"
      loop { keeper.keep; sleep 0.001 }
    RUBY
    trace(app, '-m', 'Keeper#keep', '--alloc-sample', '1', until_output: /(^Keeper#keep <.*> alloc 1\n){20}/)
    shapes = '$kept.dup.map { |o| ObjectSpace.dump(o)[/"shape_id":(\d+)/, 1] }.tally'
    r = rbtrace('-p', app.pid, '-e', "[#{shapes}, ObjectSpace.dump(Item.new)[/\"shape_id\":(\\d+)/, 1]]")
    expect(r).to be_success, r.stderr
    kept, fresh = eval(r.stdout[/^=> (.*)$/, 1]) # rubocop:disable Security/Eval: literals of ours
    expect(kept.values.sum).to be >= 20
    expect(kept).to eq(fresh => kept.values.sum)
  end

  # The app sees no change: the same work, untraced and traced, gives the
  # same output (the objects made, their classes, contents and frozenness).
  it 'changes nothing the app sees (differential: the same output untraced and traced)' do
    probe = <<~'RUBY'
      class Work
        def item(i)
          a = Array.new(3) { |j| "s#{i}-#{j}" }
          h = { a: a, s: a.join, sym: :"k#{i % 7}" }
          [h.inspect, a.map(&:upcase).inspect, a.first.frozen?, h.class, Struct.new(:x).new(i).x,
           ObjectSpace.respond_to?(:count_objects)].inspect
        end
      end
      puts "ready"
      $stdin.gets
      w = Work.new
      300.times { |i| puts "w #{i} #{w.item(i)}" }
      puts "done"
      sleep
    RUBY
    run = lambda do |traced|
      app = start_target(probe.sub('$stdin.gets', 'sleep 0.05 until File.exist?(ENV["GO"])'),
                         env: { 'GO' => go = File.join(Dir.tmpdir, "rbtrace-alloc-go-#{Process.pid}-#{traced}") })
      app.ready
      client = nil
      if traced
        client = start_client('-p', app.pid, '-m', 'Work#item', '--alloc-sample', '1')
        client.attached
      end
      File.write(go, '')
      app.wait_for('done', timeout: 30)
      client&.stop(:INT)
      File.delete(go)
      [app.lines.grep(/^w /), client&.stdout]
    end
    plain, = run.call(false)
    traced, trace_out = run.call(true)
    expect(plain.size).to eq(300)
    expect(traced).to eq(plain)
    expect(counts(trace_out, 'Work#item').size).to eq(300)
  end
end
