require_relative 'real_helper'
require 'net/http'

# Debian's Puma 5.6.5 in single mode names its pool's threads itself
# ("puma srv tp 001", Puma.set_thread_name): --thread-names shows those
# names on the lines of the requests each thread served.
RSpec.describe 'Puma thread names' do
  CONFIG_RU = <<~'RUBY'.freeze
    class Hello
      def self.text(n) = "hello #{n}\n"
    end
    run ->(env) { sleep 0.01; [200, { 'content-type' => 'text/plain' }, [Hello.text(env['QUERY_STRING'])]] }
  RUBY

  let(:dir) { Dir.mktmpdir('rbtrace-puma-names') }

  before { RealApps.require_commands!('puma' => 'puma') }
  after do
    @real_processes.reverse_each(&:kill)
    FileUtils.rm_rf(dir)
  end

  # Puma on a port the kernel picks as it binds (tcp://127.0.0.1:0), read
  # from its log: a port found free beforehand may be taken meanwhile by
  # another server of this shared machine, which then answers our requests.
  def start_puma(log)
    puma = spawn_group('puma', 'puma', '-e', 'production', '-t', '2:2', '-b', 'tcp://127.0.0.1:0',
                       'config.ru', log: log, env: RealApps.app_env, chdir: dir)
    [puma, RealApps.puma_port(log, puma)]
  end

  it "shows the pool threads' own names with --thread-names" do
    File.write(File.join(dir, 'config.ru'), CONFIG_RU)
    puma, port = start_puma(File.join(dir, 'puma.log'))
    client = start_client('-p', puma.pid, '-m', 'Hello.text', '--thread-names')
    client.attached
    # two at a time, so that both of the pool's threads serve some
    bodies = 10.times.flat_map do |round|
      2.times.map { |i| Thread.new { Net::HTTP.get(URI("http://127.0.0.1:#{port}/?#{(round * 2) + i}")) } }.map(&:value)
    end
    expect(bodies).to eq(20.times.map { |n| "hello #{n}\n" })
    client.wait_for(->(o) { o.scan(/^\[t\d+ puma srv tp 00[12]\] Hello\.text </).size >= 20 })
    expect(client.stop).to be_success
    lines = client.stdout.lines.grep(/Hello\.text/)
    expect(lines).to all(match(/\A\[t\d+ puma srv tp 00[12]\] Hello\.text <\d+\.\d{6}>\n\z/))
    expect(lines.map { |l| l[/puma srv tp 00\d/] }.uniq.sort).to eq(['puma srv tp 001', 'puma srv tp 002'])
  end
end
