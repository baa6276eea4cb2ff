require_relative '../spec_helper'
require 'rbconfig'

# An app that loaded the original rbtrace gem (0.5.x: another protocol,
# another client) has an "rbtrace.so" in its maps too. The client tells it
# from this rbtrace's library (which holds a mark of its own; see
# procfs.h) and says so at once, without signalling the app, instead of
# waiting 5 s and blaming a missing rbtrace, a stop or a trap.
#
# The app here is a real Ruby process that has loaded, with require, a real
# shared library at the path the original gem's has once installed
# (.../gems/rbtrace-0.5.3/lib/rbtrace.so): what the client reads of a
# process is its maps and that file, nothing the gem's code does.
RSpec.describe 'an app running the original rbtrace gem' do
  def build_old_gem_library(dir)
    lib = File.join(dir, 'gems', 'rbtrace-0.5.3', 'lib')
    FileUtils.mkdir_p(lib)
    src = File.join(dir, 'old_rbtrace.c')
    # The original's entry point; it would install its own SIGURG handler.
    File.write(src, "void Init_rbtrace(void) {}\n")
    so = File.join(lib, 'rbtrace.so')
    cc = RbConfig::CONFIG['CC'] || 'cc'
    ok = system(*cc.split, '-shared', '-fPIC', '-o', so, src, out: File::NULL)
    raise "could not build #{so} with #{cc}" unless ok

    so
  end

  let(:marker) { "rbtrace_old_gem_#{Process.pid}_#{rand(1 << 30)}" }
  let(:dir) { Dir.mktmpdir('rbtrace-old-gem') }
  let(:library) { build_old_gem_library(dir) }

  after { FileUtils.rm_rf(dir) }

  # Counts the SIGURGs it gets: the client must send none.
  def old_gem_app
    start_target(<<~RUBY, rbtrace: false).ready
      # #{marker}
      require #{library.inspect}
      $urgs = 0
      trap('URG') { $urgs += 1 }
      puts "ready"
      loop { sleep 0.05; puts "urgs \#{$urgs}" if $urgs > 0 }
    RUBY
  end

  it 'says at once that the process runs the original gem, and what to do; the app gets no signal' do
    app = old_gem_app
    expect(File.read("/proc/#{app.pid}/maps")).to include(library)
    r = rbtrace('-p', app.pid, '-e', '1')
    expect(r.exitstatus).to eq(1)
    expect(r.stderr).to include("process #{app.pid} runs the original rbtrace gem (0.5.3, #{library})",
                                'bundle exec rbtrace -p', "gem 'rbtrace', '>= 0.6'")
    expect(r.stderr).not_to match(/did not answer|did not connect/)
    sleep 0.3
    expect(app.drain.grep(/urgs/)).to eq([])
  end

  it '--ps marks such a process, and traces none of them' do
    app = old_gem_app
    r = rbtrace('--ps', marker, '-e', '1')
    expect(r.exitstatus).to eq(1)
    expect(r.stderr).to include("no process matching '#{marker}' has loaded this rbtrace; this one runs " \
                                'the original rbtrace gem')
    expect(r.stderr).to match(/^ +1\) #{app.pid} .*#{marker}.*\[the original rbtrace gem 0\.5\.3: use its own client\]$/)
    ours = start_target("# #{marker}\nputs 'ready'\nloop { sleep 0.05 }").ready
    r = rbtrace('--ps', marker, '-e', '1')
    expect(r.stderr).to include("2 processes match '#{marker}'")
    listed = r.stderr.lines.grep(/^ +\d\) /)
    expect(listed.grep(/ #{app.pid} /).first).to include('[the original rbtrace gem 0.5.3')
    expect(listed.grep(/ #{ours.pid} /).first).not_to include('original')
  end

  it 'still attaches to this rbtrace, whatever the directory it was loaded from' do
    # ours, loaded from a path shaped like the old gem's: its mark decides
    lib = File.join(dir, 'gems', 'rbtrace-0.5.3', 'lib')
    FileUtils.mkdir_p(lib)
    copy = File.join(lib, 'rbtrace.so')
    FileUtils.cp(File.join(RBTraceSpec::LIB, 'rbtrace', 'rbtrace.so'), copy)
    app = start_target(<<~RUBY, rbtrace: false).ready
      require #{copy.inspect}
      # lib/rbtrace.rb's require 'rbtrace/rbtrace' is that library
      $LOADED_FEATURES << #{File.join(RBTraceSpec::LIB, 'rbtrace', 'rbtrace.so').inspect}
      require 'rbtrace'
      puts "ready"
      loop { sleep 0.05 }
    RUBY
    maps = File.read("/proc/#{app.pid}/maps")
    expect(maps).to include(copy)
    expect(maps).not_to include('/rbtrace/rbtrace.so')
    r = rbtrace('-p', app.pid, '-e', '6 * 7')
    expect(r.stdout).to eq(">> 6 * 7\n=> 42\n"), r.stderr
  end
end
