require_relative '../spec_helper'
require 'pty'

# rbtrace -p PID -i: a REPL, driven through a pipe (no prompts, no editor)
# and, for line editing and history, through a pseudo-terminal.
RSpec.describe 'interactive (-i)' do
  # The client with its stdin a pipe we type into.
  class ReplClient < RBTraceSpec::Client
    def initialize(args, env: {}) # rubocop:disable Lint/MissingSuper -- started here, its stdin a pipe
      @out_path = File.join(Dir.tmpdir, "rbtrace-spec-repl-#{Process.pid}-#{object_id}")
      input, @input = IO.pipe
      @pid = Process.spawn(env, RBTraceSpec::CLIENT, *args.map(&:to_s),
                           in: input, out: "#{@out_path}.out", err: "#{@out_path}.err")
      input.close
    end

    def type(text)
      @input.write(text)
      @input.flush
    end

    def close_input
      @input.close unless @input.closed?
    end

    def kill
      close_input
      super
    end
  end

  # A client on a pseudo-terminal: what it shows, keys typed into it.
  class PtyClient
    attr_reader :pid, :output

    # program: the client, or a wrapper that runs it (args are then its own).
    def initialize(args, env, program = RBTraceSpec::CLIENT)
      @read, @write, @pid = PTY.spawn(env, program, *args.map(&:to_s))
      @output = +''
    end

    def type(keys)
      @write.write(keys)
    rescue Errno::EIO
      nil # the client is gone: the next wait says what it showed
    end

    # Reads what the terminal shows until it matches pattern.
    def wait_for(pattern, timeout: 15)
      Timeout.timeout(timeout) do
        until pattern.match?(@output)
          IO.select([@read], nil, nil, 0.1)
          chunk = @read.read_nonblock(4096, exception: false)
          raise EOFError if chunk.nil?

          @output << chunk if chunk.is_a?(String)
        end
      end
    rescue Timeout::Error, EOFError, Errno::EIO
      raise "the terminal never showed #{pattern.inspect}: #{@output.inspect}"
    end

    def wait(timeout: 15)
      Timeout.timeout(timeout) { Process.wait(@pid) }
      status = $?
      @pid = nil
      status
    end

    def kill
      if @pid
        Process.kill(:KILL, @pid) rescue nil
        Process.wait(@pid) rescue nil
      end
      [@read, @write].each { |io| io.close unless io.closed? }
    end
  end

  let(:app) do
    start_target(<<~'RUBY').ready
      $counter = 0
      puts "ready"
      loop { $counter += 1; puts "tick #{$counter}"; sleep 0.05 }
    RUBY
  end

  def start_repl(*args)
    client = ReplClient.new(['-p', app.pid, '-i', *args])
    @spec_processes << client
    client
  end

  it 'evaluates each entry in the process, and what one defines the next one sees' do
    repl = start_repl
    repl.attached
    repl.type("x = 40\n")
    repl.wait_for(/^=> 40$/)
    repl.type("x + 2\n$shared = [Process.pid, :here]\n$shared.last\n")
    repl.wait_for(/^=> :here$/)
    repl.close_input
    expect(repl.wait.exitstatus).to eq(0)
    expect(repl.stdout).to eq("=> 40\n=> 42\n=> [#{app.pid}, :here]\n=> :here\n")
  end

  it 'shows an exception and goes on' do
    repl = start_repl
    repl.type(%(raise ArgumentError, "boom"\n1 + 1\n))
    repl.wait_for(/^=> 2$/)
    expect(repl.stdout).to start_with("ArgumentError: boom\n\tfrom (rbtrace eval):1")
    expect(repl.stdout).not_to include('=> ArgumentError')
    expect(app).to be_alive
  end

  it 'reads more lines while the entry is incomplete, then runs it once' do
    repl = start_repl
    repl.type("def f\n  $runs = ($runs || 0) + 1\n  1\n")
    repl.type("end\nf\n[1,\n 2]\n$runs\n")
    repl.wait_for(/^=> \[1, 2\]\n=> 1$/)
    expect(repl.stdout).to eq("=> :f\n=> 1\n=> [1, 2]\n=> 1\n")
    expect(repl.stderr).not_to match(/syntax/)
  end

  it 'reports any other syntax error, drops the entry and goes on' do
    repl = start_repl
    repl.type("1 +* 2\n3\n")
    repl.wait_for(/^=> 3$/)
    # parse.y says it on one line; prism (Ruby 3.4+) over several, the
    # entry quoted and each error under it.
    expect(repl.stdout).to match(/\A\(rbtrace eval\):1: .*unexpected/m)
    expect(repl.stdout).not_to include('=> 2')
  end

  # Ruby 3.4's parser (prism) words an unclosed hash the same whether the
  # input ended or a wrong bracket closed it (cli/unfinished.c).
  it 'reads more lines of an unclosed hash literal or %w list, but not of a broken one' do
    repl = start_repl
    repl.type("h = {a: 1,\n b: 2}\n%w(x\n y)\n{a: 1 2}\n[{a: 1]\nfoo(a: {b: 1)\n:done\n")
    repl.wait_for(/^=> :done$/)
    expect(repl.stdout).to start_with("=> #{{ a: 1, b: 2 }.inspect}\n=> [\"x\", \"y\"]\n(rbtrace eval):1: ")
    expect(repl.stdout.scan(/^\(rbtrace eval\):1: /).size).to eq(3), repl.stdout
    expect(repl.stdout).to end_with("\n=> :done\n")
  end

  it 'detaches at the end of input; the app runs on and can be attached again' do
    repl = start_repl
    repl.type("1\n")
    repl.wait_for(/^=> 1$/)
    repl.close_input
    expect(repl.wait.exitstatus).to eq(0)
    expect(repl.stderr).to include("*** detached from process #{app.pid}")
    expect(app).to be_alive
    expect(rbtrace('-p', app.pid, '-e', '$counter.class').stdout).to end_with("=> Integer\n")
  end

  it 'says so when the input ends inside an unfinished entry, and runs nothing' do
    repl = start_repl
    repl.type("def never_defined\n")
    repl.close_input
    expect(repl.wait.exitstatus).to eq(0)
    expect(repl.stderr).to include('the input ended inside an unfinished entry')
    expect(rbtrace('-p', app.pid, '-e', 'defined?(never_defined).inspect').stdout)
      .to end_with("=> \"nil\"\n")
  end

  it 'on ^C while an entry runs, says the code goes on, and returns to the prompt' do
    repl = start_repl('--timeout', '10')
    repl.type("1\n")
    repl.wait_for(/^=> 1$/)
    repl.type("sleep 1.5; $late = :done\n")
    sleep 0.3 # the entry is running in the app
    Process.kill(:INT, repl.pid)
    repl.wait_for(/the code goes on in process #{app.pid}/, stream: :stderr)
    repl.type("$late\n")
    repl.wait_for(/^=> :done$/)
    expect(repl.stdout).to eq("=> 1\n=> :done\n")
    expect(repl).not_to be_exited
  end

  it 'says when the process exited, and exits with 3' do
    repl = start_repl
    repl.type("1\n")
    repl.wait_for(/^=> 1$/)
    app.kill
    repl.type("2\n")
    expect(repl.wait.exitstatus).to eq(3)
    expect(repl.stderr).to include("*** process #{app.pid} exited")
  end

  it 'cannot be combined with -e, -m or -f' do
    [%w[-e 1], %w[-m String#size], %w[-f]].each do |other|
      r = rbtrace('-p', app.pid, '-i', *other)
      expect(r.exitstatus).to eq(2)
      expect(r.stderr).to include('cannot be combined')
    end
  end

  context 'on a terminal' do
    before do
      help = rbtrace('--help').stdout
      skip 'this client was built without libedit' unless help.include?('libedit')
    end

    it 'edits lines: ^C clears the line, history recalls entries and is kept 0600' do
      home = Dir.mktmpdir('rbtrace-home')
      pty = PtyClient.new(['-p', app.pid, '-i'], 'HOME' => home, 'TERM' => 'xterm')
      @spec_processes << pty
      prompt = Regexp.escape("rbtrace(#{app.pid})> ")
      # Each key goes in once the editor shows its prompt again: keys typed
      # sooner reach a terminal the editor does not hold yet.
      pty.wait_for(/#{prompt}\z/)
      pty.type("$n = 41\r")
      pty.wait_for(/=> 41\r\n#{prompt}\z/)
      pty.type('not_a_method_anywhere')
      pty.wait_for(/not_a_method_anywhere\z/)
      pty.type("\x03")
      # The terminal may echo the ^C itself when it comes just as the editor
      # takes the terminal; either way the line is dropped (no NameError below).
      pty.wait_for(/not_a_method_anywhere(\^C)?\r?\n#{prompt}\z/)
      pty.type("$n + 1\r")
      pty.wait_for(/=> 42\r\n#{prompt}\z/)
      pty.type("\e[A\e[A\r") # up, up: "$n = 41" again
      pty.wait_for(/=> 42.*=> 41\r\n#{prompt}\z/m)
      pty.type("def g\r")
      pty.wait_for(/rbtrace\(#{app.pid}\)\* \z/)
      pty.type("7\r")
      pty.wait_for(/7\r\nrbtrace\(#{app.pid}\)\* \z/)
      pty.type("end\r")
      pty.wait_for(/=> :g\r\n#{prompt}\z/)
      pty.type("g\r")
      pty.wait_for(/=> 7\r\n#{prompt}\z/)
      pty.type("\x04")
      pty.wait_for(/\*\*\* detached from process #{app.pid}/)
      expect(pty.wait.exitstatus).to eq(0)
      expect(pty.output).not_to match(/NameError/)
      history = File.join(home, '.rbtrace_history')
      expect(File.stat(history).mode & 0o777).to eq(0o600)
      expect(File.read(history)).to include('$n\\040+\\0401')
    ensure
      FileUtils.rm_rf(home) if home
    end

    # Types one entry and ^D into a client on a terminal with HOME home;
    # returns what the terminal showed.
    def repl_session(home, entry)
      pty = PtyClient.new(['-p', app.pid, '-i'], 'HOME' => home, 'TERM' => 'xterm')
      @spec_processes << pty
      prompt = Regexp.escape("rbtrace(#{app.pid})> ")
      pty.wait_for(/#{prompt}\z/)
      pty.type("#{entry}\r")
      pty.wait_for(/=> .*\r\n#{prompt}\z/)
      pty.type("\x04")
      pty.wait_for(/\*\*\* detached from process #{app.pid}/)
      expect(pty.wait.exitstatus).to eq(0)
      pty.output
    end

    it 'keeps the history in a plain file: read back by the next session' do
      home = Dir.mktmpdir('rbtrace-home')
      history = File.join(home, '.rbtrace_history')
      repl_session(home, '$h = "one two\\\\"')
      # libedit's own format, as its write_history writes it
      expect(File.read(history)).to eq("_HiStOrY_V2_\n$h\\040=\\040\"one\\040two\\134\\134\"\n")
      expect(File.stat(history).mode & 0o777).to eq(0o600)
      # an existing file keeps its mode; the next session recalls the entry
      File.chmod(0o640, history)
      pty = PtyClient.new(['-p', app.pid, '-i'], 'HOME' => home, 'TERM' => 'xterm')
      @spec_processes << pty
      pty.wait_for(/> \z/)
      pty.type("\e[A\r")
      pty.wait_for(/=> "one two\\\\"\r\n.*> \z/m)
      pty.type("\x04")
      expect(pty.wait.exitstatus).to eq(0)
      expect(File.stat(history).mode & 0o777).to eq(0o640)
    ensure
      FileUtils.rm_rf(home) if home
    end

    it 'never follows a symbolic link: the file it points to is not changed, and it says why' do
      home = Dir.mktmpdir('rbtrace-home')
      victim = File.join(Dir.mktmpdir('rbtrace-victim'), 'secret')
      File.write(victim, "root:secret\n")
      File.chmod(0o644, victim)
      File.symlink(victim, File.join(home, '.rbtrace_history'))
      out = repl_session(home, '1 + 1')
      expect(File.read(victim)).to eq("root:secret\n")
      expect(File.stat(victim).mode & 0o777).to eq(0o644)
      expect(out).to match(%r{rbtrace: no history: #{Regexp.escape(home)}/\.rbtrace_history is a symbolic link; .*remove the link})
      expect(File.symlink?(File.join(home, '.rbtrace_history'))).to be(true)
    ensure
      FileUtils.rm_rf(home) if home
      FileUtils.rm_rf(File.dirname(victim)) if victim
    end

    it 'keeps no history in a HOME that others may write to, or that is not its own (sudo -E)' do
      home = Dir.mktmpdir('rbtrace-home')
      File.chmod(0o777, home)
      out = repl_session(home, '1 + 1')
      expect(out).to match(/rbtrace: no history: HOME \(#{Regexp.escape(home)}\) may be written by other users/)
      expect(File.exist?(File.join(home, '.rbtrace_history'))).to be(false)
      if Process.uid.zero?
        File.chmod(0o755, home)
        File.chown(65_534, nil, home)
        out = repl_session(home, '1 + 1')
        expect(out).to match(/rbtrace: no history: HOME \(#{Regexp.escape(home)}\) belongs to uid 65534, not to uid 0/)
        expect(File.exist?(File.join(home, '.rbtrace_history'))).to be(false)
      end
    ensure
      FileUtils.rm_rf(home) if home
    end

    # The client loads libedit only when -i starts (ext/rbtrace/cli/editline.c).
    # Here libedit is hidden from it (an empty file mounted over the library, in
    # a mount namespace of its own): it says so and reads plain lines.
    it 'without a loadable libedit, says so and reads plain lines' do
      lib = `ldconfig -p`[%r{=> (\S*/libedit\.so\.\d+)$}, 1]
      skip 'needs root and unshare(1) to hide libedit' unless Process.uid.zero? && lib && system('unshare -m true')
      script = "mount --bind /dev/null #{File.realpath(lib)} && exec #{RBTraceSpec::CLIENT} -p #{app.pid} -i"
      pty = PtyClient.new(['-m', 'sh', '-c', script], { 'TERM' => 'xterm' }, 'unshare')
      @spec_processes << pty
      pty.wait_for(/could not load libedit \(.+\): lines are read plain/)
      pty.wait_for(/rbtrace\(#{app.pid}\)> \z/)
      pty.type("6 * 7\n")
      pty.wait_for(/=> 42\r\n/)
      pty.type("\x04")
      pty.wait_for(/\*\*\* detached from process #{app.pid}/)
      expect(pty.wait.exitstatus).to eq(0)
    end

    it 'takes a ^D typed while an entry still runs as the end, once the entry is done' do
      home = Dir.mktmpdir('rbtrace-home')
      pty = PtyClient.new(['-p', app.pid, '-i'], 'HOME' => home, 'TERM' => 'xterm')
      @spec_processes << pty
      prompt = Regexp.escape("rbtrace(#{app.pid})> ")
      pty.wait_for(/#{prompt}\z/)
      pty.type("sleep 1; :slept\r")
      pty.wait_for(/sleep 1; :slept\r\n/)
      pty.type("\x04") # the tty's canonical mode takes it: no editor reads now
      pty.wait_for(/=> :slept\r\n.*\*\*\* detached from process #{app.pid}/m)
      expect(pty.wait.exitstatus).to eq(0)
    ensure
      FileUtils.rm_rf(home) if home
    end

    it 'says at once when the process exits while the prompt waits, and exits with 3' do
      home = Dir.mktmpdir('rbtrace-home')
      pty = PtyClient.new(['-p', app.pid, '-i'], 'HOME' => home, 'TERM' => 'xterm')
      @spec_processes << pty
      pty.wait_for(/rbtrace\(#{app.pid}\)> \z/)
      app.kill
      pty.wait_for(/\*\*\* process #{app.pid} exited/)
      expect(pty.wait.exitstatus).to eq(3)
    ensure
      FileUtils.rm_rf(home) if home
    end
  end
end
