require 'json'
require 'open3'
require_relative '../spec_helper'
require_relative 'formats_workload'

# rbtrace --convert FORMAT [FILE] (ext/rbtrace/cli/convert.c): a real
# traced app's text trace, written by the real client with -o, turned into
# json, chrome, folded and the summary. The calls per method are those
# --format json gives for the same deterministic workload (issue 24, "same
# numbers everywhere"), and the durations are the text's, to the
# microsecond the text has. Read from stdin too; a broken file fails with
# its line number and loses nothing converted before it.
RSpec.describe '--convert' do
  # FormatsWorkload's selectors, with Worker#leaf's expression (the text
  # trace's expression values are converted too).
  CONVERT_SELECTORS = ['Worker#run', 'Worker#step', 'Worker#leaf(n)', 'Worker#other',
                       'Marker#finished'].freeze

  let(:dir) { Dir.mktmpdir('rbtrace-convert') }

  after { FileUtils.rm_rf(dir) }

  # The workload traced once by the real client: the -o FILE's text.
  def record(*options)
    script = File.join(dir, 'workload.rb')
    File.write(script, FormatsWorkload::SOURCE)
    out = File.join(dir, "trace#{options.join}.out")
    r = rbtrace('-m', *CONVERT_SELECTORS, *options, '-o', out, '--exec', 'ruby', script)
    expect(r.exitstatus).to eq(0), r.stderr
    File.read(out)
  end

  def convert(format, file)
    rbtrace('--convert', format, file)
  end

  # The client reading stdin_data on its stdin.
  def convert_stdin(format, stdin_data)
    Timeout.timeout(20) { Open3.capture3(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '--convert', format, stdin_data: stdin_data) }
  end

  # {method => [microseconds, ...]} of the text: a call's duration is on
  # its line or on its return's ("name <S.uuuuuu>").
  def text_durations(text)
    text.lines.map { |l| l.sub(/\A\d\d:\d\d:\d\d\.\d{6} /, '').strip }
        .grep(/ <\d+\.\d{6}>\z/)
        .group_by { |l| l.sub(/[( ].*/, '') }
        .transform_values { |ls| ls.map { |l| (l[/<(\d+\.\d{6})>\z/, 1].to_r * 1_000_000).to_i }.sort }
  end

  def json_durations(text)
    calls = text.lines.map { |l| JSON.parse(l) }.select { |o| o['kind'] == 'call' }
    calls.group_by { |o| o['name'] }.transform_values { |os| os.map { |o| o['duration'] / 1000 }.sort }
  end

  def chrome_durations(text)
    xs = JSON.parse(text).fetch('traceEvents').select { |e| e['ph'] == 'X' }
    xs.group_by { |e| e['name'] }.transform_values { |es| es.map { |e| e['dur'].round }.sort }
  end

  # {leaf frame => summed weight} of the folded stacks.
  def folded_self(text)
    text.lines.each_with_object(Hash.new(0)) do |line, sums|
      stack, weight = line.split
      sums[stack.split(';').last] += weight.to_i
    end
  end

  # --summary's rows: {method => [calls, total µs]}.
  def summary_totals(text)
    text.lines.drop(2).to_h do |l|
      name, calls, total = l.split
      [name, [calls.to_i, (total.to_r * 1_000_000).round]]
    end
  end

  it 'turns a real text trace into json, chrome, folded and a summary with the same calls and durations' do
    text = record
    expected = text_durations(text)
    expect(expected.transform_values(&:size)).to eq(FormatsWorkload::COUNTS)

    # The same workload traced with --format json: the same calls.
    live = record('--format', 'json').lines.map { |l| JSON.parse(l) }.select { |o| o['kind'] == 'call' }
    expect(live.map { |o| o['name'] }.tally).to eq(FormatsWorkload::COUNTS)

    file = File.join(dir, 'trace.txt')
    File.write(file, text)
    results = %w[json chrome folded summary].to_h { |f| [f, convert(f, file)] }
    results.each_value { |r| expect([r.exitstatus, r.stderr]).to eq([0, '']) }

    json = results['json'].stdout
    expect(json_durations(json)).to eq(expected)
    args = json.lines.map { |l| JSON.parse(l) }.select { |o| o['name'] == 'Worker#leaf' }.map { |o| o['args'] }
    expect(args.uniq).to contain_exactly([{ 'expr' => 'n', 'value' => '1' }], [{ 'expr' => 'n', 'value' => '2' }],
                                         [{ 'expr' => 'n', 'value' => '3' }])
    expect(chrome_durations(results['chrome'].stdout)).to eq(expected)
    # Worker#leaf calls nothing: its self time is its whole duration.
    expect(folded_self(results['folded'].stdout)['Worker#leaf']).to eq(expected['Worker#leaf'].sum)
    totals = summary_totals(results['summary'].stdout)
    expect(totals).to eq(expected.transform_values { |ds| [ds.size, ds.sum] })
  end

  it 'reads a trace with -t start times from stdin, starts where -t says' do
    text = record('-t')
    expect(text.lines.first).to match(/\A\d\d:\d\d:\d\d\.\d{6} Worker#run\n\z/)
    out, err, status = convert_stdin('json', text)
    expect([status.exitstatus, err]).to eq([0, ''])
    expect(json_durations(out)).to eq(text_durations(text))
    # Each call's start is its -t time, counted from the first.
    times = text.lines.map { |l| l[/\A\d\d:\d\d:(\d\d\.\d{6}) /, 1] }.compact.map { |s| (s.to_r * 1_000_000).to_i }
    starts = out.lines.map { |l| JSON.parse(l) }.select { |o| o['kind'] == 'call' }.map { |o| o['start'] / 1000 }
    expect(starts.sort).to eq(times.map { |t| t - times.first }.sort)
  end

  it 'stops at a broken line, naming it, and still closes what it converted' do
    lines = record.lines
    lines.insert(4, "this is no trace\n")
    file = File.join(dir, 'broken.txt')
    File.write(file, lines.join)

    r = convert('chrome', file)
    expect(r.exitstatus).to eq(1)
    expect(r.stderr).to start_with("rbtrace: #{file}: line 5: expected a call (")
    events = JSON.parse(r.stdout).fetch('traceEvents')
    # Lines 1-4: Worker#leaf twice whole; Worker#run and Worker#step still open (unfinished).
    names = events.select { |e| e['ph'] == 'X' }.map { |e| e['name'] }
    expect(names.tally).to eq('Worker#leaf' => 2, 'Worker#step' => 1, 'Worker#run' => 1)

    out, err, status = convert_stdin('folded', lines.join)
    expect(status.exitstatus).to eq(1)
    expect(err).to start_with('rbtrace: stdin: line 5: expected')
    expect(out).not_to be_empty
  end

  it 'refuses a format it does not write, and a process with --convert' do
    r = rbtrace('--convert', 'xml')
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include("invalid value 'xml' for --convert: expected json, chrome, folded or summary")
    r = rbtrace('--convert', 'json', '-p', Process.pid.to_s)
    expect(r.exitstatus).to eq(2)
    expect(r.stderr).to include('--convert FORMAT [FILE] reads a saved trace, not a process')
  end
end
