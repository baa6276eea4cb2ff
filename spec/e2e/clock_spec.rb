require_relative '../spec_helper'

# The events' clock (ext/rbtrace/clock.c): the TSC converted to
# CLOCK_MONOTONIC nanoseconds where the kernel keeps time with the TSC or
# the CPU says it is invariant, clock_gettime elsewhere (and with
# RBTRACE_CLOCK=clock_gettime). What it does when the TSC jumps is
# test/c/test_clock.c's. Either way it must follow CLOCK_MONOTONIC and
# never go back, across the renewals of its anchor (every 100 ms).
RSpec.describe 'the events clock' do
  it 'follows CLOCK_MONOTONIC to within a millisecond and never goes back, for 1.5 s' do
    app = start_target(<<~'RUBY')
      worst = 0
      last = 0
      back = 0
      stop = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1.5
      while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop
        before = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
        ours = RBTrace.clock_ns
        after = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
        back += 1 if ours < last
        last = ours
        off = ours < before ? before - ours : (ours > after ? ours - after : 0)
        worst = off if off > worst
      end
      puts "source #{RBTrace.clock_source} worst #{worst} back #{back}"
    RUBY
    line = app.wait_for(/^source/, timeout: 20)
    source, worst, back = line.match(/source (\S+) worst (\d+) back (\d+)/).captures
    expect(%w[tsc clock_gettime]).to include(source)
    expect(Integer(back)).to eq(0)
    expect(Integer(worst)).to be < 1_000_000
  end

  it 'keeps to clock_gettime with RBTRACE_CLOCK=clock_gettime, and still follows CLOCK_MONOTONIC' do
    app = start_target(<<~'RUBY', env: { 'RBTRACE_CLOCK' => 'clock_gettime' })
      RBTrace.clock_ns
      sleep 0.05 # past the time a rate is measured over
      before = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      ours = RBTrace.clock_ns
      after = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      puts "source #{RBTrace.clock_source} within #{before <= ours && ours <= after}"
    RUBY
    expect(app.wait_for(/^source/, timeout: 20)).to match(/source clock_gettime within true/)
  end
end
