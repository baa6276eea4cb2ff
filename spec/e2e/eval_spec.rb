require_relative '../spec_helper'

# rbtrace -p PID -e CODE
RSpec.describe 'eval (-e)' do
  let(:app) do
    start_target(<<~'RUBY').ready
      $counter = 0
      puts "ready"
      loop { $counter += 1; puts "tick #{$counter}"; sleep 0.05 }
    RUBY
  end

  it 'prints the code and the inspected result, on stdout only' do
    r = rbtrace('-p', app.pid, '-e', '[1 + 1, $counter.class]')
    expect(r.stdout).to eq(">> [1 + 1, $counter.class]\n=> [2, Integer]\n")
    expect(r.stderr).to include("*** attached to process #{app.pid}")
    expect(r).to be_success
  end

  it "reports an exception's class and message, and the app lives on" do
    r = rbtrace('-p', app.pid, '-e', 'raise ArgumentError, "boom"')
    expect(r.stdout).to include('ArgumentError: boom')
    expect(r).not_to be_success
    expect(app).to be_alive
    app.wait_for(/tick/)
  end

  it 'reports a syntax error without running anything' do
    r = rbtrace('-p', app.pid, '-e', 'def oops(')
    expect(r.stderr).to match(/syntax error/)
    expect(r).not_to be_success
    expect(app).to be_alive
  end

  it 'runs code longer than one queue message (70 KiB)' do
    code = "x = 0\n#{"x += 1\n" * 10_000}x"
    expect(code.bytesize).to be > 64 * 1024
    r = rbtrace('-p', app.pid, '-e', code)
    expect(r.stdout).to end_with("=> 10000\n")
  end

  it 'returns results of any size' do
    r = rbtrace('-p', app.pid, '-e', '"a" * 3_000_000')
    expect(r.stdout.bytesize).to be > 3_000_000
    expect(r).to be_success
  end

  it 'stops code that never returns at the timeout; the app is not hung' do
    r = rbtrace('-p', app.pid, '--timeout', '1', '-e', 'loop { }')
    expect(r.stderr).to match(/did not finish within 1/)
    expect(r.stdout).to eq(">> loop { }\n") # which code it was, as a result would show it
    expect(r).not_to be_success
    before = app.drain.size
    sleep 0.3
    expect(app.drain.size).to be > before
    # and the process still answers
    expect(rbtrace('-p', app.pid, '-e', '1').stdout).to eq(">> 1\n=> 1\n")
  end

  it 'runs the heap dump snippet people use' do
    file = File.join(Dir.tmpdir, "rbtrace-heap-#{Process.pid}.json")
    FileUtils.rm_f(file)
    code = %(Thread.new{GC.start;require "objspace";io=File.open("#{file}","w");ObjectSpace.dump_all(output: io);io.close})
    r = rbtrace('-p', app.pid, '-e', code)
    expect(r.stdout).to match(/=> #<Thread:0x\h+/)
    # complete once its last byte (of a file of any size) is the closing newline
    Timeout.timeout(20) do
      sleep 0.1 until File.exist?(file) && File.size(file) > 1000 &&
                      File.open(file) { |f| f.seek(-1, IO::SEEK_END); f.read(1) } == "\n"
    end
    first = JSON.parse(File.foreach(file).first)
    expect(first).to include('type')
  ensure
    FileUtils.rm_f(file)
  end
end

require 'json'
