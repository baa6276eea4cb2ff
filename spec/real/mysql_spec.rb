require_relative 'real_helper'

# -c mysql2 against a real MariaDB 10.11 (Debian's mariadb-server): a
# throwaway server whose data directory mariadb-install-db makes in a
# temporary directory, run as the suite's service user (mariadbd refuses
# root), on 127.0.0.1 on a free port, its socket in the same directory,
# no grant tables (no password to set up). The app uses Debian's mysql2
# 0.5.3; Probe.step(name) marks each call it makes.
RSpec.describe 'MariaDB with mysql2' do
  MYSQL_APP = <<~'RUBY'.freeze
    require 'mysql2'
    class Probe
      def self.step(name); end
    end
    port = Integer(ENV.fetch('RBTRACE_MYSQL_PORT'))
    client = Mysql2::Client.new(host: '127.0.0.1', port: port, username: 'root')
    client.query('CREATE DATABASE app')
    client.query('USE app')
    client.query('CREATE TABLE books (id INT AUTO_INCREMENT PRIMARY KEY, title VARCHAR(100), pages INT)')
    puts "mysql2 #{Mysql2::VERSION}"
    puts "ready"
    round = 0
    loop do
      round += 1
      Probe.step('query'); client.query("INSERT INTO books (title, pages) VALUES ('Book #{round}', #{round})")
      Probe.step('prepare'); statement = client.prepare('SELECT title FROM books WHERE pages > ? LIMIT 2')
      Probe.step('execute'); statement.execute(3).to_a
      statement.close
      Probe.step('connect'); Mysql2::Client.new(host: '127.0.0.1', port: port, username: 'root').close
      Probe.step('done')
      sleep 0.05
    end
  RUBY

  MYSQL_T = '<\d+\.\d{6}>'.freeze

  let(:dir) { real_tmpdir('rbtrace-mysql') }
  let(:port) { RealApps.free_port }

  before { RealApps.require_commands!('mariadb-install-db' => 'mariadb-server', 'mariadbd' => 'mariadb-server') }
  # A new data directory in dir, its server started and listening.
  def start_mariadb
    data = File.join(dir, 'data')
    init = ['mariadb-install-db', '--no-defaults', "--datadir=#{data}",
            '--auth-root-authentication-method=normal', '--skip-test-db']
    server = ['mariadbd', '--no-defaults', "--datadir=#{data}", "--socket=#{dir}/mariadbd.sock", "--port=#{port}",
              '--bind-address=127.0.0.1', "--pid-file=#{dir}/mariadbd.pid", '--skip-grant-tables', '--skip-log-bin',
              '--innodb-buffer-pool-size=16M']
    start_database('mariadbd', dir: dir, port: port, init: init, server: server)
  end

  it '-c mysql2: every selector resolves, the real SQL of a query, prepared statements and connects shown' do
    start_mariadb
    app = start_target(MYSQL_APP, env: RealApps.app_env(rbtrace: false, extra: { 'RBTRACE_MYSQL_PORT' => port.to_s }))
    app.ready
    expect(app.lines.first).to match(/\Amysql2 0\.5\./)
    result = trace(app, '-c', 'mysql2', '-m', 'Probe.step(name)',
                   until_output: /Probe\.step\(name="done"\)(?m:.*)Probe\.step\(name="done"\)/)
    expect(result.status).to be_success, result.stderr
    expect(result.stderr.lines.grep(/\*\*\* error/)).to be_empty, result.stderr
    # Client#query is a Ruby method on mysql2 0.5: its expression is
    # evaluated by a TracePoint on its bytecode, without a global hook.
    expect(result.stderr).not_to include('global VM hooks')
    expect(result.stdout).not_to include('raised>')
    round = result.stdout[/^Probe\.step\(name="query"\) <.*?^Probe\.step\(name="done"\) #{MYSQL_T}$/m]
    expect(round).to match(/^Probe\.step\(name="query"\) #{MYSQL_T}\n+Mysql2::Client#query\(sql="INSERT INTO books \(title, pages\) VALUES \('Book \d+', \d+\)"\) #{MYSQL_T}\n/)
    expect(round).to match(/^Probe\.step\(name="prepare"\) #{MYSQL_T}\n+Mysql2::Client#prepare #{MYSQL_T}\n/)
    expect(round).to match(/^Probe\.step\(name="execute"\) #{MYSQL_T}\n+Mysql2::Statement#execute #{MYSQL_T}\n/)
    expect(round).to match(/^Probe\.step\(name="connect"\) #{MYSQL_T}\n+Mysql2::Client#connect #{MYSQL_T}\n/)
  end
end
