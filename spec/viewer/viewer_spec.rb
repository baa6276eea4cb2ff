# The traces are seen in a real viewer (issue 24, item 4): a real app with
# a few nested methods is traced by the real client with --format chrome
# and --format folded, then each file is opened in speedscope (the npm
# package, pinned, served from 127.0.0.1) in headless Chromium, and the
# page is read: the profile loaded, and it lists exactly the traced
# methods. The chrome trace's flame chart is also shot, for docs/usage.md
# ("Viewing a trace"): tmp/viewer/speedscope.png, copied to
# docs/images/speedscope.png when RBTRACE_UPDATE_SCREENSHOT=1.
#
# Runs apart from `rake spec` (`rake spec:viewer`, script/test's 3.1 leg,
# after bash script/setup-viewer installs Chromium and speedscope).
require_relative 'viewer_helper'

RSpec.describe 'a trace in speedscope, in headless Chromium' do
  # A small shop: each request goes three or four methods deep, and each
  # method does a few milliseconds of work of its own, so that the flame
  # chart shows blocks one can read. It serves REQUESTS requests when it
  # gets SIGUSR1 (once the client is attached: the trace holds them whole),
  # says "served", and idles outside the traced methods; with HANG=1, it
  # starts one more request and hangs in it (in Page#render, which says
  # "hanging"), so that the trace ends mid-call, as a ^C on a busy app does.
  REQUESTS = 8
  APP = <<~RUBY.freeze
    def work(ms)
      finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + ms / 1000.0
      nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
    end
    class Tax;   def self.rate(item) = (work(2); 0.2); end
    class Item;  def price = (work(1); 10 * (1 + Tax.rate(self))); end
    class Cart;  def total = (work(2); Array.new(3) { Item.new.price }.sum); end
    class Page
      def render(total) = (work(4); (puts 'hanging'; sleep) if $hang; "total: \#{total}")
    end
    class Store
      def handle = (work(1); Page.new.render(Cart.new.total))
    end
    store = Store.new
    trap('USR1') { $go = true }
    puts 'ready'
    sleep 0.01 until $go
    #{REQUESTS}.times { store.handle }
    puts 'served'
    ($hang = true; store.handle) if ENV['HANG'] == '1'
    sleep
  RUBY
  METHODS = %w[Store#handle Cart#total Item#price Tax.rate Page#render].freeze

  before(:all) do
    @release = Viewer.speedscope_release
    @dir = File.join(RBTraceSpec::ROOT, 'tmp', 'viewer')
    FileUtils.mkdir_p(@dir)
  end

  before do
    @server = StaticServer.new('/speedscope' => @release, '/traces' => @dir)
    @browser = Chromium.new
  end

  after do
    @browser&.quit
    @server&.stop
  end

  # Traces a fresh app's REQUESTS requests with the client writing format
  # to -o FILE, then stops the client as ^C does (mid_call: once the app
  # hangs in one more request); returns the file's path and the app's pid.
  def trace_to_file(format, name, mid_call: false)
    path = File.join(@dir, name)
    FileUtils.rm_f(path)
    app = start_target(APP, env: { 'HANG' => mid_call ? '1' : '0' }).ready
    client = start_client('-p', app.pid, '-m', *METHODS, '--format', format, '-o', path)
    client.attached
    Process.kill(:USR1, app.pid)
    app.wait_for(mid_call ? 'hanging' : 'served')
    expect(client.stop(:INT)).to be_success, "client: #{client.outputs}"
    [path, app.pid]
  end

  # Opens the trace at path in speedscope's sandwich view; returns the page
  # and the view's table ({ name => [total, self] }, as shown) once it is
  # there.
  def open_in_sandwich(path)
    page = @browser.open(Viewer.speedscope_url(@server, @server.url("/traces/#{File.basename(path)}"),
                                               view: 'sandwich'))
    rows = @browser.wait_until(page, Viewer::SANDWICH_ROWS)
    [page, rows.to_h { |total, self_time, name| [name, [total, self_time]] }]
  end

  it 'shows a chrome trace: its thread, the traced methods and their self times' do
    path, pid = trace_to_file('chrome', 'shop.json')
    events = JSON.parse(File.read(path))['traceEvents']
    expect(events.select { |e| e['ph'] == 'X' }.map { |e| e['name'] }.tally)
      .to eq('Store#handle' => REQUESTS, 'Cart#total' => REQUESTS, 'Page#render' => REQUESTS,
             'Item#price' => 3 * REQUESTS, 'Tax.rate' => 3 * REQUESTS)
    expected = Viewer.chrome_self_times(events)

    page, table = open_in_sandwich(path)
    expect(table.keys).to match_array(METHODS)
    # speedscope read the durations in the unit they were written in
    # (microseconds): its self times are ours, to its display's rounding.
    table.each do |name, (_total, self_time)|
      expect(Viewer.sandwich_value(self_time)).to be_within((expected[name] * 0.01) + 0.01).of(expected[name]),
                                                  "#{name}: speedscope shows #{self_time}, the trace says #{expected[name]} µs"
    end
    # The thread, named by the trace's metadata events, in the toolbar.
    expect(@browser.evaluate(page, 'document.body.innerText')).to include("ruby #{pid}")
    expect(Array.new(@server.requests.size) { @server.requests.pop }).to include('GET /traces/shop.json')
  end

  it 'shows a folded trace stopped mid-call: the traced methods and their self times, as the file weighs them' do
    path, = trace_to_file('folded', 'shop.folded', mid_call: true)
    lines = File.readlines(path, chomp: true)
    expect(lines).to all(match(/\AStore#handle[\w#.;]* \d+\z/))
    expected = Viewer.folded_self_times(lines)
    expect(expected.keys).to match_array(METHODS)

    page, table = open_in_sandwich(path)
    expect(table.transform_values { |_total, self_time| Viewer.sandwich_value(self_time) }).to eq(expected)
    expect(@browser.evaluate(page, 'document.title')).to eq('shop.folded - speedscope')
  end

  # speedscope names a chrome event by its name and its args together
  # (`Store#handle {"unfinished":true}`): a call open when the trace ended
  # must still show under its method's name, or ^C on a busy app splits
  # every method on the stack in two.
  it 'shows a chrome trace stopped mid-call under the traced methods\' own names' do
    path, = trace_to_file('chrome', 'shop-mid-call.json', mid_call: true)
    events = JSON.parse(File.read(path))['traceEvents'].select { |e| e['ph'] == 'X' }
    expect(events.map { |e| e['name'] }.tally).to include('Store#handle' => REQUESTS + 1, 'Page#render' => REQUESTS + 1)

    _page, table = open_in_sandwich(path)
    expect(table.keys).to match_array(METHODS)
  end

  it "draws the chrome trace's flame chart (the screenshot in docs/usage.md)" do
    path, = trace_to_file('chrome', 'shop.json')
    page = @browser.open(Viewer.speedscope_url(@server, @server.url("/traces/#{File.basename(path)}"),
                                               view: 'time-ordered'))
    # The view tabs appear once a profile is loaded, over the flame chart.
    @browser.wait_until(page, "document.body && document.body.innerText.includes('Time Order') && " \
                              "document.querySelector('canvas') !== null")
    @browser.evaluate(page, Viewer::TWO_FRAMES)
    png = @browser.screenshot(page)
    expect(Viewer.png_size(png)).to eq([1200, 320])
    expect(png.bytesize).to be < 200_000

    shot = File.join(@dir, 'speedscope.png')
    File.binwrite(shot, png)
    if ENV['RBTRACE_UPDATE_SCREENSHOT'] == '1'
      FileUtils.mkdir_p(File.join(RBTraceSpec::ROOT, 'docs', 'images'))
      FileUtils.cp(shot, File.join(RBTraceSpec::ROOT, 'docs', 'images', 'speedscope.png'))
    end
  end
end

# --profile's files in speedscope (issue 33): the workload of known
# proportions (spec/e2e/profile_workload.rb: a main thread, a sleeper, a
# spinner, the two named) sampled for 2 s, written as speedscope's own
# format and as folded stacks, each opened in speedscope; the page must
# show each thread under the name the file gives it, and, in the sandwich
# view, exactly the frames its samples hold.
require_relative '../e2e/profile_workload'

RSpec.describe 'a --profile in speedscope, in headless Chromium' do
  before(:all) do
    @release = Viewer.speedscope_release
    @dir = File.join(RBTraceSpec::ROOT, 'tmp', 'viewer')
    FileUtils.mkdir_p(@dir)
  end

  before do
    @server = StaticServer.new('/speedscope' => @release, '/traces' => @dir)
    # tall: the sandwich view draws only the rows it has room for
    @browser = Chromium.new(height: 1000)
  end

  after do
    @browser&.quit
    @server&.stop
  end

  def profile_to_file(format, name, *args)
    path = File.join(@dir, name)
    FileUtils.rm_f(path)
    app = start_target(ProfileWorkload::SOURCE).ready
    r = rbtrace('-p', app.pid, '--profile', *args, '--format', format, '-o', path, '--duration', '2', timeout: 40)
    expect(r.exitstatus).to eq(0), r.stderr
    path
  end

  # The names in the sandwich view's table, once each (speedscope lists
  # apart two frames of one name in different places: <main> of two files),
  # or null before they are there. The tall window shows a 3-cell row of
  # times under the table too: not a name.
  NAMED_ROWS = <<~JS.freeze
    (() => {
      const rows = (#{Viewer::SANDWICH_ROWS.strip});
      if (!rows) return null;
      const names = [...new Set(rows.map(cells => cells[2]).filter(t => !/^[0-9.,]+(ns|µs|ms|s)?$/.test(t)))];
      return names.length > 0 ? names : null;
    })()
  JS

  def sandwich_names(page) = @browser.wait_until(page, NAMED_ROWS)

  # The names once they are expected (a profile just switched to is drawn
  # a little later than its toolbar): what the page shows after 30 s if not.
  def sandwich_names_until(page, expected)
    names = nil
    Timeout.timeout(30) do
      names = sandwich_names(page)
      until names.sort == expected.sort
        sleep 0.1
        names = sandwich_names(page)
      end
    end
    names
  rescue Timeout::Error
    names
  end

  def sandwich(path)
    page = @browser.open(Viewer.speedscope_url(@server, @server.url("/traces/#{File.basename(path)}"),
                                               view: 'sandwich'))
    [page, sandwich_names(page)]
  end

  it "shows a speedscope profile's threads by name, each with the frames of its samples" do
    path = profile_to_file('speedscope', 'profile.speedscope.json')
    doc = JSON.parse(File.read(path))
    frames = doc.dig('shared', 'frames').map { |f| f['name'] }
    names = doc['profiles'].map { |prof| prof['name'] }
    expect(names).to contain_exactly(/\AThread t\d+\z/, /\AThread t\d+ sleeper\z/, /\AThread t\d+ spinner\z/)

    page, = sandwich(path)
    seen = {}
    names.each_with_index do |name, i|
      # speedscope's toolbar: the profile shown, and which of how many;
      # n goes to the next (its keyboard shortcut)
      @browser.evaluate(page, "window.dispatchEvent(new KeyboardEvent('keypress', { key: 'n' })), true") if i.positive?
      @browser.wait_until(page, "document.body.innerText.includes(#{"#{name} (#{i + 1}/#{names.size})".to_json})")
      expected = doc['profiles'][i]['samples'].flatten.map { |k| frames[k] }.uniq
      shown = sandwich_names_until(page, expected)
      expect(shown).to match_array(expected), "#{name}: speedscope shows #{shown}, the file has #{expected}"
      seen[name[/\AThread t\d+ (\w+)\z/, 1] || 'main'] = shown
    end
    expect(seen['sleeper']).to include('Sleeper#run', 'Kernel#sleep')
    expect(seen['spinner']).to include('Spinner#run', 'Work#spin')
    expect(seen['main']).to include('Work#heavy', 'Work#light', 'Work#spin')
  end

  it 'shows a folded profile: every thread a root frame, under its name, and the samples\' frames' do
    path = profile_to_file('folded', 'profile.folded')
    lines = File.readlines(path, chomp: true)
    stacks = lines.map { |l| l[/\A(.*) \d+\z/, 1].split(';') }
    expect(stacks.map(&:first).uniq).to contain_exactly(/\AThread t\d+\z/, /\AThread t\d+ sleeper\z/,
                                                        /\AThread t\d+ spinner\z/)

    page, = sandwich(path)
    shown = sandwich_names_until(page, stacks.flatten.uniq)
    expect(shown).to match_array(stacks.flatten.uniq)
    expect(shown).to include('Kernel#sleep', 'Work#heavy', 'Work#light', 'Thread t2 sleeper').or include('Thread t3 sleeper')
    expect(@browser.evaluate(page, 'document.title')).to eq('profile.folded - speedscope')
  end

  it 'shows the traced calls (-m) of a speedscope profile as a profile of their own, after the samples' do
    path = profile_to_file('speedscope', 'profile-m.speedscope.json', '-m', 'Work#heavy', 'Work#light')
    names = JSON.parse(File.read(path))['profiles'].map { |prof| prof['name'] }
    expect(names.size).to eq(4)
    expect(names.last).to match(/\AThread t\d+ \(traced\)\z/)

    page, = sandwich(path)
    3.times { @browser.evaluate(page, "window.dispatchEvent(new KeyboardEvent('keypress', { key: 'n' })), true") }
    @browser.wait_until(page, "document.body.innerText.includes(#{"#{names.last} (4/4)".to_json})")
    expect(sandwich_names_until(page, %w[Work#heavy Work#light])).to contain_exactly('Work#heavy', 'Work#light')
  end
end
