require_relative '../spec_helper'

# The test matrix (script/test) runs this suite on several Rubies; this
# makes sure that a leg tests what it says: the targets run the Ruby that
# runs the specs, and with YJIT on when the leg asks for it
# (RBTRACE_EXPECT_YJIT=1, set by the 3.4-yjit leg with RUBYOPT=--yjit).
RSpec.describe 'the Ruby under test' do
  it 'is the Ruby that runs the specs, in the targets too' do
    app = start_target('puts "ready"; sleep').ready
    r = rbtrace('-p', app.pid, '-e', 'RUBY_DESCRIPTION')
    expect(r.stdout).to eq(">> RUBY_DESCRIPTION\n=> #{RUBY_DESCRIPTION.inspect}\n"), r.stderr
    puts "\n    targets run #{RUBY_DESCRIPTION}"
  end

  it 'has YJIT enabled in the targets when the leg asks for it' do
    app = start_target('puts "ready"; sleep').ready
    r = rbtrace('-p', app.pid, '-e', 'defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?')
    # Otherwise the targets are as this process is (they inherit RUBYOPT).
    here = defined?(RubyVM::YJIT) ? RubyVM::YJIT.enabled? : false
    expected = ENV['RBTRACE_EXPECT_YJIT'] == '1' || here
    answer = r.stdout.lines.last.to_s.delete_prefix('=> ').chomp
    expect(%w[true].include?(answer)).to eq(expected), r.stdout + r.stderr
  end
end
