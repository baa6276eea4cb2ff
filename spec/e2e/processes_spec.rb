require_relative '../spec_helper'
require 'pty'

# Naming the processes to trace: several pids at once (-p PID PID...),
# by command line (--ps PATTERN), by starting one (--exec CMD ARG...), and
# waiting before the attach (--wait SECS).
RSpec.describe 'choosing processes (-p PID..., --ps, --exec, --wait)' do
  def app_code(marker)
    <<~RUBY
      # #{marker}
      def work; sleep(0.05); end
      puts "ready"
      loop { work }
    RUBY
  end

  let(:marker) { "rbtrace_spec_#{Process.pid}_#{rand(1 << 30)}" }

  describe 'several pids' do
    let(:a) { start_target(app_code(marker)).ready }
    let(:b) { start_target(app_code(marker)).ready }

    it 'traces each, every line starting with its [PID], and detaches both on ^C' do
      c = start_client('-p', a.pid, b.pid, '-m', 'Object#work')
      c.wait_for(->(out) { [a, b].all? { |t| out.include?("[#{t.pid}] Object#work <") } })
      status = c.stop(:INT)
      expect(status.exitstatus).to eq(0)
      expect(c.stdout.lines).to all(match(/\A\[(#{a.pid}|#{b.pid})\] /))
      expect(c.stderr).to include("*** detached from process #{a.pid}", "*** detached from process #{b.pid}")
      expect([a, b]).to all(be_alive)
    end

    # stdout and stderr one file, as on a terminal: a status line of a
    # session starts a line of its own, after every line of its process
    # (the sessions' status lines came straight from them, the trace
    # through us: "*** detached from process A[A] ..." and A's backlog after).
    it 'status lines start lines of their own, after the lines of their process (stdout and stderr one file)' do
      busy = "Item = Struct.new(:a)\nputs 'ready'\nloop { 50.times { Item.new(1) }; sleep 0.001 }"
      w0 = start_target(busy).ready
      w1 = start_target(busy).ready
      rd, wr = IO.pipe
      pid = Process.spawn(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '-p', w0.pid.to_s, w1.pid.to_s, '-f',
                          out: wr, err: wr)
      wr.close
      text = +''
      begin
        Timeout.timeout(20) do
          text << rd.readpartial(65_536) until [w0, w1].all? { |t| text.include?("[#{t.pid}] ") } && text.size > 200_000
        end
        Process.kill(:INT, pid)
        Timeout.timeout(30) { loop { text << rd.readpartial(65_536) } }
      rescue EOFError
        nil
      ensure
        Process.kill(:KILL, pid) if (Process.wait(pid, Process::WNOHANG) rescue pid).nil?
        Process.wait(pid) rescue nil
        rd.close
      end
      lines = text.lines
      expect(lines.grep(/.\*\*\* /)).to eq([]) # a status line glued to a line before
      expect(lines.grep(/\*\*\* .*\[\d+\] /)).to eq([]) # a line glued to a status line
      [w0, w1].each do |t|
        detached = lines.index("*** detached from process #{t.pid}\n")
        expect(detached).not_to be_nil, text[-2000..]
        expect(lines[detached..].grep(/\A\[#{t.pid}\] /)).to eq([])
      end
      expect([w0, w1]).to all(be_alive)
    end

    it 'evaluates in each' do
      r = rbtrace('-p', a.pid, b.pid, '-e', 'Process.pid')
      expect(r.exitstatus).to eq(0)
      expect(r.stdout.lines).to contain_exactly("[#{a.pid}] >> Process.pid\n", "[#{a.pid}] => #{a.pid}\n",
                                                "[#{b.pid}] >> Process.pid\n", "[#{b.pid}] => #{b.pid}\n")
    end

    it 'writes one file per process with -o' do
      Dir.mktmpdir do |dir|
        out = File.join(dir, 'trace')
        r = rbtrace('-p', a.pid, b.pid, '-e', 'Process.pid', '-o', out)
        expect(r.exitstatus).to eq(0)
        expect(File.read("#{out}.#{a.pid}")).to eq(">> Process.pid\n=> #{a.pid}\n")
        expect(File.read("#{out}.#{b.pid}")).to eq(">> Process.pid\n=> #{b.pid}\n")
      end
    end

    it 'traces the others when one cannot be attached, and fails' do
      plain = start_target(app_code(marker), rbtrace: false).ready
      r = rbtrace('-p', a.pid, plain.pid, '-e', 'Process.pid')
      expect(r.exitstatus).to eq(1)
      expect(r.stdout).to include("[#{a.pid}] => #{a.pid}\n")
      expect(r.stderr).to include("process #{plain.pid}")
    end
  end

  describe '--ps PATTERN' do
    it 'traces the one process whose command line matches' do
      a = start_target(app_code(marker)).ready
      start_target(app_code('another'), rbtrace: true).ready
      r = rbtrace('--ps', marker, '-e', 'Process.pid')
      expect(r.exitstatus).to eq(0), r.stderr
      expect(r.stdout).to eq(">> Process.pid\n=> #{a.pid}\n")
      expect(r.stderr).to include("*** --ps #{marker}: process #{a.pid}")
    end

    it 'lists several matches and asks for a choice only on a terminal' do
      a = start_target(app_code(marker)).ready
      b = start_target(app_code(marker)).ready
      r = rbtrace('--ps', marker, '-e', 'Process.pid')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include("2 processes match '#{marker}'", a.pid.to_s, b.pid.to_s,
                                  'choose with -p PID')
      expect(r.stdout).to eq('')
    end

    it 'lets the user pick on a terminal' do
      a = start_target(app_code(marker)).ready
      b = start_target(app_code(marker)).ready
      pick = [a, b].min_by(&:pid) == a ? 2 : 1 # the list is in pid order: pick the larger pid
      chosen = [a, b].max_by(&:pid)
      output = +''
      PTY.spawn(RBTraceSpec::CLIENT, '--ps', marker, '-e', 'Process.pid') do |r, w, pid|
        Timeout.timeout(10) do
          output << r.readpartial(4096) until output.include?('trace which?')
          w.puts pick
          loop { output << r.readpartial(4096) }
        end
      rescue EOFError, Errno::EIO
        nil
      ensure
        Process.kill(:KILL, pid) rescue nil
        Process.wait(pid) rescue nil
      end
      expect(output).to include("=> #{chosen.pid}")
    end

    it 'says so when nothing matches, and when a match has not loaded rbtrace' do
      start_target(app_code(marker), rbtrace: false).ready
      r = rbtrace('--ps', marker, '-e', '1')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include("no process matching '#{marker}' has loaded rbtrace (1 matches but did not load it")
      r = rbtrace('--ps', '(unclosed', '-e', '1')
      expect(r.stderr).to include("--ps: bad pattern '(unclosed'")
      expect(r.stderr).to include('give an extended regular expression')
      expect(r.exitstatus).to eq(2) # a bad command line
    end
  end

  describe '--exec CMD ARG...' do
    let(:script) do
      path = File.join(Dir.tmpdir, "rbtrace-exec-#{Process.pid}-#{rand(1 << 30)}.rb")
      File.write(path, <<~'RUBY')
        class Early
          def go(n); n * 2; end
        end
        Early.new.go(1)
        3.times { |i| Early.new.go(i) }
        puts "done"
        exit 7
      RUBY
      path
    end

    after { FileUtils.rm_f(script) }

    it 'traces the program from its first call, and exits with its status' do
      r = rbtrace('-m', 'Early#go(n)', '--exec', 'ruby', script)
      expect(r.stdout.scan(/^Early#go\(n=(\d)\) <\d+\.\d{6}>$/).flatten).to eq(%w[1 0 1 2])
      expect(r.stdout).to include("done\n")
      expect(r.exitstatus).to eq(7)
    end

    it 'passes the arguments after CMD to it, options included' do
      r = rbtrace('-e', 'ARGV', '--exec', 'ruby', '-e', 'sleep 0.2', '--', '-f', 'x')
      expect(r.stdout).to include(%(=> ["-f", "x"]))
    end

    it 'says so when the program is not a Ruby program or does not exist' do
      r = rbtrace('-f', '--exec', 'true')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include('--exec: true exited before rbtrace was ready in it')
      r = rbtrace('-f', '--exec', '/nonexistent/program')
      expect(r.exitstatus).to eq(1)
      expect(r.stderr).to include('cannot run /nonexistent/program')
    end
  end

  it 'waits --wait SECS before attaching' do
    a = start_target(app_code(marker)).ready
    r = rbtrace('-p', a.pid, '--wait', '0.3', '-e', 'Process.pid')
    expect(r.stdout).to eq(">> Process.pid\n=> #{a.pid}\n")
  end
end
