require_relative '../spec_helper'

# DESIGN.md "Security: who may attach".
RSpec.describe 'security' do
  let(:app) { start_target("puts 'ready'\nloop { Process.pid; sleep 0.02 }").ready }

  def queue_of(pid)
    key = 0x52000000 | pid
    File.readlines('/proc/sysvipc/msg').drop(1).map(&:split).find { |f| f[0].to_i == key }
  end

  it 'creates its message queue only when signalled, mode 0600, owned by the app\'s user' do
    expect(queue_of(app.pid)).to be_nil
    expect(rbtrace('-p', app.pid, '-e', '1')).to be_success
    fields = queue_of(app.pid)
    expect(fields).not_to be_nil
    # key msqid perms cbytes qnum lspid lrpid uid gid cuid cgid
    expect(fields[2]).to eq('600')
    expect(fields[7].to_i).to eq(Process.euid)
    expect(fields[9].to_i).to eq(Process.euid)
  end

  it 'removes its queue when the process exits' do
    expect(rbtrace('-p', app.pid, '-e', '1')).to be_success
    expect(queue_of(app.pid)).not_to be_nil
    Process.kill(:TERM, app.pid)
    app.wait
    expect(queue_of(app.pid)).to be_nil
  end

  it 'listens in a private 0700 directory, gone once the target connected or the client exits' do
    tmp = Dir.mktmpdir
    # A target that never answers keeps the client waiting with its socket open.
    stubborn = start_target("trap('URG') {}\nputs 'ready'\nsleep").ready
    client = RBTraceSpec::Client.new(['-p', stubborn.pid, '--timeout', '3', '-e', '1'], env: { 'TMPDIR' => tmp })
    @spec_processes << client
    dir = nil
    Timeout.timeout(3) { sleep 0.01 until (dir = Dir.glob(File.join(tmp, 'rbtrace-*')).first) }
    expect(File.stat(dir).mode & 0o777).to eq(0o700)
    expect(File.stat(dir).uid).to eq(Process.euid)
    expect(File.socket?(File.join(dir, 'sock'))).to be true
    client.wait
    expect(Dir.children(tmp)).to be_empty
    # after a successful attach nothing is left either
    expect(rbtrace('-p', app.pid, '-e', '1', env: { 'TMPDIR' => tmp })).to be_success
    expect(Dir.children(tmp)).to be_empty
  ensure
    FileUtils.rm_rf(tmp)
  end

  it 'never reads a queue another user created under its key, says so once, and stays attachable by its owner' do
    skip 'needs root to act as another user' unless Process.uid.zero?
    victim = start_target("puts 'ready'\nsleep").ready
    key = 0x52000000 | victim.pid
    # "nobody" plants a world-writable queue under the victim's key.
    plant = "require 'fiddle'; f = Fiddle::Function.new(Fiddle.dlopen(nil)['msgget'], " \
            "[Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT); exit(f.call(#{key}, 0o1666) >= 0 ? 0 : 1)"
    expect(system('setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', 'ruby', '-e', plant)).to be true
    planted = -> { File.readlines('/proc/sysvipc/msg').drop(1).map(&:split).find { |f| f[0].to_i == key } }
    begin
      2.times do
        r = rbtrace('-p', victim.pid, '-e', '6 * 7')
        expect(r.stdout).to include('42')
        expect(r).to be_success
      end
      expect(planted.call[4].to_i).to eq(0) # qnum: nothing was sent into it
      expect(victim.stderr.scan(/ignoring message queue/).size).to eq(1)
      expect(victim).to be_alive
    ensure
      qid = planted.call&.at(1)
      system('ipcrm', '-q', qid) if qid
    end
  end
end
