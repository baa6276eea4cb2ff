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

  it 'survives an exception whose #message raises, and the app does not notice' do
    out = trace(app, '--raise', until_output: /raise Exploding/).stdout
    expect(out).to match(/^raise Exploding: \(#message raised RuntimeError\) at -e:\d+$/)
    seen = app.drain.count('tick')
    app.wait_for(->(_) { app.lines.count('tick') > seen + 2 })
    expect(app.stderr).to eq('')
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
end
