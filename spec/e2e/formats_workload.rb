# The deterministic workload formats_spec.rb and convert_spec.rb trace from
# its first line (--exec): the same calls every run, so that each format,
# and each conversion of a text trace, can be checked against one count.
module FormatsWorkload
  # Worker#run 5, #step 15, #leaf 35, #other 5, Marker#finished 1.
  SOURCE = <<~'RUBY'.freeze
    class Worker
      def run
        3.times { step }
        other
      end

      def step
        leaf(1)
        leaf(2)
      end

      def leaf(n) = n * 2
      def other = leaf(3)
    end

    class Marker
      def finished = :ok
    end

    5.times { Worker.new.run }
    Marker.new.finished
  RUBY

  COUNTS = { 'Worker#run' => 5, 'Worker#step' => 15, 'Worker#leaf' => 35,
             'Worker#other' => 5, 'Marker#finished' => 1 }.freeze
  SELECTORS = %w[Worker#run Worker#step Worker#leaf Worker#other Marker#finished].freeze
end
