require_relative '../spec_helper'

# Trace expressions are Ruby code, run inside the traced call: while one
# thread evaluates them the VM may switch to another (a sleep, IO, a Mutex,
# or the timer). The other threads' events must still be recorded, and
# the evaluating thread's own calls (the expressions' work) never shown.
# Each app counts its calls once the spec says go (a file appears, after
# the client attached); the trace must show every call and every return,
# with its own values, and no loss: the client reads all the while and the
# ring (2 MiB) is never near full at these rates.
RSpec.describe 'trace expressions with several threads' do
  ADAPTER = <<~'RUBY'.freeze
    class Adapter
      def log(name, sql)
        yield
      end
    end
  RUBY

  # threads threads calling Adapter#log(name, sql) { sleep 0.0005 } (the
  # shape of ActiveRecord's log) for seconds; prints "done N" (N calls).
  def adapter_app(go, threads:, seconds:)
    start_target(<<~RUBY).ready
      #{ADAPTER}
      puts "ready"
      sleep 0.01 until File.exist?(#{go.inspect})
      workers = #{threads}.times.map do |t|
        Thread.new do
          n = 0
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + #{seconds}
          while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
            Adapter.new.log("q\#{t}", "SELECT \#{n}") { sleep 0.0005 }
            n += 1
          end
          n
        end
      end
      puts "done \#{workers.sum(&:value)}"
      sleep
    RUBY
  end

  # Runs app until it prints "done N", traced with args; returns N and the
  # client's output.
  def counted_trace(app, go, *args)
    client = start_client('-p', app.pid, *args)
    client.attached
    FileUtils.touch(go)
    calls = app.wait_for(/^done \d+$/, timeout: 60)[/\d+/].to_i
    expect(client.stop(timeout: 30)).to be_success
    [calls, client.stdout, client.stderr]
  end

  around do |example|
    @dir = Dir.mktmpdir('rbtrace-expr-threads')
    example.run
  ensure
    FileUtils.rm_rf(@dir)
  end

  let(:go) { File.join(@dir, 'go') }

  # The events the trace says were lost (its `*** N events lost` lines).
  def lost(out)
    out.scan(/^\*\*\* (\d+) events lost$/).flatten.sum(&:to_i)
  end

  # Every call line of one thread ([tN], or none for the first thread
  # before a second one shows) names that thread's query: values are
  # never another thread's.
  def expect_each_thread_its_own_values(out)
    by_thread = out.lines.grep(/Adapter#log\(/).group_by { |l| l[/\A\[t\d+\]/] || '[t1]' }
    by_thread.each_value do |lines|
      expect(lines.map { |l| l[/name="(q\d)"/, 1] }.uniq.size).to eq(1)
    end
  end

  it 'records every call and return of 4 threads (the shape of ActiveRecord\'s log)' do
    app = adapter_app(go, threads: 4, seconds: 3)
    calls, out, err = counted_trace(app, go, '-m', 'Adapter#log(name, sql)')
    expect(calls).to be > 1000
    expect(lost(out)).to eq(0)
    expect(err).not_to match(/events lost/)
    expect(out.scan(/Adapter#log\(name="q\d", sql="SELECT \d+"\)/).size).to eq(calls)
    expect(out.scan(/Adapter#log(?:\(.*\))? <\d+\.\d{6}>/).size).to eq(calls)
    expect_each_thread_its_own_values(out)
  end

  it 'records the other threads\' calls while an expression gives up the GVL' do
    app = adapter_app(go, threads: 3, seconds: 1)
    # (sleep's value is the whole seconds that passed on the wall clock: 0 or 1.)
    calls, out, = counted_trace(app, go, '-m', 'Adapter#log(name, sleep(0.0002))')
    expect(calls).to be > 300
    expect(lost(out)).to eq(0)
    expect(out.scan(/Adapter#log\(name="q\d", sleep\(0\.0002\)=\d\)/).size).to eq(calls)
    expect(out.scan(/Adapter#log(?:\(.*\))? <\d+\.\d{6}>/).size).to eq(calls)
    expect_each_thread_its_own_values(out)
  end

  # String#inspect is a C method: traced by a wrapper, which no VM hook
  # guards. The expressions call it (each value's #inspect, two a call):
  # those calls are rbtrace's, not the app's, and must not be shown. The
  # app's own (one a call, inside the block) must, also when made while
  # another thread's expressions sleep: only the evaluating thread's calls
  # are left out.
  def expect_own_calls_hidden(env: {})
    app = start_target(<<~RUBY, env: env).ready
      #{ADAPTER}
      puts "ready"
      sleep 0.01 until File.exist?(#{go.inspect})
      workers = 3.times.map do |t|
        Thread.new do
          200.times { |n| Adapter.new.log("q\#{t}", "SELECT \#{n}") { "x".inspect; sleep 0.0005 } }
        end
      end
      workers.each(&:join)
      puts "done 600"
      sleep
    RUBY
    calls, out, = counted_trace(app, go, '-m', 'Adapter#log(name, sql, sleep(0.0001))', 'String#inspect')
    expect(lost(out)).to eq(0)
    expect(out.scan(/Adapter#log\(name="q\d", sql="SELECT \d+", sleep\(0\.0001\)=\d\)/).size).to eq(calls)
    expect(out.scan(/String#inspect <\d+\.\d{6}>/).size).to eq(calls)
    # Each shown inside its Adapter#log call, one level in (a call that
    # another thread's lines interrupt shows as a line of its own, without
    # its duration, and again with it when it returns).
    expect(out.lines.grep(/String#inspect/)).to all(match(/\A(\[t\d+\] )?  String#inspect( <|$)/))
    expect_each_thread_its_own_values(out)
  end

  it 'shows none of the calls the expressions make, and all of the app\'s, on any thread' do
    expect_own_calls_hidden
  end

  # With RUBY_MN_THREADS=1 (Ruby 3.3+) the threads take turns on one native
  # thread: which one evaluates is still told apart (the Ruby thread, not
  # the native one).
  it 'tells the evaluating thread apart when threads share a native thread (M:N)' do
    mn_env = { 'RUBY_MN_THREADS' => '1', 'RUBY_MAX_CPU' => '1' }
    code = 'ids = 4.times.map { Thread.new { 5.times.map { sleep 0.005; Thread.current.native_thread_id } } }' \
           '.flat_map(&:value); print ids.compact.uniq.size < 4'
    unless IO.popen(mn_env, [RbConfig.ruby, '-e', code], &:read) == 'true'
      skip 'this Ruby runs every Ruby thread on a native thread of its own (M:N threads: Ruby 3.3+)'
    end
    expect_own_calls_hidden(env: mn_env)
  end
end
