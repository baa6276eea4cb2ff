require_relative 'real_helper'

# -c net_http and -c io on an app making Net::HTTP requests against a real
# local server: Debian's Puma, started by the spec on 127.0.0.1 on a free
# port. The app makes a one-off GET (Net::HTTP.get), a keep-alive session
# (GET then POST) and a session started and finished by hand;
# Probe.step(name) marks each.
RSpec.describe 'Net::HTTP against a local Puma' do
  HTTP_CONFIG_RU = <<~'RUBY'.freeze
    run ->(env) { [200, { 'content-type' => 'text/plain' }, ["#{env['REQUEST_METHOD']} #{env['PATH_INFO']}\n"]] }
  RUBY

  HTTP_APP = <<~'RUBY'.freeze
    require 'net/http'
    class Probe
      def self.step(name); end
    end
    port = Integer(ENV.fetch('RBTRACE_HTTP_PORT'))
    puts "ready"
    loop do
      Probe.step('get')
      body = Net::HTTP.get(URI("http://127.0.0.1:#{port}/books?page=2"))
      raise "unexpected body #{body.inspect}" unless body == "GET /books\n"
      Probe.step('session')
      Net::HTTP.start('127.0.0.1', port) do |http|
        http.get('/authors/1')
        http.post('/books', 'title=Dune')
      end
      Probe.step('by_hand')
      http = Net::HTTP.new('127.0.0.1', port)
      http.start
      http.head('/')
      http.finish
      Probe.step('done')
      sleep 0.05
    end
  RUBY

  HTTP_T = '<\d+\.\d{6}>'.freeze

  let(:dir) { real_tmpdir('rbtrace-http') }
  let(:port) { RealApps.free_port }

  before { RealApps.require_commands!('puma' => 'puma') }
  def start_app
    File.write(File.join(dir, 'config.ru'), HTTP_CONFIG_RU)
    log = File.join(dir, 'puma.log')
    puma = spawn_group('puma', 'puma', '-t', '1:2', '-b', "tcp://127.0.0.1:#{port}", 'config.ru',
                       log: log, env: RealApps.app_env(rbtrace: false), chdir: dir)
    RealApps.wait_for_port(port, puma, log: log)
    start_target(HTTP_APP, env: RealApps.app_env(rbtrace: false, extra: { 'RBTRACE_HTTP_PORT' => port.to_s })).ready
  end

  def one_round(stdout)
    stdout[/^Probe\.step\(name="get"\) <.*?^Probe\.step\(name="done"\) #{HTTP_T}$/m] or
      raise "no whole round in the trace:\n#{stdout[-4000..] || stdout}"
  end

  def trace_rounds(app, *args)
    trace(app, *args, '-m', 'Probe.step(name)',
          until_output: /Probe\.step\(name="done"\)(?m:.*)Probe\.step\(name="done"\)/)
  end

  it '-c net_http: each request with its real method, host, port and path, the connect, start and finish' do
    app = start_app
    result = trace_rounds(app, '-c', 'net_http')
    expect(result.status).to be_success, result.stderr
    expect(result.stderr.lines.grep(/\*\*\* error/)).to be_empty, result.stderr
    expect(result.stderr).not_to include('global VM hooks')
    expect(result.stdout).not_to include('raised>')
    round = one_round(result.stdout)
    at = %(@address="127\\.0\\.0\\.1", @port=#{port})
    connect = "  Net::HTTP#connect\\(#{at}\\) #{HTTP_T}\\n"
    expect(round).to match(%r{^Probe\.step\(name="get"\) #{HTTP_T}\n+Net::HTTP#start\n#{connect}  Net::HTTP#request\(req\.method="GET", #{at}, req\.path="/books\?page=2"\) #{HTTP_T}\nNet::HTTP#start #{HTTP_T}\n})
    expect(round).to match(%r{^Probe\.step\(name="session"\) #{HTTP_T}\n+Net::HTTP#start\n#{connect}  Net::HTTP#request\(req\.method="GET", #{at}, req\.path="/authors/1"\) #{HTTP_T}\n  Net::HTTP#request\(req\.method="POST", #{at}, req\.path="/books"\) #{HTTP_T}\nNet::HTTP#start #{HTTP_T}\n})
    expect(round).to match(%r{^Probe\.step\(name="by_hand"\) #{HTTP_T}\n+Net::HTTP#start\n#{connect}Net::HTTP#start #{HTTP_T}\n+Net::HTTP#request\(req\.method="HEAD", #{at}, req\.path="/"\) #{HTTP_T}\n+Net::HTTP#finish #{HTTP_T}\n})
  end

  it '-c io on the same app: every selector resolves, and the socket reads and writes of each request show' do
    app = start_app
    result = trace_rounds(app, '-c', 'io')
    expect(result.status).to be_success, result.stderr
    expect(result.stderr.lines.grep(/\*\*\* error/)).to be_empty, result.stderr
    expect(result.stderr).not_to include('global VM hooks')
    round = one_round(result.stdout)
    # Net::HTTP reads and writes its socket with read_nonblock and
    # write_nonblock, which sockets define apart (BasicSocket, socket.rb).
    get = round[/^Probe\.step\(name="get"\) .*?^Probe\.step\(name="session"\)/m]
    expect(get).to match(/^BasicSocket#write_nonblock #{HTTP_T}$/)
    expect(get).to match(/^BasicSocket#read_nonblock #{HTTP_T}$/)
    expect(get).to match(/^IO#close #{HTTP_T}$/)
  end
end
