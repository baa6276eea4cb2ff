# examples/sample_app.rb - a small app to try rbtrace on. It loops forever,
# greeting one name every 0.2 s, and prints nothing but its pid.
#
#   ruby -Ilib -rrbtrace examples/sample_app.rb      # from a checkout, after rake compile
#
# then, from another terminal:
#
#   bin/rbtrace -p PID -m 'Greeter#greet(name)' 'String#gsub' 'Dir.pwd' sleep
#   bin/rbtrace -p PID -e 'Thread.list.size'
require 'rbtrace'

# Does a little recognisable work per call: String#gsub, String#* and Dir.pwd.
class Greeter
  def initialize(greeting)
    @greeting = greeting
    @count = 0
  end

  attr_reader :count

  def greet(name)
    @count += 1
    text = "#{@greeting}, NAME!".gsub('NAME', name)
    "#{underline(text)} (from #{where})"
  end

  private

  def underline(text)
    "#{text}\n#{'-' * text.size}"
  end

  def where
    File.basename(Dir.pwd)
  end
end

names = %w[Ada Grace Barbara Margaret]
greeter = Greeter.new('Hello')
$stdout.puts "sample app running as pid #{Process.pid}"
$stdout.flush

loop do
  greeter.greet(names[greeter.count % names.size])
  sleep 0.2
end
