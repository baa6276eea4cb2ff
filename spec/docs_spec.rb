# frozen_string_literal: true

require 'open3'
require_relative 'spec_helper'

# The code cites the design by section: `docs/DESIGN.md, "Section"`. A
# citation that names no section of docs/DESIGN.md, or that is not written
# in that form on one line (a bare "DESIGN.md", a section name split over two
# comment lines), points at nothing a reader can find: each is a failure.
# Plain file reading, no process: it runs with `rake spec`.
RSpec.describe 'citations of docs/DESIGN.md' do
  root = File.expand_path('..', __dir__)
  design = File.join(root, 'docs/DESIGN.md')
  sources = Dir.chdir(root) do
    Dir['{ext,lib,bench,spec,test,fuzz,rakelib,script}/**/*'].select { |f| File.file?(f) }.sort - ['spec/docs_spec.rb']
  end
  citation = %r{docs/DESIGN\.md, "([^"]+)"}

  let(:headings) do
    File.foreach(design).grep(/\A\#{1,6} /).map { |l| l.sub(/\A#+ /, '').strip }
  end

  # [file:line, text of the line] for each line that mentions DESIGN.md.
  let(:mentions) do
    sources.flat_map do |f|
      File.foreach(File.join(root, f)).with_index(1).filter_map do |line, n|
        ["#{f}:#{n}", line] if line.valid_encoding? && line.include?('DESIGN.md')
      rescue ArgumentError
        nil
      end
    end
  end

  it 'is cited at all (the check below would pass on nothing)' do
    expect(mentions.size).to be >= 8
  end

  it 'is cited as docs/DESIGN.md, "Section", on one line' do
    malformed = mentions.reject { |_, line| line.match?(citation) }
    expect(malformed).to eq([])
  end

  it 'has every section the code names' do
    missing = mentions.flat_map do |where, line|
      line.scan(citation).flatten.reject { |name| headings.include?(name) }.map { |name| "#{where}: #{name}" }
    end
    expect(missing).to eq([])
  end
end

# docs/usage.md's synopsis is `rbtrace --help`, verbatim: the README's copy of
# it drifted from the client once (--stats was missing). Runs the built client.
RSpec.describe 'docs/usage.md' do
  usage = File.expand_path('../docs/usage.md', __dir__)

  it "shows `rbtrace --help`'s output as it is, in its first code block" do
    help, status = Open3.capture2e(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '--help')
    expect(status).to be_success
    block = File.read(usage)[/^## Synopsis\n.*?^```\n(.*?)^```$/m, 1]
    expect(block).to eq(help)
  end
end

# docs/rbtrace.1, the man page, lists the options `rbtrace --help` lists: each
# is the tag of a .TP entry in its OPTIONS section, and each such tag is an
# option --help knows. Its title line carries the client's version. The roff
# is read as text (no groff needed); `man ./docs/rbtrace.1` renders it.
RSpec.describe 'docs/rbtrace.1' do
  man = File.expand_path('../docs/rbtrace.1', __dir__)
  option = /(?<![\w-])--?[a-z][a-z-]*/

  let(:help) do
    out, status = Open3.capture2e(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '--help')
    expect(status).to be_success
    out
  end

  # Options of --help's option lines ("  -p, --pid PID...   the process..."):
  # the first column, up to two spaces (or one before a capital: a value
  # that fills the column, "--shapesdump [FILE] ObjectSpace...").
  let(:help_options) do
    help.lines.grep(/\A {2,6}-/).flat_map { |l| l.strip.split(/ {2,}| (?=[A-Z][a-z])/).first.scan(option) }.uniq.sort
  end

  # The tags of the .TP entries under .SH OPTIONS, roff escapes undone.
  let(:man_options) do
    roff = File.read(man)[/^\.SH OPTIONS\n(.*?)^\.SH /m, 1]
    tags = roff.lines.each_cons(2).select { |a, _| a.start_with?('.TP') }.map { |_, tag| tag }
    tags.flat_map { |t| t.gsub('\\-', '-').gsub(/\\f[BIRP]/, '').scan(option) }.uniq.sort
  end

  it 'is read from --help (the comparison below would pass on nothing)' do
    expect(help_options).to include('-p', '--pid', '--heapdump', '--shapesdump', '--version')
    expect(help_options.size).to be >= 40
  end

  it "has an entry for every option of --help, and none --help doesn't list" do
    expect(man_options).to eq(help_options)
  end

  it "names the client's version in its title line" do
    version, = Open3.capture2e(RBTraceSpec::SPAWN_ENV, RBTraceSpec::CLIENT, '--version')
    title = File.foreach(man).find { |l| l.start_with?('.TH ') }
    expect(title).to include(version.strip)
  end
end

# docs/DESIGN.md, "Files" is the one file map: a map that drifted from the
# tree (three did, before it) points at files that are gone and hides new
# ones. Each row's first cell names files in backquotes; a name without a
# slash is in the directory of the name before it, a `*` covers what it
# matches. Plain file reading, no process.
RSpec.describe 'the file map in docs/DESIGN.md' do
  root = File.expand_path('..', __dir__)
  mapped_dirs = %w[ext/rbtrace/*.{c,h,rb} ext/rbtrace/cli/* lib/**/*.rb bin/* tracers/* examples/*
                   spec/**/*.rb test/c/* fuzz/*.{c,dict,md} bench/* bench/*/* script/* rakelib/*
                   .ci/* docs/*]

  let(:section) { File.read(File.join(root, 'docs/DESIGN.md'))[/^## Files\n(.*?)(?=^## |\z)/m, 1] }

  # Every name the map's rows give, as written (globs included).
  let(:names) do
    section.lines.grep(/\A\| `/).flat_map do |row|
      dir = nil
      row.split('|')[1].scan(/`([^`]+)`/).flatten.map do |name|
        name = File.join(dir, name) if dir && !name.include?('/')
        dir = File.dirname(name)
        name
      end
    end
  end

  let(:files) do
    Dir.chdir(root) { Dir.glob(mapped_dirs).select { |f| File.file?(f) } }
       .reject { |f| f.start_with?('lib/rbtrace/rbtrace') && !f.end_with?('.rb') } # build output
  end

  it 'has rows (the checks below would pass on nothing)' do
    expect(names.size).to be >= 100
  end

  it 'names every file of the directories it covers' do
    unmapped = files.reject { |f| names.any? { |n| File.fnmatch?(n, f, File::FNM_PATHNAME) } }
    expect(unmapped.sort).to eq([])
  end

  it 'names no file that is gone' do
    gone = names.reject { |n| n.include?('*') || File.exist?(File.join(root, n)) }
    expect(gone).to eq([])
  end
end

# docs/DESIGN.md, "Layers" is the extension's stack, and this keeps the code
# to it: every file of ext/rbtrace/ has a layer in the section's table, no
# file includes a header of a layer above its own but for the includes the
# section lists (each with its reason), none of those is gone, the includes
# within a layer make no cycle, and every header a file includes declares
# something the file uses. Plain file reading, no process.
RSpec.describe 'the layers in docs/DESIGN.md' do
  root = File.expand_path('..', __dir__)
  ext = File.join(root, 'ext/rbtrace')
  files = Dir[File.join(ext, '*.{c,h}')].map { |f| File.basename(f) }.sort
  name_of = ->(file) { file.sub(/\.[ch]\z/, '') }
  # The #include "..." lines of a file, and its text without comments,
  # string literals and includes (what it uses).
  includes_of = ->(file) { File.read(File.join(ext, file)).scan(/^#include "([^"]+)"/).flatten }
  code_of = lambda do |file|
    File.read(File.join(ext, file)).gsub(%r{/\*.*?\*/}m, ' ').gsub(%r{//[^\n]*}, ' ')
        .gsub(/^#include[^\n]*/, ' ').gsub(/"(?:\\.|[^"\\\n])*"/, '""')
  end
  # What a header declares, as written at the start of a line: functions,
  # variables, macros, struct, enum and union tags (inline bodies, indented,
  # are uses, not declarations).
  declared_in = lambda do |header|
    forms = [/\A#\s*define\s+(\w+)/, /\A(?:typedef\s+)?(?:struct|enum|union)\s+(\w+)\s*\{/,
             /\A[A-Za-z_][^;{(]*?\b(\w+)\s*[(\[;]/]
    code_of.call(header).lines.filter_map do |line|
      forms.lazy.filter_map { |form| line[form, 1] }.first
    end.uniq - ["RBTRACE_#{name_of.call(header).upcase}_H"]
  end

  let(:section) { File.read(File.join(root, 'docs/DESIGN.md'))[/^## Layers\n(.*?)(?=^## |\z)/m, 1] }

  # name => rank (1 the bottom), from the table's rows: | rank | layer | `name`... |
  let(:rank) do
    section.lines.grep(/\A\| \d+ \|/).each_with_object({}) do |row, ranks|
      cells = row.split('|').map(&:strip)
      cells[3].scan(/`([^`]+)`/).flatten.each { |name| ranks[name] = Integer(cells[1]) }
    end
  end

  # [includer, header] pairs listed as allowed upward: "- `a.c` (and `b.c`)
  # include(s) `x.h` (and `y.h`): why".
  let(:allowed) do
    section.lines.grep(/\A- `\w+\.[ch]`.*? includes? `/).flat_map do |line|
      who, what = line[/\A[^:]*/].split(/ includes? /)
      who.scan(/`([^`]+)`/).flatten.product(what.scan(/`([^`]+)`/).flatten)
    end
  end

  let(:edges) { files.flat_map { |f| includes_of.call(f).map { |h| [f, h] } } }

  it 'has a layer for every file of ext/rbtrace/, and none for a file that is gone' do
    expect(rank.size).to be >= 20
    expect(files.map(&name_of).uniq.reject { |n| rank.key?(n) }).to eq([])
    expect(rank.keys.reject { |n| files.include?("#{n}.c") || files.include?("#{n}.h") }).to eq([])
  end

  it 'has no include of a layer above but those it lists, and lists none that is gone' do
    upward = edges.select { |f, h| rank.fetch(name_of.call(h)) > rank.fetch(name_of.call(f)) }
    expect(upward - allowed).to eq([])
    expect(allowed - upward).to eq([])
  end

  it 'has no cycle of includes but through those it lists' do
    graph = Hash.new { |g, k| g[k] = [] }
    (edges - allowed).each do |f, h|
      graph[name_of.call(f)] << name_of.call(h) unless name_of.call(f) == name_of.call(h)
    end
    state = {}
    visit = lambda do |node, path|
      return path.drop_while { |n| n != node } + [node] if state[node] == :open
      return nil if state[node] == :done

      state[node] = :open
      cycle = graph[node].uniq.lazy.filter_map { |nxt| visit.call(nxt, path + [node]) }.first
      state[node] = :done
      cycle
    end
    cycles = graph.keys.filter_map { |node| visit.call(node, []) }
    expect(cycles).to eq([])
  end

  it 'has every file include only headers it uses something of' do
    unused = edges.reject do |f, h|
      name_of.call(f) == name_of.call(h) || # a file's own header
        declared_in.call(h).any? { |id| code_of.call(f).match?(/\b#{Regexp.escape(id)}\b/) }
    end
    expect(unused).to eq([])
  end
end
