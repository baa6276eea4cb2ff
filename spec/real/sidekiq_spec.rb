require_relative 'real_helper'
require 'timeout'

# -c sidekiq and -c redis against a real Sidekiq 6.4.1 worker (Debian's
# ruby-sidekiq, on redis-rb 4.8) and a throwaway redis-server 7.0 on
# 127.0.0.1 (no persistence, its files in a temporary directory). The worker
# is started by the `sidekiq` command with rbtrace required at boot; jobs are
# pushed by another process while the worker is traced; `redis-cli MONITOR`
# records what the server received meanwhile.
#
# The worker runs one processor thread (-c 1), so its fetches (BRPOP) and
# jobs come one after the other. Step jobs mark the start and the end of the
# measured window with GET rbtrace:mark:start / rbtrace:mark:stop, run a
# MULTI block, and push a Chained job (a pipelined SADD + LPUSH) to the
# queue "chained", which Chained's sidekiq_options name (the start job also
# pushes two at once, by push_bulk): the window holds the same
# processor-thread commands in the trace and in MONITOR.
RSpec.describe 'Sidekiq and Redis (-c sidekiq, -c redis)' do
  SIDEKIQ_JOBS_RB = <<~'RUBY'.freeze
    require 'sidekiq'

    class Step
      include Sidekiq::Worker

      def perform(what)
        Sidekiq.redis do |conn|
          conn.get("rbtrace:mark:#{what}")
          conn.multi do |transaction|
            transaction.incr('rbtrace:steps')
            transaction.expire('rbtrace:steps', 600)
          end
        end
        Chained.perform_async(what)
        Sidekiq::Client.push_bulk('class' => Chained, 'args' => [['bulk-a'], ['bulk-b']]) if what == 'start'
      end
    end

    class Chained
      include Sidekiq::Worker
      sidekiq_options queue: 'chained'

      def perform(what); end
    end
  RUBY

  # Pushes Step jobs start, 1..SIDEKIQ_STEPS, then, after the worker has idled
  # through BRPOP timeouts (Sidekiq's is 2 s), stop; prints each jid.
  SIDEKIQ_STEPS = 3
  # Chained jobs: one per Step job (start, 1..SIDEKIQ_STEPS, stop), two by push_bulk.
  SIDEKIQ_CHAINED = SIDEKIQ_STEPS + 4
  SIDEKIQ_ENQUEUE_RB = <<~RUBY.freeze
    $stdout.sync = true
    jids = Sidekiq::Client.push_bulk('class' => Step, 'args' => [['start'], *(1..#{SIDEKIQ_STEPS}).map { |i| [i] }])
    puts "jids \#{jids.join(' ')}"
    sleep Float(ENV.fetch('RBTRACE_IDLE'))
    puts "jids \#{Sidekiq::Client.push('class' => Step, 'args' => ['stop'])}"
  RUBY

  let(:dir) { Dir.mktmpdir('rbtrace-sidekiq') }
  let(:port) { RealApps.free_port }
  let(:redis_url) { "redis://127.0.0.1:#{port}/0" }
  # The checkout's tracers/, whatever the spec run's environment says.
  let(:tracer_env) { { 'RBTRACE_TRACERS_DIR' => nil } }

  before do
    RealApps.require_commands!('/usr/bin/redis-server' => 'redis-server', '/usr/bin/redis-cli' => 'redis-tools',
                               '/usr/bin/sidekiq' => 'ruby-sidekiq')
    File.write(File.join(dir, 'jobs.rb'), SIDEKIQ_JOBS_RB)
  end

  after { FileUtils.rm_rf(dir) }

  def start_redis
    log = File.join(dir, 'redis.log')
    server = spawn_group('redis-server', '/usr/bin/redis-server', '--port', port.to_s, '--bind', '127.0.0.1',
                         '--save', '', '--appendonly', 'no', '--dir', dir, log: log)
    RealApps.wait_for_port(port, server, log: log)
  end

  def redis_cli(*args)
    out = IO.popen(['/usr/bin/redis-cli', '-p', port.to_s, *args], err: %i[child out], &:read)
    raise "redis-cli #{args.join(' ')} failed (#{$?.inspect}): #{out}" unless $?.success?

    out
  end

  # The worker, once its processor waits in BRPOP (seen in CLIENT LIST).
  def start_sidekiq(rbtrace: true)
    log = File.join(dir, 'sidekiq.log')
    env = RealApps.app_env(rbtrace: rbtrace, extra: { 'REDIS_URL' => redis_url })
    worker = spawn_group('sidekiq', RealApps::DEBIAN_RUBY, '/usr/bin/sidekiq', '-r', './jobs.rb', '-c', '1',
                         '-q', 'default', '-q', 'chained', log: log, chdir: dir, env: env)
    deadline = Time.now + 60
    until redis_cli('CLIENT', 'LIST').include?('cmd=brpop')
      raise "sidekiq exited before fetching:\n#{RealApps.tail(log)}" if Process.waitpid(worker.pid, Process::WNOHANG)
      raise "sidekiq not fetching after 60 s:\n#{RealApps.tail(log)}" if Time.now > deadline

      sleep 0.1
    end
    worker
  end

  # redis-cli MONITOR into a file, once it has started (it prints OK).
  def start_monitor
    path = File.join(dir, 'monitor.txt')
    monitor = spawn_group('redis-cli MONITOR', '/usr/bin/redis-cli', '-p', port.to_s, 'MONITOR', log: path)
    Timeout.timeout(10) { sleep 0.05 until File.read(path).start_with?('OK') }
    [monitor, path]
  rescue Timeout::Error
    raise "redis-cli MONITOR did not start: #{RealApps.tail(path)}"
  end

  # Runs SIDEKIQ_ENQUEUE_RB in a process of its own (on Debian's gems, without
  # rbtrace); returns the jids it pushed.
  def enqueue(idle:)
    log = File.join(dir, 'enqueue.log')
    env = RealApps.app_env(rbtrace: false, extra: { 'REDIS_URL' => redis_url, 'RBTRACE_IDLE' => idle.to_s })
    pusher = spawn_group('enqueue', RealApps::DEBIAN_RUBY, '-r', './jobs.rb', '-e', SIDEKIQ_ENQUEUE_RB,
                         log: log, chdir: dir, env: env)
    Timeout.timeout(60) { Process.wait(pusher.pid) }
    raise "the enqueuing process failed (#{$?.inspect}):\n#{RealApps.tail(log)}" unless $?.success?

    File.read(log).scan(/^jids (.*)$/).flatten.flat_map(&:split)
  end

  # The whole run: redis-server, the worker, MONITOR, the client with
  # tracer_args attached, the jobs pushed and run; stops the client once
  # MONITOR shows the stop job's Chained job fetched (its LPUSH, then a
  # BRPOP after the one that got it) and the trace matches trace_done.
  # Returns the client's Result, MONITOR's lines and the jids.
  def trace_jobs(*tracer_args, trace_done:, idle: 4.5)
    start_redis
    worker = start_sidekiq
    _, monitor_path = start_monitor
    client = start_client('-p', worker.pid, *tracer_args, env: tracer_env)
    client.attached
    jids = enqueue(idle: idle)
    Timeout.timeout(30) do
      sleep 0.05 until File.read(monitor_path)[/"get" "rbtrace:mark:stop".*"lpush" "queue:chained".*"brpop".*"brpop"/m]
    end
    client.wait_for(trace_done, timeout: 30)
    status = client.stop(:INT)
    [RBTraceSpec::Result.new(client.stdout, client.stderr, status), File.read(monitor_path).lines, jids]
  end

  # The trace holds every job's run, the stop job's Chained one included.
  SIDEKIQ_DONE = /(Chained#perform .*){#{SIDEKIQ_CHAINED}}Sidekiq::Processor#process </m
  # The trace holds the stop job's push of its Chained job.
  SIDEKIQ_REDIS_DONE = /"rbtrace:mark:stop".*Redis#pipelined </m

  # The processor thread's lines of a trace ([tN] prefix, or none for the
  # first thread seen) from the start marker to the stop marker.
  def processor_window(stdout)
    lines = stdout.lines
    start = lines.index { |l| l.include?('"rbtrace:mark:start"') } or raise "no start marker in:\n#{stdout}"
    stop = lines.index { |l| l.include?('"rbtrace:mark:stop"') } or raise "no stop marker in:\n#{stdout}"
    thread = ->(line) { line[/\A\[t\d+\] /] || '[t1] ' } # untagged: before a 2nd thread showed
    lines[start..stop].select { |l| thread[l] == thread[lines[start]] }
  end

  # MONITOR's lines from the start marker to the stop marker.
  def monitor_window(lines)
    start = lines.index { |l| l.include?('"get" "rbtrace:mark:start"') } or raise 'no start marker in MONITOR'
    stop = lines.index { |l| l.include?('"get" "rbtrace:mark:stop"') } or raise 'no stop marker in MONITOR'
    lines[start..stop]
  end

  # The commands that only the processor thread sends (by their name and
  # first arguments; the enqueuing process sends SADD queues default).
  SIDEKIQ_PROCESSOR_COMMANDS = ['brpop queue:default', 'get rbtrace:mark:start', 'get rbtrace:mark:stop',
                                'incr rbtrace:steps', 'expire rbtrace:steps', 'sadd queues chained',
                                'lpush queue:chained'].freeze

  def count_commands(commands)
    SIDEKIQ_PROCESSOR_COMMANDS.to_h { |c| [c, commands.count { |command| command.start_with?("#{c} ") }] }
  end

  # "brpop queue:default queue:chained 2" from
  # command=[:brpop, ["queue:default", "queue:chained"], 2]: the name and
  # the string arguments, joined by blanks.
  def traced_commands(lines)
    lines.filter_map do |l|
      m = l.match(/command=\[:(\w+)(.*)/) or next
      "#{m[1]} #{m[2].scan(/"((?:[^"\\]|\\.)*)"/).join(' ')} "
    end
  end

  # The same from MONITOR's 1795736075.8 [0 127.0.0.1:4242] "brpop" "queue:default" ...
  def monitored_commands(lines)
    lines.filter_map do |l|
      args = l.split('] ', 2)[1]&.scan(/"((?:[^"\\]|\\.)*)"/)&.flatten
      "#{args[0].downcase} #{args[1..].join(' ')} " if args && !args.empty?
    end
  end

  describe '-c sidekiq' do
    it 'shows each job run with its class, queue and jid, and no expression raises' do
      result, _, jids = trace_jobs('-c', 'sidekiq', trace_done: SIDEKIQ_DONE, idle: 0.5)
      expect(result.status).to be_success, result.stderr
      expect(result.stderr).not_to include('*** error')
      expect(result.stdout).not_to include('raised')
      expect(jids.size).to eq(SIDEKIQ_STEPS + 2)
      jids.each do |jid|
        expect(result.stdout).to match(/^(\[t\d+\] )?  Sidekiq::Processor#dispatch\(job_hash\["class"\]="Step", queue="default", job_hash\["jid"\]="#{jid}"\)$/)
      end
      expect(result.stdout).to match(/Sidekiq::Processor#dispatch\(job_hash\["class"\]="Chained", queue="chained", job_hash\["jid"\]="\h{24}"\)/)
      expect(result.stdout).to match(/^(\[t\d+\] )?Sidekiq::Processor#process\n(\[t\d+\] )?  Sidekiq::Processor#dispatch\(.*\n(\[t\d+\] )?    Sidekiq::Processor#execute_job\n(\[t\d+\] )?      Step#perform\n/)
    end

    it 'shows each job pushed with its class, and the queue it went to' do
      result, monitor, = trace_jobs('-c', 'sidekiq', trace_done: SIDEKIQ_DONE, idle: 0.5)
      expect(result.status).to be_success, result.stderr
      raw_push = ->(size) { %(.*Sidekiq::Client#raw_push\\(payloads\\.first\\["queue"\\]="chained", payloads\\.size=#{size}\\) <\\d+\\.\\d{6}>$) }
      pushes = result.stdout.scan(/Sidekiq::Client#push\(item\["class"\]=Chained\)\n#{raw_push.call(1)}/)
      bulk = result.stdout.scan(/Sidekiq::Client#push_bulk\(items\["class"\]=Chained, items\["args"\]\.size=2\)\n#{raw_push.call(2)}/)
      # Each Step pushed one Chained job, the start one two more at once;
      # MONITOR saw as many LPUSHes to their queue.
      expect([pushes.size, bulk.size]).to eq([SIDEKIQ_STEPS + 2, 1])
      expect(monitor.grep(/"lpush" "queue:chained"/).size).to eq(SIDEKIQ_STEPS + 3)
      expect(result.stdout).not_to include('raised')
    end
  end

  describe '-c redis' do
    it 'shows every command of the traced thread that MONITOR saw, BRPOP (the fetch) included' do
      result, monitor, = trace_jobs('-c', 'redis', trace_done: SIDEKIQ_REDIS_DONE)
      expect(result.status).to be_success, result.stderr
      traced = count_commands(traced_commands(processor_window(result.stdout)))
      monitored = count_commands(monitored_commands(monitor_window(monitor)))
      # The worker idled through BRPOP timeouts between the jobs and the stop one.
      expect(monitored['brpop queue:default']).to be >= SIDEKIQ_STEPS + 4
      # start (twice), 1..SIDEKIQ_STEPS pushed Chained jobs (stop pushes its own after its mark).
      expect(monitored['lpush queue:chained']).to eq(SIDEKIQ_STEPS + 2)
      expect(traced).to eq(monitored)
      expect(result.stdout).not_to include('raised')
    end

    it 'shows the commands inside pipelined and multi blocks, nested in the block' do
      result, = trace_jobs('-c', 'redis', trace_done: SIDEKIQ_REDIS_DONE, idle: 0.5)
      expect(result.status).to be_success, result.stderr
      prefix = '(?:\[t\d+\] )?'
      expect(result.stdout).to match(/^#{prefix}Redis#multi\n#{prefix}  Redis::PipelinedConnection#send_command\(command=\[:incr, "rbtrace:steps"\]\) <\d+\.\d{6}>\n#{prefix}  Redis::PipelinedConnection#send_command\(command=\[:expire, "rbtrace:steps", 600\]\) <\d+\.\d{6}>\n#{prefix}Redis#multi <\d+\.\d{6}>$/)
      expect(result.stdout).to match(/^#{prefix}Redis#pipelined\n#{prefix}  Redis::PipelinedConnection#send_command\(command=\[:sadd, "queues", "chained"\]\) <\d+\.\d{6}>\n#{prefix}  Redis::PipelinedConnection#send_command\(command=\[:lpush, "queue:chained", \[".*Chained.*"\]\]\) <\d+\.\d{6}>\n#{prefix}Redis#pipelined <\d+\.\d{6}>$/)
    end
  end

  # The selectors that Sidekiq does not reach: connecting, and a blocking
  # command inside a pipeline (redis-rb 4.8 queues it with its timeout).
  SIDEKIQ_REDIS_APP = <<~'RUBY'.freeze
    require 'redis'
    $stdout.sync = true
    port = Integer(ENV.fetch('RBTRACE_REDIS_PORT'))
    puts "ready"
    loop do
      redis = Redis.new(host: '127.0.0.1', port: port)
      redis.set('rbtrace:plain', 'x')
      redis.pipelined do |pipeline|
        pipeline.rpush('rbtrace:list', 'item')
        pipeline.blpop('rbtrace:list', timeout: 1)
      end
      redis.close
      sleep 0.05
    end
  RUBY

  it '-c redis: connecting, and a blocking command inside a pipeline (redis-rb alone)' do
    start_redis
    log = File.join(dir, 'app.log')
    env = RealApps.app_env(extra: { 'RBTRACE_REDIS_PORT' => port.to_s })
    app = spawn_group('redis app', RealApps::DEBIAN_RUBY, '-e', SIDEKIQ_REDIS_APP, log: log, chdir: dir, env: env)
    Timeout.timeout(30) { sleep 0.05 until File.read(log).include?('ready') }
    client = start_client('-p', app.pid, '-c', 'redis', env: tracer_env)
    client.attached
    client.wait_for(->(out) { out.scan('Redis#pipelined <').size >= 2 }, timeout: 30) # two rounds
    expect(client.stop(:INT)).to be_success
    expect(client.stdout).to match(/^Redis#send_command\(command=\[:set, "rbtrace:plain", "x"\]\)\n  Redis::Client#connect <\d+\.\d{6}>\nRedis#send_command <\d+\.\d{6}>$/)
    expect(client.stdout).to match(/^Redis#pipelined\n  Redis::PipelinedConnection#send_command\(command=\[:rpush, "rbtrace:list", "item"\]\) <\d+\.\d{6}>\n  Redis::PipelinedConnection#send_blocking_command\(command=\[:blpop, \["rbtrace:list"\], 1\]\) <\d+\.\d{6}>\nRedis#pipelined <\d+\.\d{6}>$/)
    expect(client.stdout).not_to include('raised')
    # redis-rb 4.8: the redis-client line (redis-rb 5's) is a note, not an
    # error; every line a Ruby method's TracePoint, no global VM hook.
    expect(client.stderr).not_to include('*** error'), client.stderr
    expect(client.stderr).to include('*** RedisClient::Middlewares#call(command): no such class or module ' \
                                     'RedisClient::Middlewares: not traced (its line is for other versions of ' \
                                     'the library: not an error)')
    expect(client.stderr).not_to include('global VM hooks')
  end

  # Issue 32: a worker started without rbtrace gets it by --inject (its
  # main thread waits in IO.select for signals, its processor in BRPOP).
  it 'loads rbtrace into a worker started without it (--inject), which goes on fetching' do
    skip '--inject needs root (or CAP_SYS_PTRACE)' unless Process.uid.zero?
    start_redis
    worker = start_sidekiq(rbtrace: false)
    expect(File.read("/proc/#{worker.pid}/maps")).not_to include('rbtrace.so')
    code = '[Sidekiq::VERSION, $LOADED_FEATURES.grep(%r{/rbtrace/rbtrace\.so}).size]'
    r = rbtrace('-p', worker.pid, '--inject', '--timeout', '30', '-e', code, timeout: 60)
    expect(r.stdout).to match(/\A>> #{Regexp.escape(code)}\n=> \["\d+\.\d+\.\d+", 1\]\n\z/), r.stderr
    expect(r.stderr).to include("*** injected rbtrace into process #{worker.pid}")
    Timeout.timeout(20) { sleep 0.1 until redis_cli('CLIENT', 'LIST').include?('cmd=brpop') }
  end

  it 'every selector of -c sidekiq redis resolves on Sidekiq 6.4.1 and redis-rb 4.8, but the redis-client one' do
    result, = trace_jobs('-c', 'sidekiq', 'redis', trace_done: SIDEKIQ_REDIS_DONE, idle: 0.5)
    expect(result.status).to be_success, result.stderr
    # redis.tracer's line for redis-rb 5 and redis-client ('?'): a note with
    # redis-rb 4, not an error; nothing else.
    expect(result.stderr.lines.grep(/\*\*\* error/)).to be_empty, result.stderr
    expect(result.stderr.lines.grep(/RedisClient/).join).to match(/\A\*\*\* RedisClient::Middlewares#call\(command\): .*: not traced \(its line is for other versions of the library: not an error\)\n\z/)
    expect(result.stdout).not_to include('raised')
  end
end
