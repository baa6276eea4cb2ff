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
