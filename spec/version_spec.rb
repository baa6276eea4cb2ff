# spec/version_spec.rb - the version lives in one place,
# lib/rbtrace/version.rb: the gemspec reads it, extconf.rb passes it to the
# extension and the client as RBTRACE_VERSION (their --version and messages
# are checked in spec/e2e: options_spec, errors_spec).
require_relative 'spec_helper'

RSpec.describe 'the version' do
  it 'is written in lib/rbtrace/version.rb only, in none of the code that ships' do
    files = Dir.chdir(RBTraceSpec::ROOT) { Dir['{ext,lib,bin}/**/*'].select { |f| File.file?(f) } }
    spelled = files.reject { |f| f == 'lib/rbtrace/version.rb' || f.end_with?('.so', '-client', '.o') }
                   .select { |f| File.read(File.join(RBTraceSpec::ROOT, f)).include?(RBTrace::VERSION) }
    expect(spelled).to eq([])
  end
end
