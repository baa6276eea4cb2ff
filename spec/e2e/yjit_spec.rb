require_relative '../spec_helper'

# Under YJIT, tracing must see the same calls and the app must compute the
# same results: before, while and after YJIT compiled the callers of a
# traced method, and after the wrapper is gone again. The target runs with
# --yjit-call-threshold=1 so that everything it runs twice is compiled
# before rbtrace attaches.
RSpec.describe 'under YJIT' do
  APP_YJIT = <<~'RUBY'.freeze
    class Pricer
      def price(x); x * 3 + 1; end
    end

    # The caller YJIT compiles: calls a Ruby method and a C method (Hash#key?).
    def total(pricer, n)
      s = 0
      i = 0
      while i < n
        s += pricer.price(i)
        s += 1 if { i => 1 }.key?(i)
        i += 1
      end
      s
    end

    # sum(3i + 1) + n for i < n
    EXPECTED = 3 * (50 * 49 / 2) + 50 + 50
    pricer = Pricer.new
    20.times { total(pricer, 50) }
    stats = RubyVM::YJIT.runtime_stats
    puts "ready yjit=#{RubyVM::YJIT.enabled?} code=#{stats[:inline_code_size]}"
    loop do
      r = total(pricer, 50)
      puts(r == EXPECTED ? "ok" : "MISMATCH #{r}")
      sleep 0.01
    end
  RUBY

  before do
    skip "this Ruby (#{RUBY_DESCRIPTION}) was built without YJIT" unless defined?(RubyVM::YJIT)
  end

  let(:app) do
    start_target(APP_YJIT, ruby_args: ['--yjit', '--yjit-call-threshold=1']).tap { |t| t.wait_for(/^ready /) }
  end

  # Waits for count more "ok" lines and fails on any MISMATCH.
  def expect_correct(app, count: 5)
    seen = app.drain.count('ok')
    app.wait_for(->(_) { app.lines.count('ok') >= seen + count })
    expect(app.lines.grep(/MISMATCH/)).to be_empty
  end

  it 'runs with YJIT on and compiled code before rbtrace attaches' do
    line = app.lines.grep(/^ready /).first
    expect(line).to match(/yjit=true code=[1-9]\d*$/)
  end

  it 'traces a wrapped Ruby method and a wrapped C method called from compiled code' do
    expect_correct(app)
    r = trace(app, '-m', 'Pricer#price', 'Hash#key?', until_output: /Pricer#price <.*Hash#key\? </m)
    expect(r.stdout).to match(/^Pricer#price <\d+\.\d{6}>$/)
    expect(r.stdout).to match(/^Hash#key\? <\d+\.\d{6}>$/)
    expect(r.stderr).not_to include('global VM hooks')
    expect_correct(app)
  end

  it 'keeps results right after the wrapper is removed from compiled callers, and traces again' do
    3.times do
      trace(app, '-m', 'Pricer#price', until_output: /Pricer#price </)
      expect_correct(app)
    end
    owner = rbtrace('-p', app.pid, '-e', 'Pricer.instance_method(:price).owner')
    expect(owner.stdout).to end_with("=> Pricer\n")
    # Nothing of the old wrapper is still reporting: a trace of another
    # method shows no Pricer#price line.
    r = trace(app, '-m', 'Integer#*', until_output: /Integer#\* </)
    expect(r.stdout).not_to include('Pricer#price')
  end

  it 'evaluates trace expressions (a TracePoint on the method) in compiled code' do
    r = trace(app, '-m', 'Pricer#price(x, self.class)', until_output: /x=49/)
    expect(r.stdout).to match(/^Pricer#price\(x=49, self\.class=Pricer\) <\d+\.\d{6}>$/)
    expect_correct(app)
  end

  it 'shows every call with its nesting under the firehose' do
    out = trace(app, '--firehose', until_output: /^Object#total <.*^Object#total </m).stdout
    block = out[/^Object#total\n(?:  .*\n)+?Object#total <\d+\.\d{6}>$/]
    expect(block).not_to be_nil, out[0, 2000]
    expect(block.scan(/^  Pricer#price <\d+\.\d{6}>$/).size).to eq(50)
    expect(block.scan(/^    Integer#\* <\d+\.\d{6}>$/).size).to eq(50)
    expect(block.scan(/^  Hash#key\? <\d+\.\d{6}>$/).size).to eq(50)
    expect_correct(app)
  end

  it 'evaluates code that calls the compiled methods' do
    r = rbtrace('-p', app.pid, '-e', 'total(Pricer.new, 50)')
    expect(r.stdout).to eq(">> total(Pricer.new, 50)\n=> #{(3 * (50 * 49 / 2)) + 100}\n")
    expect_correct(app)
  end
end
