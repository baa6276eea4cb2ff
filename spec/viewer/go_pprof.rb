# Go's pprof (`go tool pprof`, Debian's golang-go, installed by
# script/setup-viewer) run on --profile's pprof files, and its text read
# back: -top's rows, -tags' values, the header; and the file read by a
# decoder of our own, to compare go's figures with.
require 'open3'
require 'stringio'
require 'zlib'

module GoPprof
  module_function

  # The go command: RBTRACE_GO, or go on the PATH; raises, saying what to
  # run, when there is none (CI installs it: a missing go fails there).
  def go
    candidates = ENV['RBTRACE_GO'] ? [ENV['RBTRACE_GO']] : ENV.fetch('PATH', '').split(':').map { |dir| File.join(dir, 'go') }
    found = candidates.find { |f| File.file?(f) && File.executable?(f) }
    return found if found

    raise "go is not installed (go tool pprof reads the pprof files; looked for #{candidates.join(', ')}): " \
          "run bash script/setup-viewer (it installs Debian's golang-go)"
  end

  # `go tool pprof ARGS...` (60 s at most): [stdout, stderr, status].
  def pprof(*args)
    Open3.capture3('timeout', '60', go, 'tool', 'pprof', *args, stdin_data: '')
  end

  # -top's rows: { name => [flat, cum] }, as printed ("600", "1.50s").
  # The name is the rest of the row: "block in <main>" has spaces.
  def top_rows(text)
    rows = text.lines.drop_while { |l| !l.match?(/\A\s*flat\s+flat%\s+sum%\s+cum\s+cum%\s*\z/) }.drop(1)
    rows.to_h do |line|
      flat, _flat_pct, _sum_pct, cum, _cum_pct, name = line.strip.split(/\s+/, 6)
      [name, [flat, cum]]
    end
  end

  # -tags' values of key: { value => flat, as printed }.
  def tag_values(text, key)
    block = text[/^\s*#{Regexp.escape(key)}: Total \S+\n((?:\s+\S+ \(\s*[\d.]+%\): .*\n)+)/, 1]
    raise "no #{key} tag in go tool pprof -tags' output:\n#{text}" unless block

    block.lines.to_h do |line|
      value, name = line.match(/\A\s+(\S+) \(\s*[\d.]+%\): (.*)\n\z/).captures
      [name, value]
    end
  end

  # A time as pprof prints it ("1.50s", "600ms", "10us", "0") in seconds.
  def seconds(text)
    match = text.match(/\A([\d.]+)(ns|us|ms|s|mins|hrs)?\z/) or raise "not a time: #{text.inspect}"
    number, unit = match.captures
    Float(number) * { 'ns' => 1e-9, 'us' => 1e-6, 'ms' => 1e-3, 's' => 1, 'mins' => 60, 'hrs' => 3600, nil => 1 }.fetch(unit)
  end

  # profile.proto read back by a decoder of our own: the sample types
  # ([type, unit]), the period, and each sample's stack (function names,
  # innermost first), values and thread label.
  def decode(path)
    top = fields(Zlib::GzipReader.open(path, &:read))
    strings = top.select { |f, _| f == 6 }.map(&:last)
    field = ->(list, n) { list.find { |f, _| f == n }&.last }
    functions = top.select { |f, _| f == 5 }.to_h { |_, m| fields(m).to_h.values_at(1, 2) }
    locations = top.select { |f, _| f == 4 }.to_h do |_, m|
      loc = fields(m)
      [field.call(loc, 1), strings.fetch(functions.fetch(fields(field.call(loc, 4)).to_h.fetch(1)))]
    end
    samples = top.select { |f, _| f == 2 }.map do |_, m|
      sample = fields(m)
      label = fields(field.call(sample, 3)).to_h
      { stack: varints(field.call(sample, 1)).map { |id| locations.fetch(id) },
        values: varints(field.call(sample, 2)), label: [strings[label[1]], strings[label[2]]] }
    end
    { types: top.select { |f, _| f == 1 }.map { |_, m| fields(m).to_h.values_at(1, 2).map { |i| strings[i] } },
      period: field.call(top, 12), samples: samples }
  end

  # Each function's flat (the innermost frame) and cum (on the stack, once
  # a sample) sums of the samples' first values: what -top shows of them
  # with -sample_index=samples.
  def flat_cum(samples)
    samples.each_with_object(Hash.new { |h, k| h[k] = [0, 0] }) do |sample, rows|
      count = sample[:values].first
      rows[sample[:stack].first][0] += count
      sample[:stack].uniq.each { |name| rows[name][1] += count }
    end
  end

  # protobuf's wire format: [field number, value] (an Integer, or a String
  # of bytes), the only two wire types our encoder writes.
  def fields(bytes)
    io = StringIO.new(bytes)
    list = []
    until io.eof?
      key = varint(io)
      case key & 7
      when 0 then list << [key >> 3, varint(io)]
      when 2 then list << [key >> 3, io.read(varint(io))]
      else raise "wire type #{key & 7} in a pprof profile"
      end
    end
    list
  end

  def varints(bytes)
    io = StringIO.new(bytes.to_s)
    list = []
    list << varint(io) until io.eof?
    list
  end

  def varint(io)
    value = shift = 0
    loop do
      byte = io.readbyte
      value |= (byte & 0x7f) << shift
      shift += 7
      return value if byte < 0x80
    end
  end
end
