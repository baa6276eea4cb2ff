# Shared helpers for the viewer spec (spec/viewer, `rake spec:viewer`, run
# by script/test's 3.1 leg): speedscope, the npm package installed by
# script/setup-viewer, served with the trace files from 127.0.0.1
# (StaticServer) and opened in headless Chromium (Chromium, over the
# DevTools protocol).
require_relative '../spec_helper'
require_relative 'static_server'
require_relative 'chromium'
require 'uri'

module Viewer
  # Pinned with script/setup-viewer (speedscope_version): the page's layout
  # read here (the sandwich view's table, the view tabs) is this version's.
  SPEEDSCOPE_VERSION = '1.25.0'.freeze

  module_function

  # speedscope's built page (dist/release), wherever script/setup-viewer put
  # it; raises, saying what to run, when it is nowhere.
  def speedscope_release
    candidates = [ENV.fetch('RBTRACE_SPEEDSCOPE_DIR', nil), "/var/cache/rbtrace/speedscope-#{SPEEDSCOPE_VERSION}",
                  File.join(RBTraceSpec::ROOT, 'tmp', "speedscope-#{SPEEDSCOPE_VERSION}")].compact
    candidates.each do |dir|
      release = File.join(dir, 'node_modules', 'speedscope', 'dist', 'release')
      return release if File.file?(File.join(release, 'index.html')) && installed_version(dir) == SPEEDSCOPE_VERSION
    end
    raise "speedscope #{SPEEDSCOPE_VERSION} is not installed in any of #{candidates.join(', ')}: " \
          'run bash script/setup-viewer (it installs it, and Chromium)'
  end

  def installed_version(dir)
    JSON.parse(File.read(File.join(dir, 'node_modules', 'speedscope', 'package.json')))['version']
  rescue Errno::ENOENT, JSON::ParserError
    nil
  end

  # speedscope's address that loads the profile at profile_url in view
  # (time-ordered, left-heavy or sandwich), as its README documents:
  # #profileURL=<URL-encoded address>; view= is read by its hash parser.
  def speedscope_url(server, profile_url, view:)
    server.url("/speedscope/index.html#profileURL=#{URI.encode_www_form_component(profile_url)}&view=#{view}")
  end

  # The rows of speedscope's sandwich view's table, as [total, self, symbol
  # name] texts (e.g. ["5.45ms (100%)", "4.53ms (83%)", "Shop#checkout"]),
  # or null before the table is there.
  SANDWICH_ROWS = <<~JS.freeze
    (() => {
      const rows = Array.from(document.querySelectorAll('table tr'))
        .map(tr => Array.from(tr.cells).map(td => td.textContent.trim()))
        .filter(cells => cells.length === 3 && /^[0-9]/.test(cells[0]));
      return rows.length > 0 ? rows : null;
    })()
  JS

  # A sandwich view's time ("4.53ms (83%)", "918.51µs (17%)") in
  # microseconds; a unitless weight ("169,836 (46%)"), as it is.
  def sandwich_value(text)
    number, unit = text.match(/\A([0-9.,]+)(ns|µs|ms|s)?/).captures
    number.delete(',').to_f * { 'ns' => 0.001, 'µs' => 1, 'ms' => 1000, 's' => 1_000_000, nil => 1 }.fetch(unit)
  end

  # Self time per method of a folded file: the weights of the stacks that
  # end in it.
  def folded_self_times(lines)
    lines.each_with_object(Hash.new(0)) do |line, self_times|
      stack, weight = line.split
      self_times[stack.split(';').last] += Integer(weight)
    end
  end

  # Self time per method (microseconds) of a chrome trace's complete (X)
  # events: each one's duration less its children's, nested by time on
  # each thread.
  def chrome_self_times(events)
    self_times = Hash.new(0.0)
    events.select { |e| e['ph'] == 'X' }.group_by { |e| [e['pid'], e['tid']] }.each_value do |thread|
      open = []
      thread.sort_by { |e| [e['ts'], -e['dur']] }.each do |event|
        open.pop while open.any? && event['ts'] >= open.last['ts'] + open.last['dur']
        self_times[open.last['name']] -= event['dur'] if open.any?
        self_times[event['name']] += event['dur']
        open << event
      end
    end
    self_times
  end

  # Waits for two frames to be drawn, so that a screenshot shows the canvas.
  TWO_FRAMES = 'new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))'.freeze

  # PNG's width and height, from its IHDR chunk; nil if data is no PNG.
  def png_size(data)
    return unless data.start_with?("\x89PNG\r\n\x1A\n".b) && data.byteslice(12, 4) == 'IHDR'

    data.byteslice(16, 8).unpack('NN')
  end
end
