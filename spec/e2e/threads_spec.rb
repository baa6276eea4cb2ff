require_relative '../spec_helper'

RSpec.describe 'threads' do
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
end
