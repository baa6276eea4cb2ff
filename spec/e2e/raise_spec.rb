require_relative '../spec_helper'

# rbtrace --raise: each exception raised in the process, with its class,
# message and where it was raised, inline with the other trace lines.
RSpec.describe 'exceptions (--raise)' do
  APP_RAISE = <<~'RUBY'.freeze
    class Exploding < StandardError
      def message; raise("message exploded"); end
    end

    def parse; Integer("zz"); end
    def work
      parse
    rescue ArgumentError
      :rescued
    end

    puts "ready"
    loop do
      work
      begin
        raise Exploding
      rescue Exploding
      end
      begin
        raise "two\nlines"
      rescue RuntimeError
      end
      puts "tick"
      sleep 0.05
    end
  RUBY

  let(:app) { start_target(APP_RAISE).ready }

  it 'shows the class, message and the line that raised, also for exceptions raised in C' do
    out = trace(app, '--raise', until_output: /raise RuntimeError/).stdout
    expect(out).to match(/^raise ArgumentError: invalid value for Integer\(\): "zz" at -e:\d+$/)
    expect(out).to match(/^raise RuntimeError: two\\nlines at -e:\d+$/)
  end

  it 'never calls an exception\'s #message: one raised without a message shows its class alone' do
    out = trace(app, '--raise', until_output: /raise Exploding/).stdout
    expect(out).to match(/^raise Exploding at -e:\d+$/)
    expect(out).not_to include('message exploded')
    seen = app.drain.count('tick')
    app.wait_for(->(_) { app.lines.count('tick') > seen + 2 })
    expect(app.stderr).to eq('')
  end

  # An app's inspect may do anything (an ActiveRecord relation's queries
  # the database): --raise reads what the exception holds, through the C
  # API, and calls none of the methods an app may override.
  it "runs no app code: no receiver's #inspect, no exception's #message, #to_s, #class, #backtrace" do
    counting = start_target(<<~'RUBY').ready
      $calls = Hash.new(0)
      module Counting
        %i[inspect to_s message class backtrace full_message detailed_message name].each do |m|
          define_method(m) { |*a, **k| $calls[m] += 1; super(*a, **k) }
        end
      end
      class Bar
        include Counting
        def work; nope; end
      end
      class Boom < StandardError; include Counting; end
      class Bar::Anon < StandardError; end
      Bar.singleton_class.prepend(Counting)
      def each_raise
        [-> { Bar.new.foo }, -> { Bar.new.work }, -> { raise Boom, "plain text" },
         -> { Bar::Nope }, -> { nil.foo }, -> { Bar.zap }, -> { raise Boom }].each do |f|
          f.call
        rescue NameError, Boom
        end
      end
      # what the app's methods see of one round, untraced (Ruby itself
      # calls an overridden #backtrace when raising) and while traced
      def round; $calls.clear; each_raise; $calls.sort.inspect; end
      puts "untraced #{round}"
      puts "ready"
      loop { puts "calls #{round}"; sleep 0.05 }
    RUBY
    untraced = counting.lines.grep(/^untraced /).first.delete_prefix('untraced ')
    out = trace(counting, '--raise', until_output: /(^raise .*\n){14}/).stdout # two rounds
    seen = counting.drain.size
    counting.wait_for(->(l) { counting.lines.size > seen + 2 && l.start_with?('calls') })
    expect(counting.drain.grep(/^calls/).uniq).to eq(["calls #{untraced}"])
    expect(out).to match(/^raise NoMethodError: undefined method [`']foo' for an instance of Bar at -e:\d+$/)
    expect(out).to match(/^raise NameError: undefined local variable or method [`']nope' for an instance of Bar at -e:\d+$/)
    expect(out).to match(/^raise Boom: plain text at -e:\d+$/)
    expect(out).to match(/^raise Boom at -e:\d+$/)
    expect(out).to match(/^raise NameError: uninitialized constant Bar::Nope at -e:\d+$/)
    expect(out).to match(/^raise NoMethodError: undefined method [`']foo' for nil(:NilClass)? at -e:\d+$/)
    expect(out).to match(/^raise NoMethodError: undefined method [`']zap' for (Bar:Class|class Bar) at -e:\d+$/)
  end

  it 'prints exceptions inline, inside the traced call that raised them' do
    out = trace(app, '--raise', '-m', 'Object#work', until_output: /^Object#work <.*\n/m).stdout
    expect(out).to match(/^Object#work\n  raise ArgumentError: .* at -e:\d+\nObject#work <\d+\.\d{6}>$/)
  end

  it "does not show rbtrace's own exceptions (a bad selector is parsed by raising)" do
    r = trace(app, '--raise', '-m', 'NoSuchClass#x', until_output: /raise RuntimeError/)
    expect(r.stderr).to include('*** error: NoSuchClass#x')
    expect(r.stdout).not_to match(/NameError|NoSuchClass/)
  end
  # Rails' middlewares each rescue an exception and raise it again: one
  # exception, five raises. The first line says it, and how many times it
  # was raised again and where last; --raise-all shows every one, marked.
  describe 're-raises of one exception' do
    APP_RERAISE = <<~'RUBY'.freeze
      class Boom < StandardError; end
      def endpoint; raise Boom, "no such record"; end
      def middleware(n)
        n.zero? ? endpoint : middleware(n - 1)
      rescue => e
        raise
      end
      def unrelated; raise Boom, "no such record"; rescue Boom; end
      puts "ready"
      loop do
        begin
          middleware(3)
        rescue Boom => e
          raise e rescue nil   # raised again with `raise e`: the same object
        end
        unrelated              # a new exception, alike: not a re-raise
        puts "tick"
        sleep 0.1
      end
    RUBY

    let(:app) { start_target(APP_RERAISE).ready }

    it 'shows the first raise once, with the count and the last place of its re-raises' do
      out = trace(app, '--raise', until_output: /(^raise Boom.*\n){6}/).stdout
      lines = out.lines.grep(/Boom/)
      first = lines.index { |l| l.include?('re-raised') }
      expect(first).not_to be_nil, out
      pair = lines[first, 2]
      expect(pair[0]).to match(/\Araise Boom: no such record at -e:3 \(re-raised 5 times, last at -e:15\)\n\z/)
      expect(pair[1]).to match(/\Araise Boom: no such record at -e:9\n\z/)
      expect(out).not_to match(/^re-raise/)
    end

    # --summary's raises: one exception raised once, in endpoint; its
    # re-raises in the 4 middleware calls are not 4 more raises.
    it '--summary counts an exception once, where it was first raised, not at each re-raise' do
      out = trace(app, '-m', 'Object#endpoint', 'Object#middleware', 'Object#unrelated', '--raise', '--summary') do
        app.wait_for(->(_) { app.lines.count('tick') >= 4 })
      end.stdout
      rows = out.lines.to_h { |l| [l[/\A\S+/], l.split.values_at(1, -1).map(&:to_i)] }
      expect(rows['Object#endpoint'][0]).to be >= 2
      expect(rows['Object#endpoint'][1]).to eq(rows['Object#endpoint'][0]), out # each call raised once
      expect(rows['Object#unrelated'][1]).to eq(rows['Object#unrelated'][0]), out
      expect(rows['Object#middleware'][0]).to be >= 8
      expect(rows['Object#middleware'][1]).to eq(0), out
    end

    it '--raise-all shows each re-raise on a line of its own, marked' do
      out = trace(app, '--raise-all', until_output: /(^(re-)?raise Boom.*\n){14}/).stdout
      lines = out.lines.grep(/Boom/)
      start = lines.index { |l| l.start_with?('raise Boom: no such record at -e:3') }
      expect(start).not_to be_nil, out
      expect(lines[start, 7].map { |l| "#{l[/\A\S+/]} #{l[/-e:\d+/]}" })
        .to eq(['raise -e:3', 're-raise -e:7', 're-raise -e:7', 're-raise -e:7', 're-raise -e:7',
                're-raise -e:15', 'raise -e:9'])
      expect(out).not_to include('re-raised')
    end

    # Ruby may switch threads while a thread's hook finds where its
    # exception was raised (rbtrace's own Ruby code): the other threads'
    # raises meanwhile are the app's. One flag for the whole process skipped
    # them: of two threads raising at once, a third to half of each one's
    # raises were missing, and a re-raise then showed as a first raise (a
    # Rails request's, in spec/real).
    it 'shows every raise of two threads raising at once' do
      racing = start_target(<<~'RUBY').ready
        class Boom < StandardError; end
        puts "ready"
        1.step do |round|
          counts = Array.new(2) do |t|
            Thread.new do
              n = 0
              stop = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.2
              while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop
                begin
                  raise Boom, "r#{round} t#{t} #{n}"
                rescue Boom
                end
                n += 1
              end
              n
            end
          end.map(&:value)
          puts "round #{round} #{counts.join(' ')}"
          sleep 0.05
        end
      RUBY
      client = start_client('-p', racing.pid, '--raise')
      client.attached
      # The second round to end from here began after the attach.
      known = racing.drain.size
      racing.wait_for(->(_) { racing.lines.size >= known + 2 })
      round, *counts = racing.lines[known + 1].split.drop(1).map(&:to_i)
      client.wait_for(lambda { |out|
        counts.each_with_index.all? { |n, t| out.include?("Boom: r#{round} t#{t} #{n - 1} at") }
      })
      expect(client.stop).to be_success
      shown = counts.each_index.map { |t| client.stdout.scan(/Boom: r#{round} t#{t} \d+ at/).size }
      expect(client.stderr).not_to include('lost')
      expect(shown).to eq(counts)
    end

    # Issue 21: a Puma worker's threads raise in turn. Each thread's last
    # exception is remembered apart, however many threads raise between
    # its raise and its re-raise (one slot a thread, by a hash of its id,
    # showed one worker in three some re-raises as raises).
    it 'tells a re-raise on each of 24 threads raising in between' do
      threads_app = start_target(<<~'RUBY').ready
        class Boom < StandardError; end
        puts "ready"
        1.step do |round|
          raised, go = Queue.new, Queue.new
          threads = Array.new(24) do |i|
            Thread.new do
              raise Boom, "round #{round} thread #{i}"
            rescue Boom => e
              raised << true
              go.pop
              raise e rescue nil
            end
          end
          24.times { raised.pop }
          24.times { go << true }
          threads.each(&:join)
          puts "round"
          sleep 0.1
        end
      RUBY
      out = trace(threads_app, '--raise-all', until_output: ->(o) { o.scan('re-raise Boom').size >= 48 }).stdout
      # The first raise is on line 8 (the target's code starts with lines of
      # its own), the re-raise on line 12. A round under way at the attach
      # shows re-raises whose raise came before it, as raises: only the
      # exceptions whose raise was traced are counted.
      shown = out.lines.filter_map { |l| l.match(/\A(?:\[t\d+\] )?(\S+) Boom: (round \d+ thread \d+) at -e:(\d+)$/) }
      firsts = shown.select { |m| m[3] == '8' }
      expect(firsts.map { |m| m[1] }).to all(eq('raise'))
      traced = firsts.map { |m| m[2] }
      agains = shown.select { |m| m[3] == '12' && traced.include?(m[2]) }
      expect(agains.map { |m| "#{m[1]} #{m[2]}" }).to eq(agains.map { |m| "re-raise #{m[2]}" })
      expect(agains.size).to be >= 48
    end
  end
end
