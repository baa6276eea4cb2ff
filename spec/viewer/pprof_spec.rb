# --profile's pprof files read by Go's own pprof (issue 33): the workload
# of known proportions (spec/e2e/profile_workload.rb: a main thread whose
# Work#heavy does three times Work#light's work, a sleeper, a spinner)
# profiled with --format pprof -o FILE, then `go tool pprof` (Debian's
# golang-go) run on the file: it must read it without a word on stderr,
# say the sample types, the period and the duration we wrote, give every
# function the flat and cum counts the file's samples add up to (read by a
# decoder of our own), the shares rbtrace's own table gives the same app,
# and filter by the thread label. In cpu mode, Work#heavy is 3/4 of the two.
#
# Runs with spec/viewer (`rake spec:viewer`, script/test's 3.1 leg, after
# bash script/setup-viewer installs golang-go): without go, it fails.
require_relative '../spec_helper'
require_relative '../e2e/profile_workload'
require_relative 'go_pprof'

RSpec.describe 'a --profile in pprof format, read by go tool pprof' do
  before(:all) do
    GoPprof.go # raises, saying what to install, when go is missing
    @dir = File.join(RBTraceSpec::ROOT, 'tmp', 'viewer', 'pprof')
    FileUtils.mkdir_p(@dir)
  end

  let(:app) { start_target(ProfileWorkload::SOURCE).ready }

  def profile_to_file(name, *args, seconds:)
    path = File.join(@dir, name)
    FileUtils.rm_f(path)
    r = rbtrace('-p', app.pid, '--profile', *args, '--format', 'pprof', '-o', path, '--duration', seconds.to_s,
                timeout: seconds + 30)
    expect(r.exitstatus).to eq(0), r.stderr
    path
  end

  # go tool pprof's stdout, once it ended well and said nothing on stderr
  # (a warning about the file fails the example).
  def pprof(*args)
    out, err, status = GoPprof.pprof(*args)
    expect([status.exitstatus, err]).to eq([0, '']), "go tool pprof #{args.join(' ')}: #{status.inspect}\n#{err}"
    out
  end

  # -top of every node (pprof drops the small ones by default).
  def top(*args) = pprof('-top', '-nodecount=1000', '-nodefraction=0', *args)

  # rbtrace's own table (--profile's text): { name => [self %, total %] }
  def table(text)
    text.lines.grep(/\A *\d+\.\d\d +\d+\.\d\d +\d+ +\d+  /).to_h do |line|
      self_pct, total_pct, _self, _total, name = line.split(' ', 5)
      [name.chomp, [Float(self_pct), Float(total_pct)]]
    end
  end

  it 'reads a wall profile: its types, period and duration, each function\'s samples, the threads\' labels' do
    path = profile_to_file('wall.pb.gz', seconds: 3)
    file = GoPprof.decode(path)
    expect(file[:types]).to eq([%w[samples count], %w[wall nanoseconds]])
    total = file[:samples].sum { |s| s[:values].first }
    expect(total).to be > 100 # 3 threads x 100 Hz x 3 s = 900 on an idle machine

    # The profile as go holds it: the types, the period, a function name
    # on every location (none a bare address), all in our one mapping,
    # which has the functions (go has nothing to symbolize).
    raw = pprof('-raw', path)
    expect(raw).to include("PeriodType: wall nanoseconds\n", "Period: 10000000\n", "\nsamples/count wall/nanoseconds\n")
    locations = raw[/^Locations\n(.*?)^Mappings\n/m, 1].to_s.lines
    expect(locations).not_to be_empty, raw
    expect(locations).to all(match(/\A\s+\d+: 0x0 M=1 \S/))
    expect(raw[/^Mappings\n(.*)/m, 1]).to eq("1: 0x0/0x0/0x0   [FN][FL][LN]\n")

    # Counted: each function's flat and cum are the file's samples', and
    # the header has the duration (first sample to last: about the 3 s,
    # and the few ms the detach takes).
    counts = top('-sample_index=samples', path)
    expect(counts).to match(/^Type: samples$/)
    duration = counts[/^Duration: (\S+), Total samples = #{total}\s*$/, 1]
    expect(duration).not_to be_nil, counts
    expect(GoPprof.seconds(duration)).to be_between(2.5, 3.5)
    rows = GoPprof.top_rows(counts).transform_values { |flat, cum| [Integer(flat), Integer(cum)] }
    expect(rows).to eq(GoPprof.flat_cum(file[:samples]))
    expect(rows.keys).to include('Work#spin', 'Kernel#sleep', 'Work#heavy', 'Work#light', 'Sleeper#run')

    # Timed (the default, the last sample type): a sample is the period,
    # 10 ms (to the 3 digits pprof prints), and three threads sampled each
    # tick make three times the duration.
    wall = top(path)
    expect(wall).to match(/^Type: wall$/)
    total_time, ratio = wall.match(/^Duration: \S+, Total samples = (\S+) \(\s*([\d.]+)%\)\s*$/)&.captures
    expect(GoPprof.seconds(total_time.to_s)).to be_within(total * 0.01 * 0.005).of(total * 0.01), wall
    expect(Float(ratio)).to be_within(30).of(300)
    in_seconds = ->(n) { be_within(0.0001 + (n * 0.01 * 0.005)).of(n * 0.01) }
    GoPprof.top_rows(wall).each do |name, (flat, cum)|
      expect([GoPprof.seconds(flat), GoPprof.seconds(cum)]).to match(rows.fetch(name).map(&in_seconds)), "#{name}: #{flat} #{cum}"
    end

    # The thread label: a third each, the sleeper's samples all in
    # Kernel#sleep (-tagfocus keeps them alone).
    tags = GoPprof.tag_values(pprof('-tags', '-sample_index=samples', path), 'thread')
    expect(tags.keys).to contain_exactly(/\At\d+\z/, /\At\d+ sleeper\z/, /\At\d+ spinner\z/)
    expect(tags.transform_values { |n| Float(n).round })
      .to eq(file[:samples].group_by { |s| s[:label] }.to_h { |(_, v), ss| [v, ss.sum { |s| s[:values].first }] })
    tags.each_value { |n| expect(Float(n)).to be_within(total * 0.05).of(total / 3.0) }
    sleeper = GoPprof.top_rows(top('-sample_index=samples', '-tagfocus=thread=sleeper', path))
    expect(sleeper.reject { |_, (flat, _)| flat == '0' }.keys).to eq(['Kernel#sleep'])
    expect(Float(sleeper.fetch('Sleeper#run')[1])).to eq(Float(tags.find { |name, _| name.end_with?(' sleeper') }.last))

    # The same app in rbtrace's own table, right after: the methods whose
    # shares the workload fixes have the same there (within 5 points).
    ours = table(rbtrace('-p', app.pid, '--profile', '--duration', '3', timeout: 40).stdout)
    go_pct = rows.transform_values { |flat, cum| [100.0 * flat / total, 100.0 * cum / total] }
    %w[Work#spin Kernel#sleep Kernel#loop Work#run Sleeper#run Spinner#run].each do |name|
      expect(go_pct.fetch(name)).to match([be_within(5).of(ours.fetch(name)[0]), be_within(5).of(ours.fetch(name)[1])]),
                                    "#{name}: go tool pprof #{go_pct[name]}, rbtrace's table #{ours[name]}"
    end
    say format('go tool pprof, wall: Work#spin %.1f %% flat, Kernel#sleep %.1f %% (rbtrace\'s table: %.1f, %.1f)',
               go_pct['Work#spin'][0], go_pct['Kernel#sleep'][0], ours['Work#spin'][0], ours['Kernel#sleep'][0])
  end

  # Go's pprof "demangles" a name it takes for C++ (with <>, [] or ::),
  # cutting its <...> and (...): Ruby's <main>, <class:Cart>, block in
  # <module:Shop> must come through as they are.
  it 'keeps the names Ruby gives class bodies and blocks: <class:Cart>, block in <class:Cart>, Shop::Cart#total' do
    app = start_target(<<~RUBY).ready
      module Shop
        class Cart
          def self.spin(n) = (i = 0; i += 1 while i < n; i)
          def total = [1].each { [2].each { Cart.spin(20_000) } }
          puts 'ready'
          loop { new.total }
        end
      end
    RUBY
    path = File.join(@dir, 'names.pb.gz')
    FileUtils.rm_f(path)
    r = rbtrace('-p', app.pid, '--profile', '--format', 'pprof', '-o', path, '--duration', '1', timeout: 30)
    expect(r.exitstatus).to eq(0), r.stderr
    rows = GoPprof.top_rows(top('-sample_index=samples', path)).transform_values { |flat, cum| [Integer(flat), Integer(cum)] }
    expect(rows).to eq(GoPprof.flat_cum(GoPprof.decode(path)[:samples]))
    expect(rows.keys).to include('<main>', '<module:Shop>', '<class:Cart>', 'block in <class:Cart>', 'Shop::Cart#total',
                                 'Shop::Cart.spin', 'Array#each')
  end

  # As profile_spec's cpu example: 600 samples of the two (a share from n
  # samples is off by sqrt(p(1-p)/n), 1.8 points at 600), from profiles of
  # 5 s until they came, which go reads together (it merges the files).
  it 'reads cpu profiles: cpu nanoseconds, Work#heavy three times Work#light, the sleeper without samples' do
    files = []
    heavy = light = 0
    counts = nil
    while heavy + light < 600 && files.size < 15
      files << profile_to_file("cpu-#{files.size}.pb.gz", 'cpu', seconds: 5)
      counts = top('-sample_index=samples', *files)
      rows = GoPprof.top_rows(counts)
      heavy, light = %w[Work#heavy Work#light].map { |name| Integer(rows.fetch(name, %w[0 0])[1]) }
    end
    decoded = files.map { |f| GoPprof.decode(f) }
    expect(decoded.map { |d| d[:types] }.uniq).to eq([[%w[samples count], %w[cpu nanoseconds]]])
    expect(pprof('-raw', files.first)).to include("PeriodType: cpu nanoseconds\n", "\nsamples/count cpu/nanoseconds\n")
    expect(top(files.first)).to match(/^Type: cpu$/)

    samples = decoded.flat_map { |d| d[:samples] }
    total = samples.sum { |s| s[:values].first }
    expect(counts).to match(/^Duration: \S+, Total samples = #{total}\s*$/)
    expect(GoPprof.top_rows(counts).transform_values { |flat, cum| [Integer(flat), Integer(cum)] })
      .to eq(GoPprof.flat_cum(samples))

    share = 100.0 * heavy / (heavy + light)
    say format('go tool pprof, cpu: Work#heavy %.1f %% of Work#heavy + Work#light (%d samples, %d files; truth 75)',
               share, heavy + light, files.size)
    expect(heavy + light).to be >= 600
    expect(share).to be_within(5).of(75)
    tags = GoPprof.tag_values(pprof('-tags', '-sample_index=samples', *files), 'thread')
    expect(tags.keys).to include(/\At\d+ spinner\z/)
    expect(tags.select { |name, _| name.end_with?(' sleeper') }.values.sum { |n| Float(n) }).to be <= total * 0.02
  end
end
