require_relative '../spec_helper'

# rbtrace --gc: each garbage collection as it ends, inline with the other
# trace lines: minor or major (and why), what started it, and the time spent
# in it in all, marking and sweeping, measured with the VM's GC events.
RSpec.describe 'garbage collections (--gc)' do
  APP_GC = <<~'RUBY'.freeze
    def churn; Array.new(20_000) { "x" * 30 }.size; end
    puts "ready"
    n = 0
    loop do
      churn
      GC.start if (n += 1) % 5 == 0
      sleep 0.02
    end
  RUBY

  let(:app) { start_target(APP_GC).ready }
  let(:secs) { '(\d+\.\d{6})' }

  def gc_lines(out)
    out.scan(/^(?:  )?GC (minor|major \((\w+)\)) by (\w+) <#{secs}> \(mark #{secs}, sweep #{secs}\)$/)
  end

  it 'shows minor collections and GC.start as a forced major one, with their times' do
    out = trace(app, '--gc', until_output: /GC minor.*GC major \(force\)|GC major \(force\).*GC minor/m).stdout
    lines = gc_lines(out)
    expect(lines).not_to be_empty
    expect(lines.map(&:first)).to include('minor')
    expect(lines).to include(['major (force)', 'force', 'method', anything, anything, anything])
    expect(lines.select { |l| l[0] == 'minor' }.map { |l| l[2] }).to include('newobj')
    lines.each do |_kind, _why, _by, total, mark, sweep|
      # total = mark + sweep, each rounded to the microsecond on its own.
      expect((Float(mark) + Float(sweep) - Float(total)).abs).to be <= 0.0000015
    end
    # Every line of the output is a GC line.
    expect(out.lines.size).to eq(lines.size)
  end

  it 'prints collections inline with traced calls, inside the call that ran them' do
    out = trace(app, '--gc', '-m', 'Object#churn', until_output: /^  GC minor .*\n(  GC .*\n)*Object#churn </).stdout
    # Minor ones, and now and then a major one (nofree) that churn's garbage set off.
    expect(out).to match(/^Object#churn\n(  GC (minor|major \(\w+\)) by .*\n)+Object#churn <\d+\.\d{6}>$/)
  end

  it 'survives GC.stress (a collection at every allocation) and leaves the app running' do
    app = start_target(<<~'RUBY').ready
      puts "ready"
      GC.stress = true
      loop { Array.new(10) { "y" * 5 }; puts "tick" }
    RUBY
    out = trace(app, '--gc', until_output: /(GC .*\n){20}/).stdout
    expect(gc_lines(out).size).to be >= 20
    seen = app.drain.count('tick')
    app.wait_for(->(_) { app.lines.count('tick') > seen + 2 }, timeout: 30)
    expect(app).to be_alive
  end

  it 'shows nothing after the detach: the hooks are removed' do
    trace(app, '--gc', until_output: /GC /)
    r = rbtrace('-p', app.pid, '-e', 'GC.start; :ok')
    expect(r.stdout).to eq(">> GC.start; :ok\n=> :ok\n")
    expect(r.stdout).not_to include('GC major')
  end
end
