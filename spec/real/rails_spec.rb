require_relative 'real_helper'
require 'net/http'

# Issue 21: a Rails 6.1 app (spec/real/apps/rails: Active Record on sqlite3,
# a model with an association, an ordinary, a slow, an N+1 and a raising
# action) under Debian's Puma in cluster mode (-w 2 --preload, rbtrace
# required at boot by RUBYOPT), loaded by wrk, all on 127.0.0.1. The shipped
# tracers for Active Record, Rack and Puma are run against a worker and
# show the app's real SQL, middleware and paths; --raise, --slow and several
# pids at once are tried on real Rails requests. Every server is killed with
# its process group after each example.
RSpec.describe 'a Rails app under a Puma cluster' do
  RAILS_APP_DIR = File.join(__dir__, 'apps', 'rails')
  # wrk's paths (apps/rails/wrk_load.lua), in turn: never /posts/boom.
  RAILS_LOADED_PATHS = %w[/posts /posts/n_plus_one /posts/slow].freeze
  # The middleware of rack.tracer that a Rails 6.1 app in production runs
  # (config/application.rb: no static files). The tracer's others
  # (Rack::URLMap, Deflater, Static, Multipart.parse_multipart) resolve too
  # (Rack autoloads them as the selector names them) and are never called.
  RAILS_RACK_USED = %w[Rack::Sendfile Rack::Runtime Rack::MethodOverride Rack::Head
                       Rack::ConditionalGet Rack::ETag Rack::TempfileReaper].freeze
  # The original gem's activerecord.tracer (0.5.x), word for word: none of
  # its classes is in Rails 6.1 (SQLiteAdapter became SQLite3Adapter, whose
  # SQL goes through AbstractAdapter#log, where ours looks).
  RAILS_ORIGINAL_ACTIVERECORD_TRACER = <<~TRACER.freeze
    ActiveRecord::ConnectionAdapters::AbstractMysqlAdapter#execute(sql)
    ActiveRecord::ConnectionAdapters::MysqlAdapter#execute(sql)
    ActiveRecord::ConnectionAdapters::PostgreSQLAdapter#execute(sql)
    ActiveRecord::ConnectionAdapters::SQLiteAdapter#execute(sql)
  TRACER

  before do
    RealApps.require_commands!('puma' => 'puma', 'wrk' => 'wrk')
  end

  let(:dir) { Dir.mktmpdir('rbtrace-rails') }
  after { FileUtils.rm_rf(dir) }

  # Boots the app under `puma -w 2 --preload`; returns the two workers' pids
  # once both booted and the port answers.
  def boot_rails
    @port = RealApps.free_port
    log = File.join(dir, 'puma.log')
    env = RealApps.app_env(extra: { 'RAILS_APP_DB' => File.join(dir, 'shop.sqlite3') })
    @master = spawn_group('puma', 'puma', '-w', '2', '-t', '2:4', '--preload', '-e', 'production',
                          '-b', "tcp://127.0.0.1:#{@port}", 'config.ru', env: env, log: log, chdir: RAILS_APP_DIR)
    workers = []
    Timeout.timeout(90) do
      loop do
        workers = File.read(log).scan(/Worker \d \(PID: (\d+)\) booted/).flatten.map(&:to_i)
        break if workers.size == 2
        raise "puma exited:\n#{RealApps.tail(log)}" if Process.waitpid(@master.pid, Process::WNOHANG)

        sleep 0.1
      end
    end
    RealApps.wait_for_port(@port, @master, log: log)
    expect(RealApps.children_of(@master.pid).sort).to eq(workers.sort)
    workers
  end

  # wrk on RAILS_LOADED_PATHS until stop_wrk.
  def start_wrk
    @wrk_log = File.join(dir, 'wrk.log')
    @wrk = spawn_group('wrk', 'wrk', '-t', '1', '-c', '4', '-d', '120s', '-s', File.join(RAILS_APP_DIR, 'wrk_load.lua'),
                       "http://127.0.0.1:#{@port}", log: @wrk_log)
    sleep 0.5
  end

  # Stops wrk like ^C (it prints its report then); expects it saw requests
  # and no error.
  def stop_wrk
    Process.kill(:INT, @wrk.pid)
    Timeout.timeout(15) { Process.wait(@wrk.pid) }
    report = File.read(@wrk_log)
    expect(report[/(\d+) requests in/, 1].to_i).to be > 0, report
    expect(report).not_to match(/Socket errors|Non-2xx/), report
    report
  end

  def get(path)
    Net::HTTP.get_response(URI("http://127.0.0.1:#{@port}#{path}"))
  end

  # Runs the block while another thread requests path, each time on a new
  # connection (wrk's stay open: a Puma thread serves one in a single
  # Server#process_client, for as long as the load lasts).
  def while_requesting(path)
    requester = Thread.new do
      loop do
        get(path)
        sleep 0.1
      end
    end
    yield
  ensure
    requester&.kill&.join
  end

  # The trace with the client's escaping of backslashes undone: a value is
  # then as Ruby's inspect shows it.
  def unescaped(text) = text.gsub('\\\\', '\\')

  # Runs the client on pids with args until its stdout matches each of
  # patterns, then stops it like ^C and expects a clean detach.
  def trace_until(pids, *args, patterns:, timeout: 30)
    client = start_client('-p', *pids, *args)
    pids.each { |pid| client.wait_for(/\*\*\* attached to process #{pid}/, stream: :stderr, timeout: timeout) }
    patterns.each { |pattern| client.wait_for(pattern, timeout: timeout) }
    expect(client.stop).to be_success, client.outputs
    pids.each { |pid| expect(client.stderr).to include("*** detached from process #{pid}") }
    client
  end

  it '-c activerecord, rack and puma on a worker under load: the real SQL, middleware and paths, every selector resolved' do
    worker, = boot_rails
    start_wrk
    client = start_client('-p', worker, '-c', 'activerecord', 'rack', 'puma')
    client.wait_for(/\*\*\* attached to process #{worker}/, stream: :stderr, timeout: 30)
    while_requesting('/posts') do
      # Until each statement asserted below was seen: /posts loads its authors
      # with IN (?, ...), the N+1 requests one by one (= ? LIMIT ?).
      [/Post Load/, /Author Load", sql="SELECT [^\n]* = \? LIMIT \?"/, /COUNT/].each do |pattern|
        client.wait_for(pattern, timeout: 30)
      end
      # A Puma::Server#process_client begun while traced, ended: wrk's began
      # before and last while it runs (and may keep this worker's threads
      # busy); stopped, the requester's new connections reach it.
      stop_wrk
      client.wait_for(/Puma::Server#process_client </, timeout: 30)
    end
    expect(client.stop).to be_success, client.outputs
    expect(client.stderr).to include("*** detached from process #{worker}")
    out = unescaped(client.stdout)
    # No selector of the three files failed to resolve on Rails 6.1.7,
    # Rack 2.2, Puma 5.6.5; no expression failed.
    expect(client.stderr.lines.grep(/error|no such|not loaded/)).to be_empty, client.stderr
    # Ruby methods all, each traced by its TracePoints: no global VM hook
    # (the tracers' headers say so).
    expect(client.stderr).not_to include('global VM hooks')
    expect(out).not_to include('raised>')
    # Active Record: the statements this app runs, with their names.
    ar = 'ActiveRecord::ConnectionAdapters::AbstractAdapter#log'
    expect(out).to include(%(#{ar}(name="Post Load", sql=#{'SELECT "posts".* FROM "posts" ORDER BY "posts"."id" ASC LIMIT ?'.inspect})))
    expect(out).to include(%(#{ar}(name="Author Load", sql=#{'SELECT "authors".* FROM "authors" WHERE "authors"."id" = ? LIMIT ?'.inspect})))
    expect(out).to include(%(#{ar}(name=nil, sql=#{'SELECT COUNT(*) AS count_all, "posts"."author_id" AS posts_author_id FROM "posts" ' \
                                                   'GROUP BY "posts"."author_id"'.inspect})))
    expect(out).to match(/^(\[t\d+\] )? *ActiveRecord::ConnectionAdapters::ConnectionPool#checkout <\d+\.\d{6}>$/)
    expect(out).to match(/^(\[t\d+\] )? *ActiveRecord::Relation#load <\d+\.\d{6}>$/)
    # Rack: the middleware Rails runs, nested; none of the others.
    seen = out.scan(/(Rack::\w+)#call </).flatten.uniq
    expect(seen).to match_array(RAILS_RACK_USED)
    # Puma: each request's method and the path wrk asked for.
    requests = out.scan(/Puma::Request#handle_request\((.*)\)(?: <\d+\.\d+>)?$/).flatten.uniq
    expect(requests).not_to be_empty
    paths = (RAILS_LOADED_PATHS | ['/posts']).map { |path| %("#{path}") }.join('|')
    expect(requests).to all(match(/\Aclient\.env\["REQUEST_METHOD"\]="GET", client\.env\["REQUEST_PATH"\]=(#{paths})\z/))
    expect(out).to match(/^(\[t\d+\] )?Puma::Server#process_client <\d+\.\d{6}>$/)
    expect(out).to match(/^(\[t\d+\] )? *Puma::Client#try_to_finish <\d+\.\d{6}>$/)
  end

  it "the original gem's SQLiteAdapter#execute is gone from Rails 6.1: its tracer traces nothing, ours the SQL" do
    worker, = boot_rails
    start_wrk
    original = File.join(dir, 'original_activerecord.tracer')
    File.write(original, RAILS_ORIGINAL_ACTIVERECORD_TRACER)
    old = start_client('-p', worker, '-c', original, '-m', 'PostsController#index')
    old.attached
    old.wait_for(/PostsController#index <[\s\S]*PostsController#index </)
    expect(old.stop).to be_success
    expect(old.stderr).to include('SQLiteAdapter')
    expect(old.stdout).not_to include('#execute')
    ours = trace_until([worker], '-c', 'activerecord', patterns: [/name="Post Load", sql="SELECT /])
    stop_wrk
    expect(ours.stderr.lines.grep(/error/)).to be_empty, ours.stderr
  end

  # Report::Broken's first raise, in the app (app/models/report.rb).
  RAILS_BROKEN = 'raise Report::Broken: the report is broken at \\S+/app/models/report\\.rb:11'

  # Failing requests, two at a time (their threads' raises interleave when
  # both go to one worker).
  RAILS_BOOMS = 8

  # The lines the client printed for Report::Broken while boom was requested
  # RAILS_BOOMS times, with flag, on both workers (either may serve it).
  def broken_lines(workers, flag)
    client = start_client('-p', *workers, flag)
    # "attached" once each worker has taken --raise: every boom after is seen.
    workers.each { |pid| client.wait_for(/\*\*\* attached to process #{pid}/, stream: :stderr) }
    codes = Array.new(RAILS_BOOMS / 2) { Array.new(2) { Thread.new { get('/posts/boom').code } }.map(&:value) }
    expect(codes.flatten).to all(eq('500'))
    client.wait_for(->(out) { out.scan(/#{RAILS_BROKEN}/o).size >= RAILS_BOOMS })
    yield client if block_given?
    expect(client.stop).to be_success, client.outputs
    client.stdout.lines.grep(/Report::Broken/).map(&:chomp)
  end

  it '--raise shows a failing request\'s exception once, its re-raises through the middleware folded; --raise-all each' do
    workers = boot_rails
    start_wrk
    folded = broken_lines(workers, '--raise')
    every = broken_lines(workers, '--raise-all') do |client|
      # The last re-raise is printed with the next event, or at once.
      client.wait_for(->(out) { out.scan(/re-raise Report::Broken/).size >= RAILS_BOOMS * 2 })
    end
    stop_wrk
    # --raise: one line per request, where the app raised, saying how many
    # times and where last the middleware raised it again.
    line = %r{\A\[(\d+)\] (\[t\d+\] )?#{RAILS_BROKEN} \(re-raised (\d+) times, last at \S+/action_dispatch/middleware/debug_exceptions\.rb:\d+\)\z}
    expect(folded.size).to eq(RAILS_BOOMS), folded.join("\n")
    expect(folded).to all(match(line))
    expect(folded.map { |l| l[line, 1].to_i }).to all(satisfy { |pid| workers.include?(pid) })
    times = folded.map { |l| l[line, 3].to_i }.uniq
    expect(times.size).to eq(1)
    expect(times.first).to be >= 2
    # --raise-all: the first raise and each re-raise on a line of its own,
    # as many as --raise counted.
    raises = every.grep(/\A\[\d+\] (\[t\d+\] )?#{RAILS_BROKEN}\z/)
    reraises = every.grep(/\A\[\d+\] (\[t\d+\] )?re-raise Report::Broken: the report is broken at \S+\.rb:\d+\z/)
    expect(raises.size).to eq(RAILS_BOOMS), every.join("\n")
    expect(reraises.size).to eq(RAILS_BOOMS * times.first), every.join("\n")
    expect(every.size).to eq(raises.size + reraises.size)
  end

  it '--slow 5 on a Rails request: the slow calls nested, indented 40 levels at most and marked [dN] past them' do
    worker, = boot_rails
    start_wrk
    client = while_requesting('/posts/slow') do
      # Puma::Request#handle_request ends with each request; process_client
      # not while wrk keeps its connections (nor when the requester's lands
      # on the other worker).
      trace_until([worker], '--slow', '5', patterns: [/PostsController#slow </, /Puma::Request#handle_request </])
    end
    stop_wrk
    lines = client.stdout.lines.map(&:chomp).grep(/ <\d+\.\d{6}>\z/)
    expect(lines.map { |l| l[/ <(\d+\.\d{6})>\z/, 1].to_f }).to all(be >= 0.005)
    indents = lines.map { |l| l.sub(/\A\[t\d+\] /, '')[/\A */].size }
    expect(indents.max).to eq(80) # 40 levels of 2 columns
    action = lines.grep(/PostsController#slow </).first
    expect(action).to match(/\A(\[t\d+\] )? {80}\[d(\d+)\] PostsController#slow <0\.0\d{5}>\z/)
    depth = action[/\[d(\d+)\]/, 1].to_i
    expect(depth).to be > 40
    # What made it slow, deeper down: Report#format_line's sleep.
    expect(lines).to include(a_string_matching(/ {80}\[d#{depth + 5}\] Report#format_line <0\.0\d{5}>\z/))
    expect(lines).to include(a_string_matching(/ {80}\[d#{depth + 6}\] Kernel#sleep <0\.0\d{5}>\z/))
    # Shallower ones are indented, not marked.
    shallow = lines.grep(/Puma::Request#handle_request </)
    expect(shallow).not_to be_empty
    expect(shallow).to all(match(/\A(\[t\d+\] )? {0,8}Puma::Request#handle_request </))
  end

  it '-p WORKER WORKER traces both workers at once, each line marked with its pid' do
    workers = boot_rails
    start_wrk
    patterns = workers.map { |pid| /^\[#{pid}\] (\[t\d+\] )? *Puma::Request#handle_request\(/ }
    # wrk's four connections may all be one worker's: new connections reach
    # the other too.
    client = while_requesting('/posts') { trace_until(workers, '-c', 'puma', patterns: patterns) }
    stop_wrk
    out = client.stdout.lines.map(&:chomp).reject(&:empty?)
    expect(out).to all(match(/\A\[(#{workers.join('|')})\] /))
    requests = out.grep(/handle_request\(/)
    expect(requests.map { |l| l[/\A\[(\d+)\]/, 1].to_i }.uniq).to match_array(workers)
    paths = (RAILS_LOADED_PATHS | ['/posts']).map { |path| %("#{path}") }.join('|')
    expect(requests).to all(match(/handle_request\(client\.env\["REQUEST_METHOD"\]="GET", client\.env\["REQUEST_PATH"\]=(#{paths})\)/))
    expect(client.stderr.lines.grep(/error/)).to be_empty, client.stderr
    # puma.tracer's lines are Ruby methods: no global VM hook
    expect(client.stderr).not_to include('global VM hooks')
  end
end
