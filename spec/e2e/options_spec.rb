require_relative '../spec_helper'

RSpec.describe 'client options' do
  APP_NESTED = <<~'RUBY'.freeze
    class Job
      def run; step; end
      def step; "x".upcase; end
    end
    puts "ready"
    loop { Job.new.run; sleep 0.05 }
  RUBY

  let(:app) { start_target(APP_NESTED).ready }
  let(:nested) { /^Job#run <.*\n/m }

  it '-h/--help prints usage with every option' do
    %w[-h --help].each do |flag|
      r = rbtrace(flag)
      expect(r).to be_success
      %w[--pid --methods --firehose --eval --output --append --start-time --no-duration --prefix --timeout --version].each do |opt|
        expect(r.stdout).to include(opt)
      end
    end
  end

  it '--version prints the version' do
    r = rbtrace('--version')
    expect(r.stdout).to eq("rbtrace #{RBTrace::VERSION}\n")
  end

  it 'rejects an unknown option and a missing mode with exit code 2' do
    r = rbtrace('--frobnicate')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to match(/frobnicate.*\n.*--help/m)
    r = rbtrace('-p', app.pid)
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to match(/-m.*-f.*-e/)
  end

  it '-n hides durations' do
    out = trace(app, '-n', '-m', 'Job#run', 'Job#step', until_output: /^Job#run\n  Job#step\nJob#run\n/).stdout
    expect(out).to match(/^Job#run\n  Job#step\nJob#run\n/)
    expect(out).not_to include('<0.')
  end

  it '-r N indents by N spaces' do
    out = trace(app, '-r', '4', '-m', 'Job#run', 'Job#step', until_output: nested).stdout
    expect(out).to match(/^Job#run\n    Job#step <\d+\.\d{6}>\nJob#run <\d+\.\d{6}>\n/)
  end

  it '-t shows each call\'s start time and aligns returns' do
    out = trace(app, '-t', '-m', 'Job#run', 'Job#step', until_output: / Job#run <.*\n/).stdout
    expect(out).to match(/^\d\d:\d\d:\d\d\.\d{6} Job#run\n\d\d:\d\d:\d\d\.\d{6}   Job#step <\d+\.\d{6}>\n {16}Job#run <\d+\.\d{6}>\n/)
  end

  it '-o FILE writes the trace to FILE; -a appends' do
    Dir.mktmpdir do |dir|
      file = File.join(dir, 'trace.txt')
      File.write(file, "previous\n")
      r = trace(app, '-o', file, '-m', 'Job#step') { sleep 0.5 }
      expect(r.stdout).to eq('')
      expect(File.read(file)).to match(/\AJob#step <\d+\.\d{6}>\n/)
      trace(app, '-o', file, '-a', '-m', 'Job#run') { sleep 0.5 }
      text = File.read(file)
      expect(text).to match(/\AJob#step </)
      expect(text).to match(/^Job#run </)
    end
  end

  # A trace holds the app's argument values: -o makes a file only its user
  # reads, and never writes through a symbolic link of another user's (one
  # planted in /tmp would have rbtrace truncate its target).
  it '-o FILE is created mode 0600, never through a symbolic link of another user; an existing file of ours is overwritten' do
    Dir.mktmpdir do |dir|
      old_umask = File.umask(0o022)
      begin
        file = File.join(dir, 'trace.txt')
        trace(app, '-o', file, '-m', 'Job#step') { sleep 0.3 }
        expect(File.stat(file).mode & 0o777).to eq(0o600)

        victim = File.join(dir, 'victim')
        File.write(victim, "keep me\n")
        link = File.join(dir, 'link.txt')
        File.symlink(victim, link)
        other = RBTraceSpec.system_user('rbtrace-spec')
        File.lchown(other.uid, other.gid, link) # planted by another user
        [['-a'], []].each do |append|
          r = rbtrace('-p', app.pid, '-o', link, *append, '-m', 'Job#step')
          expect(r.exitstatus).to eq(1)
          expect(r.stderr).to include("could not open #{link}: it is a symbolic link of another user's")
          expect(r.stderr).to include('give the path it points to, or remove the link')
        end
        expect(File.read(victim)).to eq("keep me\n")

        # A link of our own (or root's: /dev/stdout) is followed.
        own = File.join(dir, 'own.txt')
        File.symlink(file, own)
        trace(app, '-o', own, '-m', 'Job#step') { sleep 0.3 }
        expect(File.read(file)).to match(/\AJob#step <\d+\.\d{6}>\n/)
        r = trace(app, '-o', '/dev/stdout', '-m', 'Job#step') { sleep 0.3 }
        expect(r.stdout).to match(/^Job#step <\d+\.\d{6}>\n/)

        hard = File.join(dir, 'hard.txt')
        File.link(victim, hard)
        r = rbtrace('-p', app.pid, '-o', hard, '-m', 'Job#step')
        expect(r.exitstatus).to eq(1)
        expect(r.stderr).to include('has other hard links')
        expect(File.read(victim)).to eq("keep me\n")

        fifo = File.join(dir, 'fifo')
        File.mkfifo(fifo)
        r = rbtrace('-p', app.pid, '-o', fifo, '-m', 'Job#step')
        expect(r.exitstatus).to eq(1)
        expect(r.stderr).to include('it is a FIFO that no process reads: start its reader first')

        # --convert -o likewise
        saved = File.join(dir, 'saved.txt')
        File.write(saved, "Job#step <0.000010>\n")
        r = rbtrace('--convert', 'json', saved, '-o', link)
        expect(r.exitstatus).to eq(1)
        expect(r.stderr).to include('is a symbolic link')
        expect(File.read(victim)).to eq("keep me\n")
        out = File.join(dir, 'out.jsonl')
        File.write(out, 'x' * 10_000)
        expect(rbtrace('--convert', 'json', saved, '-o', out)).to be_success
        expect(File.read(out)).to start_with('{').and(end_with("}\n"))
        r = rbtrace('--convert', 'json', saved, '-o', File.join(dir, 'new.jsonl'))
        expect(r).to be_success
        expect(File.stat(File.join(dir, 'new.jsonl')).mode & 0o777).to eq(0o600)
      ensure
        File.umask(old_umask)
      end
    end
  end

  it 'SIGTERM detaches cleanly like Ctrl-C' do
    client = start_client('-p', app.pid, '-m', 'Job#run')
    client.attached
    client.wait_for(/Job#run </)
    status = client.stop(:TERM)
    expect(status).to be_success
    expect(client.stderr).to include("*** detached from process #{app.pid}")
    expect(app).to be_alive
  end

  it '--timeout bounds the wait for a process that never answers' do
    # rbtrace is loaded, but the app replaced rbtrace's SIGURG handler.
    stubborn = start_target("trap('URG') {}\nputs 'ready'\nsleep").ready
    started = Time.now
    r = rbtrace('-p', stubborn.pid, '--timeout', '1', '-e', '1')
    expect(Time.now - started).to be < 5
    expect(r).not_to be_success
    expect(r.stderr).to match(/did not answer within 1/)
    # and the app said why, once, when it trapped URG
    expect(stubborn.stderr.scan("replaced rbtrace's SIGURG handler").size).to eq(1)
  end

  it 'bin/rbtrace (the Ruby stub) runs the compiled client' do
    r = rbtrace('-p', app.pid, '-e', '6 * 7', client: RBTraceSpec::STUB)
    expect(r.stdout).to eq(">> 6 * 7\n=> 42\n")
  end
end
