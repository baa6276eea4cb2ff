require_relative '../spec_helper'

# Every byte the app sends is shown escaped (ext/rbtrace/cli/escape.h): a
# method name, a trace expression's value, an -e or -i result, a report, an
# exception's message, an error echoed by the app, a --ps command line:
# none may write an escape sequence to the tracer's terminal. Plain UTF-8
# shows as it is.
RSpec.describe 'escaping what the app sends' do
  EVIL = "x\e]0;PWNED\a\e[2J".freeze
  EVIL_SHOWN = 'x\\x1b]0;PWNED\\x07\\x1b[2J'.freeze

  APP_ESCAPING = <<~'RUBY'.freeze
    EVIL = "x\e]0;PWNED\a\e[2J"
    class Evil
      def inspect = "evil\e[2J\a\r\\"
    end
    class Probe
      define_method(EVIL) { |v| v }
      def greet(s) = s
      # a thread waits in a file of this name, for --backtraces
      define_method("#{EVIL}wait") { eval("sleep", nil, "#{EVIL}.rb") }
    end
    $evil = Evil.new
    Thread.new { Probe.new.send("#{EVIL}wait") }
    puts "ready"
    loop do
      probe = Probe.new
      probe.send(EVIL, 1)
      probe.greet("h\u00e9llo \u65e5\u672c")
      begin
        raise ArgumentError, "boom\e]0;PWNED\a"
      rescue ArgumentError
      end
      sleep 0.05
    end
  RUBY

  let(:app) { start_target(APP_ESCAPING).ready }

  # No byte that a terminal obeys: C0 controls (but newlines where the
  # output has lines of its own), DEL, C1 controls.
  def expect_no_control(text, newlines: true)
    bytes = text.b
    forbidden = newlines ? /[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]/n : /[\x00-\x1f\x7f]|\xc2[\x80-\x9f]/n
    expect(bytes).not_to match(forbidden), "raw control bytes in #{bytes.inspect}"
  end

  it 'shows method names and trace expression values escaped, plain UTF-8 as it is, in -o files too' do
    out = File.join(Dir.tmpdir, "rbtrace-escaping-#{Process.pid}.txt")
    r = trace(app, '-m', "Probe##{EVIL}", 'Probe#greet(s, $evil)', '-o', out) do
      Timeout.timeout(10) { sleep 0.05 until File.exist?(out) && File.read(out).include?('Probe#greet(') }
    end
    text = File.read(out)
    expect_no_control(text)
    expect_no_control(r.stderr)
    expect(text).to include("Probe##{EVIL_SHOWN} <")
    expect(text.b).to include(%(Probe#greet(s="h\u00e9llo \u65e5\u672c", $evil=evil\\x1b[2J\\x07\\r\\\\) <).b)
  ensure
    FileUtils.rm_f(out) if out
  end

  it 'shows an exception message escaped (--raise), one line each' do
    out = trace(app, '--raise', until_output: /raise ArgumentError/).stdout
    expect_no_control(out)
    expect(out).to match(/^raise ArgumentError: boom\\x1b\]0;PWNED\\x07 at -e:\d+$/)
  end

  it 'shows an -e result with control characters escaped, and says so; plain results as they are' do
    r = rbtrace('-p', app.pid, '-e', '$evil')
    expect_no_control(r.stdout)
    expect(r.stdout).to eq(">> $evil\n=> evil\\x1b[2J\\x07\\r\\\\\n")
    expect(r.stderr).to include('control characters or invalid UTF-8: shown escaped')
    # Ruby's own inspect, backslashes and all, and UTF-8: byte for byte
    r = rbtrace('-p', app.pid, '-e', %("a\\nb\\e" + "h\u00e9llo"))
    expect(r.stdout.b).to eq(%(>> "a\\nb\\e" + "h\u00e9llo"\n=> "a\\nb\\eh\u00e9llo"\n).b)
    expect(r.stderr).not_to include('shown escaped')
  end

  it 'keeps the lines of a report and escapes the rest (--backtraces)' do
    r = rbtrace('-p', app.pid, '--backtraces')
    expect(r).to be_success
    expect_no_control(r.stdout)
    expect(r.stdout).to include("#{EVIL_SHOWN}.rb:1:in")
    expect(r.stdout.lines.size).to be > 3
    expect(r.stderr).to include('shown escaped')
  end

  it 'shows -i results escaped' do
    input, writer = IO.pipe
    path = File.join(Dir.tmpdir, "rbtrace-escaping-repl-#{Process.pid}")
    pid = Process.spawn(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '-p', app.pid.to_s, '-i',
                        in: input, out: "#{path}.out", err: "#{path}.err")
    input.close
    writer.write("$evil\nProbe.instance_methods(false).grep(/wait/).first\n")
    writer.close
    Timeout.timeout(20) { Process.wait(pid) }
    pid = nil
    out = File.read("#{path}.out")
    expect_no_control(out)
    expect(out).to include("=> evil\\x1b[2J\\x07\\r\\\\\n")
    expect(out).to include(%(=> :"x\\e]0;PWNED\\a\\e[2Jwait"\n))
  ensure
    if pid
      Process.kill(:KILL, pid) rescue nil
      Process.wait(pid) rescue nil
    end
    FileUtils.rm_f(["#{path}.out", "#{path}.err"]) if path
  end

  it "escapes an error the app echoes (a selector's name)" do
    r = rbtrace('-p', app.pid, '-m', "No\e[2JSuch#x")
    expect(r.exitstatus).to eq(1) # nothing to trace
    expect_no_control(r.stderr)
    expect(r.stderr).to match(/^\*\*\* error: .*No\\x1b\[2JSuch/)
  end

  it 'escapes command lines in the --ps listing' do
    code = "$0 = \"escps-#{Process.pid} \\e]0;PWNED\\a\"\n" + APP_ESCAPING
    start_target(code).ready
    r = rbtrace('--ps', "escps-#{Process.pid}", '-e', '1')
    expect_no_control(r.stderr)
    expect(r.stderr).to match(/^\*\*\* --ps escps-\d+: process \d+ \(escps-\d+ \\x1b\]0;PWNED\\x07/)
  end
end
