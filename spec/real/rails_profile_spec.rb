require_relative 'real_helper'
require_relative '../viewer/viewer_helper'

# A real profile of a real app in speedscope (issue 33): the Rails app of
# rails_spec.rb (spec/real/apps/rails) under Debian's Puma, loaded by wrk,
# profiled by pid with `rbtrace --profile --format speedscope -o FILE`
# (wall time, every thread; Puma names its pool's threads "puma srv tp
# 001"...), then opened in speedscope in headless Chromium: the Left Heavy
# flame chart of the pool thread that was in the slow action longest, the
# action found with speedscope's search (^F, Enter) and selected, the chart
# zoomed out to the whole thread and moved up to show the action's Rails
# callers. The page must show the action's stack from the thread's root
# down as one of the file's samples has it, Puma's and Rails' frames on
# the way (the detail view), and draw the action where a Left Heavy layout
# of the file's samples puts it, with their weight (the tooltip of the
# frame under the mouse). The page is then shot for docs/usage.md
# (--profile) and the README: tmp/viewer/profile-speedscope.png, copied to
# docs/images/profile-speedscope.png when RBTRACE_UPDATE_SCREENSHOT=1.
#
# Here, not in spec/viewer, because the app runs on Debian's Ruby and its
# gems only (real_helper.rb checks): `rake spec:real` on script/test's 3.1
# leg, which runs bash script/setup-viewer (Chromium, speedscope) first.
RSpec.describe 'a profile of a Rails app under Puma, in speedscope' do
  PROFILE_RAILS_DIR = File.join(__dir__, 'apps', 'rails')
  # The action shown: PostsController#slow (Report#build's query, then ~30
  # ms in Report#format_line's sleeps) has the most samples of wrk's three,
  # and its own frames under it read in the picture.
  PROFILE_ACTION = 'PostsController#slow'.freeze
  # Frames of its stack that the page must show, Puma's and Rails' own.
  PROFILE_CALLERS = %w[Puma::Server#process_client Rails::Engine#call ActionDispatch::Routing::RouteSet#call
                       ActionController::Metal#dispatch AbstractController::Base#process].freeze
  # The picture: 1200 pixels by this, the chart showing this many of the
  # action's callers above it (a multiple of 5) and its callees below.
  PROFILE_HEIGHT = 840
  PROFILE_ROWS_ABOVE = 15

  let(:dir) { real_tmpdir('rbtrace-rails-profile') }

  before do
    RealApps.require_commands!('puma' => 'puma', 'wrk' => 'wrk')
    @release = Viewer.speedscope_release
    @shots = File.join(RBTraceSpec::ROOT, 'tmp', 'viewer')
    FileUtils.mkdir_p(@shots)
  end

  after do
    @browser&.quit
    @server&.stop
  end

  # Puma in single mode, four pool threads, on a port the kernel picks as it
  # binds (RealApps.puma_port: read from its log); its pid.
  def start_puma
    log = File.join(dir, 'puma.log')
    env = RealApps.app_env(extra: { 'RAILS_APP_DB' => File.join(dir, 'shop.sqlite3') })
    puma = spawn_group('puma', 'puma', '-e', 'production', '-t', '4:4', '-b', 'tcp://127.0.0.1:0', 'config.ru',
                       env: env, log: log, chdir: PROFILE_RAILS_DIR)
    [puma.pid, RealApps.puma_port(log, puma, timeout: 90)]
  end

  # wrk's mix (apps/rails/wrk_load.lua) on four connections; its pid.
  def start_wrk(port)
    @wrk_log = File.join(dir, 'wrk.log')
    spawn_group('wrk', 'wrk', '-t', '1', '-c', '4', '-d', '120s', '-s', File.join(PROFILE_RAILS_DIR, 'wrk_load.lua'),
                "http://127.0.0.1:#{port}", log: @wrk_log).pid
  end

  # Stops wrk like ^C (it prints its report then); expects it saw requests
  # and no error.
  def stop_wrk(pid)
    Process.kill(:INT, pid)
    Timeout.timeout(15) { Process.wait(pid) }
    report = File.read(@wrk_log)
    expect(report[/(\d+) requests in/, 1].to_i).to be > 0, report
    expect(report).not_to match(/Socket errors|Non-2xx/), report
  end

  # A sampled profile of the file: its samples' stacks as frame indices
  # (root first, as the file has them), the same as names, and their weights.
  PROFILE_SAMPLED = Struct.new(:ids, :names, :weights)

  def sampled(doc, index)
    frames = doc.dig('shared', 'frames').map { |f| f['name'] }
    prof = doc['profiles'][index]
    PROFILE_SAMPLED.new(prof['samples'], prof['samples'].map { |ids| ids.map { |k| frames[k] } }, prof['weights'])
  end

  # Where speedscope's Left Heavy view draws the call path (frame indices,
  # root first): [its start, its weight], in the profile's unit. The view
  # merges the samples into a tree, and at each level puts the heavier
  # children first (ties aside: the path's frames here are the heavy ones).
  def left_heavy_span(profile, path)
    start = 0.0
    path.each_index do |depth|
      children = Hash.new(0.0)
      profile.ids.each_with_index do |ids, i|
        children[ids[depth]] += profile.weights[i] if ids.size > depth && ids.take(depth) == path.take(depth)
      end
      start += children.values.select { |w| w > children[path[depth]] }.sum
    end
    [start, profile.ids.each_index.sum { |i| profile.ids[i].take(path.size) == path ? profile.weights[i] : 0 }]
  end

  # The stack speedscope's detail view shows for the selected frame, from
  # it to the thread's root, or null before a frame is selected. The view
  # (its class names are hashes) is found by its first table's title: its
  # last child holds one line per frame, the name a text node of its own
  # (the colour swatch, "> " and " (file:line)" are elements).
  PROFILE_SELECTED_STACK = <<~JS.freeze
    (() => {
      const title = Array.from(document.querySelectorAll('div')).find(d => d.textContent === 'This Instance');
      const lines = title && title.parentElement.parentElement.lastElementChild.firstElementChild;
      if (!lines || lines.children.length === 0) return null;
      return Array.from(lines.children).map(line => Array.from(line.childNodes)
        .filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent).join(''));
    })()
  JS

  # The search box's input, beside its magnifier (the toolbar's menu of
  # profiles has an input of its own), or null.
  PROFILE_SEARCH_INPUT = "(Array.from(document.querySelectorAll('span'))" \
                         ".find(s => s.textContent === '\u{1F50D}')?.parentElement.querySelector('input') ?? null)".freeze

  # speedscope's search (its ^F): the first frame named text is selected,
  # zoomed to and scrolled to the chart's second row (Enter), then the
  # search box is closed (Escape), the frame staying selected. Returns the
  # detail view's stack.
  def select_frame(page, text)
    @browser.evaluate(page, "window.dispatchEvent(new KeyboardEvent('keydown', { key: 'f', ctrlKey: true })), true")
    @browser.wait_until(page, "#{PROFILE_SEARCH_INPUT} !== null")
    @browser.evaluate(page, <<~JS)
      (() => {
        const input = #{PROFILE_SEARCH_INPUT};
        input.value = #{text.to_json};
        input.dispatchEvent(new Event('input', { bubbles: true }));
        return true;
      })()
    JS
    # "?/N" once it counted the matches
    @browser.wait_until(page, '/\\?\\/[1-9]/.test(document.body.innerText)')
    %w[Enter Escape].each do |key|
      @browser.evaluate(page, "#{PROFILE_SEARCH_INPUT}.dispatchEvent(new KeyboardEvent('keydown', { key: '#{key}' })), true")
      @browser.evaluate(page, Viewer::TWO_FRAMES)
    end
    @browser.wait_until(page, PROFILE_SELECTED_STACK)
  end

  # The flame chart's keys, in turn, each given two frames to take effect
  # (each moves the viewport from where the last one left it).
  def press(page, *keys)
    keys.each do |key|
      @browser.evaluate(page, "window.dispatchEvent(new KeyboardEvent('keydown', { key: #{key.to_json} })), true")
      @browser.evaluate(page, Viewer::TWO_FRAMES)
    end
  end

  # The time the tooltip of the frame under the mouse gives ("4.14s (83%)
  # PostsController#slow": "4.14s") if it names name, or null.
  def tooltip_time(page, name)
    @browser.wait_until(page, <<~JS)
      (() => {
        const line = document.body.innerText.split('\\n')
          .find(l => /^\\S+ \\(\\d+%\\) /.test(l) && l.endsWith(') ' + #{name.to_json}));
        return line ? line.split(' ')[0] : null;
      })()
    JS
  end

  it "shows a Puma thread's requests in its flame chart: the action's stack, Puma's and Rails' frames (the picture)" do
    pid, port = start_puma
    wrk = start_wrk(port)
    sleep 1 # the app warm, the pool's threads all busy
    path = File.join(@shots, 'rails.speedscope.json')
    FileUtils.rm_f(path)
    r = rbtrace('-p', pid, '--profile', '--duration', '5', '--format', 'speedscope', '-o', path, timeout: 60)
    expect(r.exitstatus).to eq(0), r.stderr
    stop_wrk(wrk)

    doc = JSON.parse(File.read(path))
    names = doc['profiles'].map { |prof| prof['name'] }
    pool = names.each_index.select { |i| names[i].match?(/\AThread t\d+ puma srv tp 00[1-4]\z/) }
    expect(pool.size).to eq(4), names.inspect
    # The pool thread in the action the longest: the one the picture shows.
    shown = pool.max_by { |i| sampled(doc, i).names.count { |s| s.include?(PROFILE_ACTION) } }
    profile = sampled(doc, shown)
    expect(profile.names.flatten).to include(PROFILE_ACTION), "no sample of #{names[shown]} in #{PROFILE_ACTION}"

    @server = StaticServer.new('/speedscope' => @release, '/traces' => @shots)
    @browser = Chromium.new(height: PROFILE_HEIGHT)
    page = @browser.open(Viewer.speedscope_url(@server, @server.url("/traces/#{File.basename(path)}"),
                                               view: 'left-heavy'))
    @browser.wait_until(page, "document.body && document.body.innerText.includes('Left Heavy') && " \
                              "document.querySelector('canvas') !== null")
    # n goes to the next profile (speedscope's shortcut), as in viewer_spec.rb:
    # one at a time, each seen in the toolbar ("Thread t2 (2/11)")
    shown.times do |i|
      @browser.evaluate(page, "window.dispatchEvent(new KeyboardEvent('keypress', { key: 'n' })), true")
      @browser.wait_until(page, "document.body.innerText.includes(#{"#{names[i + 1]} (#{i + 2}/#{names.size})".to_json})")
    end
    # The new profile's chart laid out (its first frame sets its viewport,
    # which the search's zoom below must come after).
    @browser.evaluate(page, Viewer::TWO_FRAMES)

    # The detail view: from the thread's root down to the action, as one of
    # the thread's samples has it (speedscope read the file's stacks, root
    # first), Puma's and Rails' frames on the way.
    stack = select_frame(page, PROFILE_ACTION).reverse
    expect(stack.last).to eq(PROFILE_ACTION)
    sample = profile.names.index { |s| s.take(stack.size) == stack }
    expect(sample).not_to be_nil, "speedscope shows #{stack}: no sample of #{names[shown]} starts so"
    expect(stack).to include(*PROFILE_CALLERS)
    # The search zoomed to the action: it fills the chart's second row (the
    # first is under the time axis).
    chart = @browser.evaluate(page, "(r => [r.left, r.top, r.width])(Array.from(document.querySelectorAll('canvas'))" \
                                    '.pop().getBoundingClientRect())')
    @browser.mouse_move(page, chart[0] + (chart[2] / 2), chart[1] + 20 + 10)
    tooltip_time(page, PROFILE_ACTION)

    # The whole thread's width (0), PROFILE_ROWS_ABOVE of the callers above
    # the action (each ArrowUp goes 5 rows up).
    press(page, '0', *Array.new(PROFILE_ROWS_ABOVE / 5, 'ArrowUp'))
    # The chart: the action drawn where the file puts it in a Left Heavy
    # view, its time the weight of the samples under it. The mouse on it
    # shows its tooltip, which the picture keeps.
    start, weight = left_heavy_span(profile, profile.ids[sample].take(stack.size))
    total = profile.weights.sum
    row = [stack.size - 1, PROFILE_ROWS_ABOVE].min + 1 # below the time axis' row
    @browser.mouse_move(page, chart[0] + (chart[2] * (start + (weight / 4)) / total), chart[1] + (row * 20) + 10)
    time = tooltip_time(page, PROFILE_ACTION)
    expect(Viewer.sandwich_value(time)).to be_within(weight * 1000 * 0.01).of(weight * 1000),
                                           "the tooltip says #{time}, the file #{weight} ms"

    @browser.evaluate(page, Viewer::TWO_FRAMES)
    png = @browser.screenshot(page)
    expect(Viewer.png_size(png)).to eq([1200, PROFILE_HEIGHT])
    expect(png.bytesize).to be < 200_000
    shot = File.join(@shots, 'profile-speedscope.png')
    File.binwrite(shot, png)
    if ENV['RBTRACE_UPDATE_SCREENSHOT'] == '1'
      FileUtils.cp(shot, File.join(RBTraceSpec::ROOT, 'docs', 'images', 'profile-speedscope.png'))
    end
  end
end
