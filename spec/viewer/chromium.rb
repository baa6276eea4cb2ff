# Headless Chromium (Debian's `chromium`) driven by the Chrome DevTools
# Protocol over --remote-debugging-pipe: Chromium reads commands on fd 3 and
# writes answers and events on fd 4, each message a JSON text ended by a NUL
# byte. No WebDriver, no websocket, no gem: two pipes and the json library.
#
# Chromium runs in a process group of its own (its renderer, GPU and utility
# processes are its children) with a profile in a temporary directory; #quit
# kills the whole group and removes the profile, and the spec calls it when
# its example ends, pass or fail.
require 'json'
require 'tmpdir'
require 'fileutils'
require 'timeout'
require 'io/nonblock'

class Chromium
  class Error < StandardError; end

  BINARY = ENV.fetch('RBTRACE_CHROMIUM', '/usr/bin/chromium')

  FLAGS = [
    '--headless', '--remote-debugging-pipe',
    '--no-first-run', '--no-default-browser-check', '--disable-extensions', '--disable-sync',
    '--disable-background-networking', '--disable-component-update', '--disable-default-apps',
    '--mute-audio', '--hide-scrollbars', '--password-store=basic',
    # /dev/shm is 64 MB in many containers: Chromium's shared memory goes to
    # /tmp instead, or its renderer crashes on a large page.
    '--disable-dev-shm-usage',
    # speedscope draws its flame chart with WebGL; with no GPU here, WebGL
    # runs on SwiftShader, which Chromium now enables only when asked.
    '--use-angle=swiftshader', '--enable-unsafe-swiftshader'
  ].freeze

  attr_reader :pid

  def initialize(width: 1200, height: 320)
    @profile = Dir.mktmpdir('rbtrace-chromium-')
    @log = File.join(@profile, 'chromium.log')
    commands_r, @commands = IO.pipe
    @answers, answers_w = IO.pipe
    # Ruby makes its pipes non-blocking; Chromium reads and writes them as
    # blocking fds and takes EAGAIN for the end of the connection.
    commands_r.nonblock = false
    answers_w.nonblock = false
    flags = [*FLAGS, "--user-data-dir=#{@profile}", "--window-size=#{width},#{height}"]
    # Chromium's sandbox needs user namespaces a root process may not use
    # (and Chromium refuses to start as root without this flag): the specs
    # run as root in CI. The pages it loads are speedscope's and our traces'.
    flags << '--no-sandbox' if Process.uid.zero?
    @pid = Process.spawn(BINARY, *flags, 'about:blank', 3 => commands_r, 4 => answers_w,
                                                        in: :close, out: @log, err: @log, pgroup: true)
    commands_r.close
    answers_w.close
    @next_id = 0
    @buffer = String.new(encoding: Encoding::BINARY)
    @width = width
    @height = height
  end

  # Opens url in a new page; returns the page's session id.
  def open(url)
    target = command('Target.createTarget', { url: 'about:blank' })['targetId']
    session = command('Target.attachToTarget', { targetId: target, flatten: true })['sessionId']
    command('Emulation.setDeviceMetricsOverride', { width: @width, height: @height, deviceScaleFactor: 1,
                                                    mobile: false }, session: session)
    command('Page.enable', {}, session: session)
    command('Page.navigate', { url: url }, session: session)
    session
  end

  # The value of a JavaScript expression in the page (awaited if a promise).
  def evaluate(session, expression)
    result = command('Runtime.evaluate', { expression: expression, returnByValue: true, awaitPromise: true },
                     session: session)
    raise Error, "JavaScript threw in the page: #{result['exceptionDetails'].to_json}" if result['exceptionDetails']

    result.dig('result', 'value')
  end

  # Evaluates expression until it is truthy; returns its value, or raises
  # with the last value seen after timeout seconds.
  def wait_until(session, expression, timeout: 30)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      value = evaluate(session, expression)
      return value if value

      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise Error, "the page never satisfied #{expression} within #{timeout} s; its text: " \
                     "#{evaluate(session, 'document.body && document.body.innerText').inspect[0, 2000]}"
      end
      sleep 0.1
    end
  end

  # Moves the mouse to x, y (CSS pixels from the page's top left), as a
  # user's would: the page gets its mousemove and hover events.
  def mouse_move(session, x, y)
    command('Input.dispatchMouseEvent', { type: 'mouseMoved', x: x, y: y }, session: session)
    nil
  end

  # A PNG of the page as it is shown.
  def screenshot(session)
    data = command('Page.captureScreenshot', { format: 'png' }, session: session)['data']
    data.unpack1('m0')
  end

  def log = File.exist?(@log) ? File.read(@log) : ''

  def quit
    begin
      Process.kill(:KILL, -@pid)
    rescue Errno::ESRCH
      nil
    end
    begin
      Process.wait(@pid)
    rescue Errno::ECHILD
      nil
    end
    [@commands, @answers].each { |io| io.close unless io.closed? }
    FileUtils.rm_rf(@profile)
  end

  private

  # Sends one command and waits for its answer (events seen meanwhile are
  # dropped: nothing here needs them); returns the answer's result or raises
  # its error.
  def command(method, params = {}, session: nil, timeout: 30)
    id = (@next_id += 1)
    message = { id: id, method: method, params: params }
    message[:sessionId] = session if session
    @commands.write(message.to_json, "\0")
    Timeout.timeout(timeout, Error, "Chromium did not answer #{method} within #{timeout} s; its log: #{log}") do
      loop do
        answer = read_message
        next unless answer['id'] == id # an event, or an answer to a command that timed out
        raise Error, "Chromium refused #{method}: #{answer['error'].to_json}" if answer['error']

        return answer['result']
      end
    end
  end

  def read_message
    until (nul = @buffer.index("\0"))
      chunk = @answers.readpartial(1 << 16)
      @buffer << chunk
    end
    JSON.parse(@buffer.slice!(0, nul + 1).chop.force_encoding(Encoding::UTF_8))
  rescue EOFError
    raise Error, "Chromium exited (pid #{@pid}); its log: #{log}"
  end
end
