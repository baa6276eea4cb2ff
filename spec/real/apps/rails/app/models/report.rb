# Work for the slow action: a query, then ~30 ms spent two calls deep.
class Report
  class Broken < StandardError; end

  def build
    counts = Post.group(:author_id).count
    "#{summarize(counts)}\n"
  end

  def explode
    raise Broken, 'the report is broken'
  end

  private

  def summarize(counts)
    counts.map { |author_id, n| "#{author_id}: #{n} #{format_line(n)}" }.join("\n")
  end

  def format_line(n)
    sleep 0.006
    '*' * n
  end
end
