require_relative '../spec_helper'

# rbtrace -p PID -c NAME|FILE...: tracer files, the user's and the shipped
# ones (tracers/*.tracer), against real targets.
RSpec.describe 'tracer files (-c)' do
  TRACERS_SHIPPED = %w[activerecord io mysql2 net_http pg puma rack redis sidekiq].freeze

  TRACERS_APP = <<~'RUBY'.freeze
    class Worker
      def work; helper; end
      def helper; "x".upcase; end
      def rest; nil; end
      alias_method :pause, :rest
    end

    puts "ready"
    loop do
      Worker.new.work
      Worker.new.pause
      Process.pid
      sleep 0.05
    end
  RUBY

  let(:app) { start_target(TRACERS_APP).ready }
  let(:dir) { Dir.mktmpdir('rbtrace-tracers') }
  # The checkout's tracers/, whatever the spec run's environment says.
  let(:env) { { 'RBTRACE_TRACERS_DIR' => nil } }

  after { FileUtils.rm_rf(dir) }

  def tracer_file(name, text)
    path = File.join(dir, name)
    File.write(path, text)
    path
  end

  # Runs the client until its stream matches pattern, then stops it like ^C.
  def trace_until(target, *args, pattern:, stream: :stdout)
    client = start_client('-p', target.pid, *args, env: env)
    client.attached
    client.wait_for(pattern, stream: stream)
    status = client.stop(:INT)
    RBTraceSpec::Result.new(client.stdout, client.stderr, status)
  end

  it "traces the selectors of a user's file, skipping comments and blank lines" do
    path = tracer_file('mine.tracer', <<~TRACER)
      # What the worker does.

      Worker#work   # the entry point
        Process.pid
      # String#upcase: not this one
    TRACER
    result = trace_until(app, '-c', path, pattern: /Process\.pid <.*Worker#work </m)
    expect(result.status).to be_success, result.stderr
    expect(result.stdout).to match(/^Worker#work <\d+\.\d{6}>$/)
    expect(result.stdout).to match(/^Process\.pid <\d+\.\d{6}>$/)
    expect(result.stdout).not_to include('String#upcase')
    expect(result.stderr).not_to include('error')
  end

  it 'adds the selectors of -c and -m up, with trace expressions from a file' do
    path = tracer_file('exprs.tracer', "Worker#helper(self.class)\n")
    result = trace_until(app, '-c', path, '-m', 'Worker#work',
                         pattern: /^Worker#work\n  Worker#helper\(self\.class=Worker\) <.*\nWorker#work </)
    expect(result.stdout).to match(/^Worker#work\n  Worker#helper\(self\.class=Worker\) <\d+\.\d{6}>\nWorker#work <\d+\.\d{6}>$/)
  end

  it 'traces the calls made through an alias that a file names' do
    path = tracer_file('alias.tracer', "Worker#pause\n")
    # Worker#pause is an alias of Worker#rest, and only ever called by it;
    # the trace shows the original name.
    result = trace_until(app, '-c', path, pattern: /Worker#rest </)
    expect(result.stdout).to match(/^Worker#rest <\d+\.\d{6}>$/)
  end

  it 'reports once per class the selectors whose class is not loaded, and traces the others' do
    path = tracer_file('mixed.tracer', <<~TRACER)
      PG::Connection#exec
      PG::Connection#exec_params
      PG::Connection.new
      Process.pid
      Nope#lonely
    TRACER
    result = trace_until(app, '-c', path, pattern: /Process\.pid </)
    expect(result.stderr).to include("*** error: PG::Connection is not loaded in process #{app.pid} " \
                                     '(no such class or module): its 3 selectors are not traced')
    expect(result.stderr.scan('PG::Connection').size).to eq(1)
    expect(result.stderr).to include('*** error: Nope#lonely: no such class or module Nope (not traced)')
    expect(result.stdout).to match(/^Process\.pid <\d+\.\d{6}>$/)
  end

  # A line for other versions of a library (redis.tracer's redis-client
  # one, under redis-rb 4) starts with '?': its class or method missing is a
  # note, not an error; any other mistake in it is still an error.
  it "a '?' line whose class or method is missing is a note, not an error, and the rest is traced" do
    path = tracer_file('versions.tracer', <<~TRACER)
      ?Nope::Newer#call(command)
      ?Worker#renamed_in_v5
      ?Worker#helper
      ?Worker#rest(no_such_local)
      Worker#work
    TRACER
    result = trace_until(app, '-c', path, pattern: /Worker#helper <.*Worker#work </m)
    expect(result.status).to be_success, result.stderr
    expect(result.stderr).to include('*** Nope::Newer#call(command): no such class or module Nope::Newer: not ' \
                                     'traced (its line is for other versions of the library: not an error)')
    expect(result.stderr).to include('*** Worker#renamed_in_v5: no such method Worker#renamed_in_v5: not traced ' \
                                     '(its line is for other versions of the library: not an error)')
    # an expression that cannot work is still the file's mistake
    expect(result.stderr).to match(/^\*\*\* error: .*no_such_local/)
    expect(result.stderr.lines.grep(/\*\*\* error/).size).to eq(1), result.stderr
    expect(result.stdout).to match(/^  Worker#helper <\d+\.\d{6}>$/)
    expect(result.stdout).to match(/^Worker#work <\d+\.\d{6}>$/)
  end

  describe 'the shipped tracers' do
    it '-c io shows the file reads and writes of the process' do
      io_app = start_target(<<~RUBY).ready
        path = #{File.join(dir, 'data.txt').inspect}
        puts "ready"
        loop do
          File.write(path, "line one\\nline two\\n")
          File.read(path)
          File.open(path) { |f| f.gets }
          sleep 0.05
        end
      RUBY
      # A whole turn of the loop: the client may attach in the middle of one.
      result = trace_until(io_app, '-c', 'io',
                           pattern: /^IO\.write <.*\nIO\.read <.*\nIO\.open\n  IO#gets <.*\n  IO#close <.*\nIO\.open </)
      expect(result.stdout).to match(/^IO\.write <\d+\.\d{6}>$/)
      expect(result.stdout).to match(/^IO\.read <\d+\.\d{6}>$/)
      expect(result.stdout).to match(/^IO\.open\n  IO#gets <\d+\.\d{6}>\n  IO#close <\d+\.\d{6}>\nIO\.open <\d+\.\d{6}>$/)
      # This app never loaded the socket library: the socket lines alone
      # are left out (spec/real/net_http_spec.rb traces a socket's).
      expect(result.stderr.lines.grep(/error/))
        .to eq(["*** error: BasicSocket is not loaded in process #{io_app.pid} (no such class or module): " \
                "its 2 selectors are not traced\n"])
    end

    it '-c net_http shows each request with its method, host and path, and the connect' do
      http_app = start_target(<<~'RUBY').ready
        require 'net/http'
        require 'socket'
        server = TCPServer.new('127.0.0.1', 0)
        port = server.addr[1]
        Thread.new do
          loop do
            client = server.accept
            while (line = client.gets) && line != "\r\n"; end
            client.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            client.close
          end
        end
        puts "ready"
        loop do
          Net::HTTP.get(URI("http://127.0.0.1:#{port}/hello"))
          sleep 0.05
        end
      RUBY
      result = trace_until(http_app, '-c', 'net_http', pattern: /Net::HTTP#start <\d/)
      port = '\d+'
      expect(result.stdout).to match(/^  Net::HTTP#connect\(@address="127\.0\.0\.1", @port=#{port}\) <\d+\.\d{6}>$/)
      expect(result.stdout).to match(%r{Net::HTTP#request\(req\.method="GET", @address="127\.0\.0\.1", @port=#{port}, req\.path="/hello"\)})
      expect(result.stdout).to match(/^Net::HTTP#start <\d+\.\d{6}>$/)
    end

    it 'every shipped file is made of well-formed selectors' do
      plain = start_target("require 'net/http'\nputs 'ready'\nloop { sleep 0.1 }").ready
      expect(Dir[File.join(RBTraceSpec::ROOT, 'tracers', '*.tracer')].map { |f| File.basename(f, '.tracer') }.sort)
        .to eq(TRACERS_SHIPPED)
      TRACERS_SHIPPED.each do |name|
        # Nope#sync is reported last: everything the file's selectors caused
        # has been reported by then. --gc: a trace whose selectors all fail
        # (a library not loaded) has nothing to trace, and exits at once.
        result = trace_until(plain, '-c', name, '-m', 'Nope#sync', '--gc', pattern: /Nope#sync/, stream: :stderr)
        expect(result.status).to be_success, "#{name}: #{result.stderr}"
        errors = result.stderr.lines.grep(/\*\*\* error/).reject { |l| l.include?('Nope#sync') }
        # In a plain Ruby, a library's classes are not loaded; nothing else
        # may be wrong with a line.
        errors.each { |line| expect(line).to match(/ is not loaded in process \d+ |: no such class or module /), "#{name}: #{line}" }
        expect(errors).to be_empty, "#{name}: #{errors.join}" if %w[io net_http].include?(name)
      end
    end

    it 'an unknown name is an error that lists the shipped tracers' do
      result = rbtrace('-p', app.pid, '-c', 'postgres', env: env)
      expect(result.exitstatus).to eq(2)
      expect(result.stderr).to include("rbtrace: unknown tracer 'postgres': the shipped tracers are " \
                                       "#{TRACERS_SHIPPED.join(', ')}; to read a file of your own, give its path (./postgres)")
    end

    it 'are looked up in RBTRACE_TRACERS_DIR when it is set' do
      tracer_file('custom.tracer', "Process.pid\n")
      expect(rbtrace('-p', app.pid, '-c', 'custom', env: env).stderr).to include("unknown tracer 'custom'")
      env['RBTRACE_TRACERS_DIR'] = dir
      result = trace_until(app, '-c', 'custom', pattern: /Process\.pid </)
      expect(result.stdout).to match(/^Process\.pid </)
    end
  end

  describe 'bad files' do
    it 'a missing file: says which and why, exit 2' do
      result = rbtrace('-p', app.pid, '-c', './no-such.tracer')
      expect(result.exitstatus).to eq(2)
      expect(result.stderr).to include('rbtrace: cannot open tracer file ./no-such.tracer: No such file or directory')
    end

    it 'an unreadable file: says so and what to do' do
      path = tracer_file('secret.tracer', "Process.pid\n")
      File.chmod(0, path)
      result =
        if Process.euid.zero? # root reads any file: be nobody
          rbtrace('--reuid=65534', '--regid=65534', '--clear-groups', RBTraceSpec::CLIENT,
                  '-p', app.pid, '-c', path, client: '/usr/bin/setpriv')
        else
          rbtrace('-p', app.pid, '-c', path)
        end
      expect(result.exitstatus).to eq(2)
      expect(result.stderr).to include("cannot open tracer file #{path}: Permission denied (make it readable by you)")
    end

    it 'a file whose reading fails: the file and the error' do
      result = rbtrace('-p', app.pid, '-c', '/proc/self/mem')
      expect(result.exitstatus).to eq(2)
      expect(result.stderr).to include('rbtrace: cannot read tracer file /proc/self/mem: Input/output error')
    end

    it 'a directory' do
      result = rbtrace('-p', app.pid, '-c', "#{dir}/")
      expect(result.exitstatus).to eq(2)
      expect(result.stderr).to include("#{dir}/ is a directory: give a tracer file")
    end

    it 'a file without selectors' do
      path = tracer_file('empty.tracer', "# nothing yet\n\n")
      result = rbtrace('-p', app.pid, '-c', path)
      expect(result.exitstatus).to eq(2)
      expect(result.stderr).to include("tracer file #{path} has no selectors: write one a line")
    end

    it 'a line that is not a selector: the file and line' do
      path = tracer_file('typo.tracer', "Process.pid\n\nString gsub\n")
      result = rbtrace('-p', app.pid, '-c', path)
      expect(result.exitstatus).to eq(2)
      expect(result.stderr).to include("#{path}:3: not a selector: 'String gsub'")
    end
  end
end
