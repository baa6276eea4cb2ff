require_relative '../spec_helper'

RSpec.describe 'threads' do
  NO_MN_THREADS = 'this Ruby runs every Ruby thread on a native thread of its own (M:N threads: Ruby 3.3+)'
  # Whether a Ruby started with env runs two Ruby threads on one native
  # thread at some point (asked of a child Ruby).
  MN_THREADS = lambda do |env|
    code = 'ids = 4.times.map { Thread.new { 5.times.map { sleep 0.005; Thread.current.native_thread_id } } }' \
           '.flat_map(&:value); print ids.compact.uniq.size < 4'
    IO.popen(env, [RbConfig.ruby, '-e', code], &:read) == 'true'
  end

  it 'tracks nesting per thread and says which thread each line is from' do
    app = start_target(<<~'RUBY').ready
      class Pair
        def outer(n); inner(n); end
        def inner(n); sleep(0.001 * n); end
      end
      threads = 2.times.map { |i| Thread.new { loop { Pair.new.outer(i + 1) } } }
      puts "ready"
      threads.each(&:join)
    RUBY
    out = trace(app, '-m', 'Pair#outer', 'Pair#inner', until_output: /\[t2\].*\[t1\].*\[t2\].*\[t1\]/m) { sleep 0.3 }.stdout
    lines = out.lines.map(&:chomp).reject(&:empty?)
    tagged = lines.grep(/\A\[t\d+\] /)
    expect(tagged.size).to be > 10
    # every thread's own lines nest correctly
    %w[t1 t2].each do |t|
      mine = tagged.grep(/\A\[#{t}\] /).map { |l| l.sub(/\A\[#{t}\] /, '') }
      depth = nil
      mine.each do |l|
        name = l.strip.sub(/ <.*/, '')
        indent = l[/\A */].size
        case name
        when 'Pair#outer' then expect(indent).to eq(0)
        when 'Pair#inner' then expect(indent).to eq(2)
        end
        depth = indent
      end
      expect(depth).not_to be_nil
    end
  end

  it 'prints no thread prefix while only one thread emits events' do
    app = start_target(<<~'RUBY').ready
      puts "ready"
      Thread.new { loop { Process.pid; sleep 0.02 } }.join
    RUBY
    out = trace(app, '-m', 'Process.pid', until_output: /(Process\.pid <.*\n){3}/).stdout
    expect(out).not_to include('[t')
  end

  # With RUBY_MN_THREADS=1 (Ruby 3.3+) Ruby threads take turns on shared
  # native threads (RUBY_MAX_CPU=1: one), and one moves between them: each
  # [tN] must still be one Ruby thread, and each Ruby thread one [tN].
  it 'tells Ruby threads apart when they share native threads (M:N)' do
    mn_env = { 'RUBY_MN_THREADS' => '1', 'RUBY_MAX_CPU' => '1' }
    skip NO_MN_THREADS unless MN_THREADS.call(mn_env)
    app = start_target(<<~'RUBY', env: mn_env).ready
      class Pair
        def outer(i); inner(i); end
        def inner(i); sleep 0.002; end
      end
      threads = 3.times.map { |i| Thread.new { loop { Pair.new.outer(i) } } }
      puts "ready"
      threads.each(&:join)
    RUBY
    tagged = /^\[t(\d+)\] Pair#outer\(i=(\d)\)/
    out = trace(app, '-m', 'Pair#outer(i)', 'Pair#inner',
                until_output: ->(o) { o.scan(tagged).uniq.size >= 3 && o.scan(tagged).size > 30 }).stdout
    pairs = out.scan(tagged).uniq
    expect(pairs.map(&:first).uniq.size).to eq(pairs.size), "a [tN] shows several Ruby threads: #{pairs}"
    expect(pairs.map(&:last).uniq.size).to eq(pairs.size), "a Ruby thread shows as several [tN]: #{pairs}"
    expect(pairs.map(&:last).sort).to eq(%w[0 1 2])
  end
end
