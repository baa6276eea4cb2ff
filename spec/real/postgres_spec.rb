require_relative 'real_helper'

# -c pg and -c activerecord against a real PostgreSQL 15 (Debian's
# postgresql): a throwaway cluster in a temporary directory, run as the
# suite's service user (PostgreSQL refuses root), on 127.0.0.1 on a free
# port, its unix socket in the same directory. The app uses Debian's pg
# 1.4.5 directly and through an Active Record 6.1 model. Probe#step(name)
# marks each call the app makes, so that the trace shows which pg name was
# called and what the client printed for it.
RSpec.describe 'PostgreSQL with pg and Active Record' do
  PG_BIN = '/usr/lib/postgresql/15/bin'.freeze

  PG_APP = <<~'RUBY'.freeze
    require 'pg'
    require 'active_record'
    port = Integer(ENV.fetch('RBTRACE_PG_PORT'))
    class Probe
      def self.step(name); end
    end
    ActiveRecord::Base.establish_connection(adapter: 'postgresql', host: '127.0.0.1', port: port,
                                            username: 'postgres', database: 'postgres')
    ActiveRecord::Schema.verbose = false
    ActiveRecord::Schema.define do
      create_table(:books, force: true) { |t| t.string :title; t.integer :pages }
    end
    class Book < ActiveRecord::Base; end
    conn = PG.connect(host: '127.0.0.1', port: port, user: 'postgres', dbname: 'postgres')
    puts "pg #{PG::VERSION} activerecord #{ActiveRecord.version}"
    puts "ready"
    round = 0
    loop do
      round += 1
      Probe.step('exec'); conn.exec('SELECT pg_sleep(0.002)')
      Probe.step('async_exec'); conn.async_exec('SELECT 1')
      Probe.step('exec_params'); conn.exec_params('SELECT $1::int + 1', [round])
      Probe.step('async_exec_params'); conn.async_exec_params('SELECT $1::int + 2', [round])
      Probe.step('prepare'); conn.prepare("pages_over_#{round}", 'SELECT count(*) FROM books WHERE pages > $1')
      Probe.step('async_prepare'); conn.async_prepare("pages_under_#{round}", 'SELECT count(*) FROM books WHERE pages < $1')
      Probe.step('exec_prepared'); conn.exec_prepared("pages_over_#{round}", [10])
      Probe.step('async_exec_prepared'); conn.async_exec_prepared("pages_over_#{round}", [10])
      Probe.step('send_query'); conn.send_query('SELECT 2')
      Probe.step('get_result'); conn.get_result
      conn.get_result
      Probe.step('copy_data'); conn.copy_data('COPY (SELECT 1) TO STDOUT') { nil while conn.get_copy_data }
      Probe.step('reset'); conn.reset
      Probe.step('create'); Book.create!(title: "Book #{round}", pages: round)
      Probe.step('where'); Book.where('pages > ?', 3).order(:id).limit(2).to_a
      Probe.step('done')
      sleep 0.05
    end
  RUBY

  let(:dir) { real_tmpdir('rbtrace-pg') }
  let(:port) { RealApps.free_port }

  before do
    RealApps.require_commands!("#{PG_BIN}/initdb" => 'postgresql', "#{PG_BIN}/postgres" => 'postgresql')
  end

  # A new cluster in dir, its server started, once it accepts queries.
  def start_postgres
    data = File.join(dir, 'data')
    init = ["#{PG_BIN}/initdb", '-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C']
    postgres = ["#{PG_BIN}/postgres", '-D', data, '-h', '127.0.0.1', '-p', port.to_s, '-k', dir, '-c', 'fsync=off']
    server = start_database('postgres', dir: dir, port: port, init: init, server: postgres)
    # Listening is not yet accepting queries ("the database system is
    # starting up"): pg_isready says when it does.
    Timeout.timeout(30) do
      sleep 0.1 until system("#{PG_BIN}/pg_isready", '-q', '-h', '127.0.0.1', '-p', port.to_s)
    end
    server
  end

  def start_app
    start_postgres
    app = start_target(PG_APP, env: RealApps.app_env(rbtrace: false, extra: { 'RBTRACE_PG_PORT' => port.to_s }))
    app.ready
    expect(app.lines.first).to match(/\Apg 1\.4\.\d+ activerecord 6\.1\./)
    app
  end

  # The trace of one whole round of the app, from Probe.step("exec") to
  # Probe.step("done").
  def one_round(stdout)
    stdout[/^Probe\.step\(name="exec"\) <.*?^Probe\.step\(name="done"\) <[\d.]+>$/m] or
      raise "no whole round in the trace:\n#{stdout[-4000..] || stdout}"
  end

  PG_T = '<\d+\.\d{6}>'.freeze

  # A String as a trace expression shows it: inspected in the app, each
  # backslash then escaped by the client (docs/usage.md).
  def shown(text)
    text.inspect.gsub('\\') { '\\\\' }
  end

  it '-c pg -c activerecord: every selector resolves, the real SQL, each pg call once under the name the VM gives it' do
    app = start_app
    result = trace(app, '-c', 'pg', '-c', 'activerecord', '-m', 'Probe.step(name)',
                   until_output: /Probe\.step\(name="done"\)(?m:.*)Probe\.step\(name="done"\)/)
    expect(result.status).to be_success, result.stderr
    expect(result.stderr.lines.grep(/\*\*\* error/)).to be_empty, result.stderr
    # pg's methods by wrappers of each name, Active Record's by TracePoints
    # on their bytecode: nothing left behind after detach.
    expect(result.stderr).not_to include('global VM hooks')
    expect(result.stdout).not_to include('raised>')
    round = one_round(result.stdout)
    # pg 1.4.5 defines exec, exec_params, prepare and exec_prepared in C
    # and async_exec... as their aliases (get_result and reset are Ruby
    # methods, async_get_result and async_reset their aliases): a call
    # through either name shows under the method's own name, once. (A blank
    # line follows an outermost return only once the trace has shown a
    # nested call, render.c: a round traced first has none before copy_data.)
    expect(round).to match(/^Probe\.step\(name="exec"\) #{PG_T}\n+PG::Connection#exec #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="async_exec"\) #{PG_T}\n+PG::Connection#exec #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="exec_params"\) #{PG_T}\n+PG::Connection#exec_params #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="async_exec_params"\) #{PG_T}\n+PG::Connection#exec_params #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="prepare"\) #{PG_T}\n+PG::Connection#prepare #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="async_prepare"\) #{PG_T}\n+PG::Connection#prepare #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="exec_prepared"\) #{PG_T}\n+PG::Connection#exec_prepared #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="async_exec_prepared"\) #{PG_T}\n+PG::Connection#exec_prepared #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="get_result"\) #{PG_T}\n+PG::Connection#get_result #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="copy_data"\) #{PG_T}\n+PG::Connection#copy_data\n  PG::Connection#exec #{PG_T}\nPG::Connection#copy_data #{PG_T}\n/)
    expect(round).to match(/^Probe\.step\(name="reset"\) #{PG_T}\n+PG::Connection#reset #{PG_T}\n/)
    # Active Record's statements with their SQL (a backslash the app sends
    # shows as \\: docs/usage.md), each run by pg once.
    adapter = 'ActiveRecord::ConnectionAdapters::AbstractAdapter#log'
    create = 'INSERT INTO "books" ("title", "pages") VALUES ($1, $2) RETURNING "id"'
    expect(round).to include(%(#{adapter}(name="Book Create", sql=#{shown(create)})))
    load = 'SELECT "books".* FROM "books" WHERE (pages > 3) ORDER BY "books"."id" ASC LIMIT $1'
    expect(round).to match(/^  #{Regexp.escape(%(#{adapter}(name="Book Load", sql=#{shown(load)})))}\n    PG::Connection#exec_(params|prepared) #{PG_T}\n  #{Regexp.escape(adapter)} #{PG_T}\nActiveRecord::Relation#load #{PG_T}$/)
    expect(round).to match(/^  #{Regexp.escape(adapter)}\(name="TRANSACTION", sql="BEGIN"\)\n    PG::Connection#exec #{PG_T}\n/)
    expect(round).to match(/^ActiveRecord::ConnectionAdapters::DatabaseStatements#transaction\n/)
    # No pg call nested in a call of the same name: none is shown twice.
    expect(result.stdout).not_to match(/^( *)PG::Connection#(\w+)\n\1  PG::Connection#\2 /)
  end
end
