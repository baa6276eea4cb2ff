require_relative '../spec_helper'

# What loading rbtrace, and attaching, leave of rbtrace in what the app can
# see: Ruby's trap for SIGURG, and the main thread's GVL-free C calls, which
# the removed pre-3.3 GVL hand-off touched (issue 20, item 11; the helper's
# priority: loading_spec; Puma's boot check: puma_spec).
RSpec.describe 'the helper thread and the app' do
  # The same probe, without and with rbtrace: what the app's own
  # Signal.trap('URG') returns. Between the load and that call, a client
  # attaches (rbtrace's own SIGURG handler works meanwhile).
  def trap_probe(dir, traced:, app_trap:)
    flag = File.join(dir, "go-#{traced}-#{app_trap}")
    code = <<~RUBY
      mine = proc {}
      #{app_trap ? "Signal.trap('URG', mine)" : ''}
      #{traced ? "require 'rbtrace'" : ''}
      puts "ready"
      sleep 0.01 until File.exist?(#{flag.inspect})
      old = Signal.trap('URG', 'SYSTEM_DEFAULT')
      puts "old \#{old.equal?(mine) ? 'mine' : old.inspect}"
      sleep
    RUBY
    app = start_target(code, rbtrace: false).ready
    if traced
      r = rbtrace('-p', app.pid, '-e', 'Process.pid')
      expect(r.stdout).to eq(">> Process.pid\n=> #{app.pid}\n"), "stderr: #{r.stderr}"
    end
    FileUtils.touch(flag)
    app.wait_for(/^old /)
  end

  [true, false].each do |app_trap|
    it "Signal.trap('URG') returns what it returns untraced (the app #{app_trap ? 'trapped URG first' : 'set nothing'})" do
      Dir.mktmpdir('rbtrace-trap') do |dir|
        untraced = trap_probe(dir, traced: false, app_trap: app_trap)
        expect(untraced).to eq(app_trap ? 'old mine' : 'old "SYSTEM_DEFAULT"')
        expect(trap_probe(dir, traced: true, app_trap: app_trap)).to eq(untraced)
      end
    end
  end

  # A tiny extension, not rbtrace's: NogvlProbe.spin(seconds) computes
  # without the GVL for that long, and counts the runs of its unblocking
  # function, which Ruby runs to interrupt it (a trapped signal, Thread#raise).
  NOGVL_PROBE_C = <<~'C'.freeze
    #include <ruby.h>
    #include <ruby/thread.h>
    #include <time.h>

    static volatile int ubf_calls;

    static double now(void)
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
    }

    static void *spin(void *p)
    {
        double until = now() + *(double *)p;
        while (now() < until)
            ;
        return NULL;
    }

    static void ubf(void *p) { ubf_calls++; }

    static VALUE spin_m(VALUE self, VALUE seconds)
    {
        double s = NUM2DBL(seconds);
        rb_thread_call_without_gvl(spin, &s, ubf, NULL);
        return Qnil;
    }

    static VALUE ubf_calls_m(VALUE self) { return INT2NUM(ubf_calls); }

    void Init_nogvl_probe(void)
    {
        VALUE m = rb_define_module("NogvlProbe");
        rb_define_singleton_method(m, "spin", spin_m, 1);
        rb_define_singleton_method(m, "ubf_calls", ubf_calls_m, 0);
    }
  C

  def build_nogvl_probe(dir)
    File.write(File.join(dir, 'nogvl_probe.c'), NOGVL_PROBE_C)
    File.write(File.join(dir, 'extconf.rb'), "require 'mkmf'\ncreate_makefile('nogvl_probe')\n")
    ok = system(RbConfig.ruby, 'extconf.rb', chdir: dir, out: File::NULL) &&
         system('make', chdir: dir, out: File::NULL)
    raise "could not build the probe extension (see #{dir}/mkmf.log)" unless ok
  end

  it "never interrupts a main thread's GVL-free C call (its unblocking function) while clients attach" do
    Dir.mktmpdir('rbtrace-nogvl') do |dir|
      build_nogvl_probe(dir)
      # Another thread keeps the GVL busy, so that rbtrace's threads wait
      # for it while the main thread computes without it.
      app = start_target(<<~'RUBY', ruby_args: ['-I', dir]).ready
        require 'nogvl_probe'
        Thread.new { x = 0; loop { x += 1 } }
        puts "ready"
        loop { NogvlProbe.spin(0.2) }
      RUBY
      6.times do
        r = rbtrace('-p', app.pid, '-e', 'NogvlProbe.ubf_calls')
        expect(r.stdout).to eq(">> NogvlProbe.ubf_calls\n=> 0\n"), "stderr: #{r.stderr}"
      end
    end
  end
end
