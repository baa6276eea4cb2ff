require_relative '../spec_helper'

RSpec.describe 'firehose (-f)' do
  it 'shows every method call in the process, nested' do
    app = start_target(<<~'RUBY').ready
      class Shop
        def buy(n) = price(n) * 2
        def price(n) = n.to_s.size
      end
      puts "ready"
      loop { Shop.new.buy(42); sleep 0.05 }
    RUBY
    out = trace(app, '-f', until_output: /^Shop#buy <.*^Kernel#sleep <0\.0/m).stdout
    expect(out).to match(/^Shop#buy\n  Shop#price\n    Integer#to_s <\d+\.\d{6}>\n    String#size <\d+\.\d{6}>\n  Shop#price <\d+\.\d{6}>\n  Integer#\* <\d+\.\d{6}>\nShop#buy <\d+\.\d{6}>\n/)
    expect(out).to match(/^Kernel#sleep <0\.0/)
  end
end
