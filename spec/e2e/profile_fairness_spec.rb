require_relative '../spec_helper'

# --profile must not change how the app's threads share the GVL. Two
# threads of the app spin; each second the app says what share of their
# CPU time the first had (each thread's CPU clock, from the kernel's
# schedstat). Ruby's time slices give each half, window after window;
# under --profile the windows must look the same. Its drain takes the GVL
# ten times a second on rbtrace's helper thread: asking the busy thread to
# hand it over (as commands do) upset the order of the app's threads, and
# one had 29 to 69 % of their CPU over 2 s instead of half (Ruby 4.0).
RSpec.describe '--profile and the GVL' do
  FAIRNESS_APP = <<~'RUBY'.freeze
    def cpu_ns(thread) = File.read("/proc/self/task/#{thread.native_thread_id}/schedstat").to_i
    busy = Array.new(2) { Thread.new { i = 0; loop { i += 1 } } }
    sleep 0.01 until busy.all?(&:native_thread_id)
    puts 'ready'
    last = busy.map { cpu_ns(_1) }
    loop do
      sleep 1
      now = busy.map { cpu_ns(_1) }
      first, second = now.zip(last).map { |n, l| n - l }
      last = now
      puts format('share %.1f', 100.0 * first / (first + second))
    end
  RUBY

  # The first thread's share in each of the next n windows (the window
  # under way is not one of them: it began before).
  def windows(app, n)
    seen = app.drain.size
    app.wait_for(->(_line) { app.lines.size > seen + n }, timeout: n + 20)
    app.lines[seen + 1, n].map { |l| Float(l[/\Ashare (\d+\.\d)\z/, 1]) }
  end

  def off_half(shares)
    shares.sum { |s| (s - 50).abs } / shares.size
  end

  it 'leaves each of two busy threads its half, window after window' do
    app = start_target(FAIRNESS_APP).ready
    untraced = windows(app, 6)
    client = start_client('-p', app.pid, '--profile', '--format', 'folded', '--duration', '9')
    client.attached
    traced = windows(app, 6)
    say "first thread's share a second: untraced #{untraced.join(' ')} (#{off_half(untraced).round(1)} off half); " \
        "under --profile #{traced.join(' ')} (#{off_half(traced).round(1)})"
    # The app's own: half each, give or take a time slice (10 %); under
    # --profile the mean distance from half (which a loaded machine's stray
    # window moves little) a few points more at most: 2 to 4 here, where
    # the hand-offs made it 13.
    expect(off_half(untraced)).to be <= 6
    expect(off_half(traced)).to be <= [off_half(untraced), 3].max + 5
    expect(client.wait(timeout: 30)).to be_success, client.outputs
    expect(client.stdout).to match(/\AThread t\d+[^\n]* \d+\n/) # it did sample
  end
end
