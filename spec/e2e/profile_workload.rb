# The workload of known proportions that spec/e2e/profile_spec.rb profiles
# and bench/profile.rb measures: on the main thread Work#heavy does three
# times the work of Work#light (the same loop, 3x the turns); a thread
# sleeps (Sleeper#run); a thread spins (Spinner#run). So in wall mode each
# of the three threads has a third of the samples, the sleeper's blocked
# in Kernel#sleep; in cpu mode the sleeper has none; and Work#heavy has
# 75 % of the samples of the two, in either mode.
module ProfileWorkload
  CLASSES = <<~'RUBY'.freeze
    class Work
      def spin(n)
        i = 0
        i += 1 while i < n
        i
      end

      def heavy = spin(30_000)
      def light = spin(10_000)

      def run
        loop do
          heavy
          light
        end
      end
    end

    class Sleeper
      def run = loop { sleep 1 }
    end

    class Spinner
      # long turns, one Work: under YJIT spin(5_000) was short enough that
      # 5-10 % of the samples fell between the turns (Class#new, the block)
      def run
        work = Work.new
        loop { work.spin(50_000) }
      end
    end
  RUBY

  SOURCE = <<~RUBY.freeze
    #{CLASSES}
    Thread.new { Sleeper.new.run }.name = 'sleeper'
    Thread.new { Spinner.new.run }.name = 'spinner'
    puts "ready"
    Work.new.run
  RUBY
end
