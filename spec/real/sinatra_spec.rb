require_relative 'real_helper'
require 'net/http'

# A Sinatra 3.0.5 app (Debian's ruby-sinatra) under Debian's Puma in single
# mode, mounted by config.ru at /shop (Rack::URLMap), with traffic from
# wrk, traced with -c rack and with the app's own methods.
#
# Sinatra turns each route's block into a method of the app class named
# "VERB PATH" ("GET /books/:id": define_method, then removed from the
# class, the UnboundMethod kept and bound per request). No selector can
# name it (a selector has no spaces, and the class no longer has the
# method); `App#`, every method of the app class, shows each route's
# calls under that name, and the app's helpers.
RSpec.describe 'Sinatra under Puma and wrk' do
  SINATRA_APP = <<~'RUBY'.freeze
    require 'sinatra/base'
    class App < Sinatra::Base
      helpers do
        def title_of(id) = "Book #{id}"
      end

      get '/books/:id' do
        "#{title_of(params[:id])}\n"
      end

      post '/books' do
        status 201
        "created #{params[:title]}\n"
      end
    end
  RUBY

  SINATRA_CONFIG_RU = <<~'RUBY'.freeze
    require_relative 'app'
    map('/shop') { run App }
  RUBY

  WRK_SECONDS = 5
  SINATRA_T = '<\d+\.\d{6}>'.freeze
  THREAD = '(?:\[t\d+\] )?'.freeze

  let(:dir) { real_tmpdir('rbtrace-sinatra') }
  let(:port) { RealApps.free_port }

  before { RealApps.require_commands!('puma' => 'puma', 'wrk' => 'wrk') }
  def start_puma
    File.write(File.join(dir, 'app.rb'), SINATRA_APP)
    File.write(File.join(dir, 'config.ru'), SINATRA_CONFIG_RU)
    log = File.join(dir, 'puma.log')
    puma = spawn_group('puma', 'puma', '-e', 'production', '-t', '2:4', '-b', "tcp://127.0.0.1:#{port}",
                       'config.ru', log: log, env: RealApps.app_env, chdir: dir)
    RealApps.wait_for_port(port, puma, log: log)
    puma
  end

  # wrk's summary, once it is done.
  def wrk_result(wrk, log)
    Timeout.timeout(WRK_SECONDS + 30) { Process.wait(wrk.pid) }
    File.read(log)
  end

  it '-c rack and -m App#: real lines for each middleware and route, and wrk sees no errors' do
    puma = start_puma
    wrk_log = File.join(dir, 'wrk.log')
    wrk = spawn_group('wrk', 'wrk', '-t1', '-c4', "-d#{WRK_SECONDS}s", "http://127.0.0.1:#{port}/shop/books/7",
                      log: wrk_log)
    client = start_client('-p', puma.pid, '-c', 'rack', '-m', 'App#')
    client.attached
    post = Net::HTTP.post(URI("http://127.0.0.1:#{port}/shop/books"), 'title=Dune')
    expect([post.code, post.body]).to eq(['201', "created Dune\n"])
    client.wait_for(%r{App#POST /books <})
    client.wait_for(%r{App#GET /books/:id <})
    expect(client.stop).to be_success
    out = client.stdout
    expect(client.stderr.lines.grep(/\*\*\* error/)).to be_empty, client.stderr
    expect(out).not_to include('raised>')
    expect(out).to match(%r{^#{THREAD}Rack::URLMap#call\(env\["REQUEST_METHOD"\]="GET", env\["PATH_INFO"\]="/shop/books/7"\)$})
    expect(out).to match(%r{^#{THREAD}Rack::URLMap#call\(env\["REQUEST_METHOD"\]="POST", env\["PATH_INFO"\]="/shop/books"\)$})
    expect(out).to match(/^#{THREAD}  Rack::Head#call$/)
    expect(out).to match(%r{^#{THREAD}    App#GET /books/:id$})
    expect(out).to match(/^#{THREAD}      App#title_of #{SINATRA_T}$/)
    expect(out).to match(%r{^#{THREAD}    App#GET /books/:id #{SINATRA_T}$})
    expect(out).to match(%r{^#{THREAD}    App#POST /books #{SINATRA_T}$})
    expect(out).to match(/^#{THREAD}Rack::URLMap#call #{SINATRA_T}$/)
    # -c rack alone: TracePoints on Rack's methods, no global hook.
    rack = start_client('-p', puma.pid, '-c', 'rack')
    rack.attached
    # wrk may be done by now: a request of our own.
    expect(Net::HTTP.get(URI("http://127.0.0.1:#{port}/shop/books/8"))).to eq("Book 8\n")
    rack.wait_for(/^#{THREAD}  Rack::Head#call #{SINATRA_T}$/)
    expect(rack.stop).to be_success
    expect(rack.stderr).not_to include('global VM hooks')
    expect(rack.stderr.lines.grep(/\*\*\* error/)).to be_empty, rack.stderr
    summary = wrk_result(wrk, wrk_log)
    expect(summary).to match(/(\d+) requests in/)
    expect(summary[/(\d+) requests in/, 1].to_i).to be > 100
    expect(summary).not_to match(/Socket errors|Non-2xx or 3xx responses/)
  end
end
