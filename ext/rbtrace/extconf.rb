# extconf.rb - configures the rbtrace extension and its command-line client.
#
# The generated Makefile builds two things from this directory: the
# extension (every .c file here) and the client, a standalone program built
# from cli/*.c and the shared codec.c, installed next to the extension.
require 'mkmf'
# The version, from its one place (lib/ is beside ext/ in the gem too): C
# sees it as RBTRACE_VERSION, a string.
require_relative '../../lib/rbtrace/version'

def find_msgpack
  # msgpack-c 6 renamed its pkg-config module and library to msgpack-c.
  return true if (pkg_config('msgpack-c') || pkg_config('msgpack')) && have_header('msgpack.h')

  have_header('msgpack.h') && (have_library('msgpack-c') || have_library('msgpackc'))
end

unless find_msgpack
  abort <<~MSG
    rbtrace needs msgpack-c and its headers.
    On Debian or Ubuntu: apt-get install libmsgpack-dev
  MSG
end

unless have_header('sys/msg.h') && have_header('semaphore.h') && have_func('sem_post', 'semaphore.h')
  abort 'rbtrace needs SysV message queues and POSIX semaphores (Linux).'
end

# handoff.c and handoff_job.c call these; every CRuby since 2.0 has both.
unless have_func('rb_thread_call_without_gvl', 'ruby/thread.h') &&
       have_func('rb_thread_call_without_gvl2', 'ruby/thread.h')
  abort 'rbtrace needs rb_thread_call_without_gvl and rb_thread_call_without_gvl2 ' \
        '(ruby/thread.h, CRuby 2.7 or newer): is this CRuby, with its headers?'
end

# Version-dependent APIs, chosen by feature, never by version number.
# HAVE_RB_POSTPONED_JOB_PREREGISTER (3.3+): the postponed jobs are
# preregistered and triggered (channel.c, gcwatch.c, handoff_job.c); without
# it rb_postponed_job_register_one is called instead, which 3.3 and later
# deprecate (so it is never compiled where it would warn).
have_func('rb_postponed_job_preregister', 'ruby/debug.h')
have_func('rb_class_attached_object', 'ruby.h')
have_func('rb_ext_ractor_safe', 'ruby.h')   # Ractor-safe C methods (inplace.c)

# Ractor-local storage (Ruby 3.0+): which Ractor a hook runs in (ractors.c).
if have_header('ruby/ractor.h') && have_func('rb_ractor_local_storage_ptr_newkey', 'ruby/ractor.h')
  $defs << '-DRBTRACE_HAVE_RACTORS'
end

# The thread an event is of, in one instruction (state.h, rbtrace_thread_id).
if checking_for('__builtin_thread_pointer') do
  try_compile('int main(void) { return __builtin_thread_pointer() == 0; }')
end
  $defs << '-DRBTRACE_HAVE_THREAD_POINTER'
end

# Under M:N scheduling (RUBY_MN_THREADS=1, Ruby 3.3+) events name the Ruby
# thread a VM thread hook says took the GVL (state.c, rbtrace_thread_id).
if have_struct_member('rb_internal_thread_event_data_t', 'thread', 'ruby/thread.h') &&
   have_func('rb_internal_thread_add_event_hook', 'ruby/thread.h') &&
   have_func('RTYPEDDATA_GET_DATA', 'ruby.h')
  $defs << '-DRBTRACE_HAVE_MN_THREAD_HOOK'
end

# --gvl (gvlwatch.c): the thread event hooks' READY and RESUMED (Ruby 3.2+).
# Its table of READY times is keyed by the event data's thread where it has
# one (3.3+: the check above) and by the native thread on 3.2.
gvl_events_program = "#include <ruby.h>\n#include <ruby/thread.h>\n" \
                     'int main(void) { return (int)(RUBY_INTERNAL_THREAD_EVENT_READY | ' \
                     'RUBY_INTERNAL_THREAD_EVENT_RESUMED); }'
if have_func('rb_internal_thread_add_event_hook', 'ruby/thread.h') &&
   have_func('rb_internal_thread_remove_event_hook', 'ruby/thread.h') &&
   checking_for('RUBY_INTERNAL_THREAD_EVENT_READY and _RESUMED') { try_compile(gvl_events_program) }
  $defs << '-DRBTRACE_HAVE_GVL_HOOK'
end

# The hook's frame lookup for Ruby methods (trace.c) without the stack
# protector's canary, which Debian's CFLAGS put in every function that takes
# a local's address: ~5 instructions an event there, guarding no buffer.
if checking_for('__attribute__((no_stack_protector))') do
  try_compile('__attribute__((no_stack_protector)) static int f(int *p) { return *p; } ' \
              'int main(void) { int x = 0; return f(&x); }', '-Werror')
end
  $defs << '-DRBTRACE_HAVE_NO_STACK_PROTECTOR'
end

version_define = %(-DRBTRACE_VERSION='"#{RBTrace::VERSION}"')
$defs << version_define

warnings = %w[-Wall -Wextra -Wno-unused-parameter]
warnings << '-Werror' if ENV['RBTRACE_WERROR'] == '1' || ENV['CI']
$CFLAGS << ' ' << (warnings + %w[-std=gnu99 -fvisibility=hidden]).join(' ')
$LIBS << ' -lpthread'

# RBTRACE_ASAN=1: the extension and the client built with AddressSanitizer
# and UBSan, for `rake test:asan` (which builds them apart, in tmp/asan). A
# Ruby not built with ASan loads such an extension only with the ASan runtime
# preloaded: LD_PRELOAD=$(gcc -print-file-name=libasan.so).
# No stack redzones (asan-stack=0): Ruby unwinds exceptions through our
# frames with __builtin_longjmp, which ASan does not see, so their redzones
# stayed poisoned and Ruby's own code later tripped on them (false
# stack-buffer-overflow reports in modf under rb_time_interval). Heap,
# global and use-after-free checks stay. Undefined behaviour ends the
# process (-fno-sanitize-recover): beside ASan, UBSan ignores its
# log_path and would only print to the app's stderr, which few specs read.
sanitize = if ENV['RBTRACE_ASAN'] == '1'
             %w[-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
                --param=asan-stack=0]
           else
             []
           end
unless sanitize.empty?
  $CFLAGS << ' ' << sanitize.join(' ')
  $LDFLAGS << ' ' << sanitize.join(' ')
end

# Link-time optimisation: the event hook's helpers live in files of their
# own (codec.c, ring.c, emit.c) and are inlined across them only this way
# (about 10 % less per firehose event, bench/RESULTS.md). Not with the
# sanitizers, whose build is for finding faults.
if sanitize.empty? && try_link('int main(void) { return 0; }', '-flto=auto')
  $CFLAGS << ' -flto=auto'
  $DLDFLAGS << ' -flto=auto'
end

# Line editing and history for the client's -i: libedit (BSD licence;
# Debian's libedit-dev), found by pkg-config, for the client only, never the
# extension (so mkmf's pkg_config is asked for flags, which it does not add
# to the extension's). The client is not linked with it: it loads it when -i
# starts (cli/editline.c), by the soname found here, so that no other run
# pays for loading it. Without it the client is built anyway and its -i
# reads plain lines; --help says which.
def find_libedit
  cflags = pkg_config('libedit', 'cflags')
  libs = pkg_config('libedit', 'libs')
  return nil unless cflags && libs

  src = "#include <stdio.h>\n#include <editline/readline.h>\n" \
        "int main(void) { rl_catch_signals = 0; return readline(\"\") == NULL; }\n"
  checking_for('libedit for the client') { try_link(src, "#{cflags} #{libs}") } ? [cflags, libs] : nil
end

# libedit's soname (libedit.so.2), read off the library pkg-config points at;
# nil if that cannot be told (editline.c then tries the usual names).
def libedit_soname
  libdir = pkg_config('libedit', 'variable=libdir')
  return nil unless libdir

  out = IO.popen(['objdump', '-p', File.join(libdir, 'libedit.so')], err: File::NULL, &:read)
  out[/^\s*SONAME\s+(\S+)/, 1]
rescue SystemCallError
  nil
end

# dlopen is in libc from glibc 2.34 on, in libdl before.
def client_dl_libs
  src = "#include <dlfcn.h>\nint main(void) { return dlopen(\"x\", RTLD_NOW) != 0; }\n"
  return '' if try_link(src)

  try_link(src, '-ldl') ? '-ldl' : nil
end

libedit_cflags, libedit_libs = find_libedit
unless libedit_libs
  message "libedit not found: rbtrace -i will read plain lines (no editing, no history).\n" \
          "On Debian or Ubuntu: apt-get install libedit-dev, then build again.\n"
end

create_makefile('rbtrace/rbtrace')

# The client: not a Ruby extension, so mkmf knows nothing of it. Append its
# rules to the Makefile; `make` builds it, `make install` puts it beside the
# extension, where bin/rbtrace looks for it.
client_cflags = "#{warnings.join(' ')} -std=gnu99 -O2 -g #{version_define} #{sanitize.join(' ')} " \
                "#{ENV['RBTRACE_CLIENT_CFLAGS']}"
client_libs = $libs.include?('msgpack-c') ? '-lmsgpack-c' : '-lmsgpackc'
# --format pprof gzips its profile (cli/formats/format_pprof.c): the client
# links zlib, the extension does not (have_library would add it to both).
zlib_program = "#include <zlib.h>\nint main(void) { return deflateEnd(0); }\n"
unless checking_for('zlib') { try_link(zlib_program, '-lz') }
  abort 'rbtrace needs zlib and its header (Debian: zlib1g-dev).'
end
client_libs << ' -lz'
dl_libs = libedit_libs && client_dl_libs
if dl_libs
  soname = libedit_soname
  client_cflags << " -DRBTRACE_HAVE_LIBEDIT #{libedit_cflags}"
  client_cflags << %( -DRBTRACE_LIBEDIT_SONAME='"#{soname}"') if soname
  client_libs << " #{dl_libs}"
elsif libedit_libs
  message "dlopen not found: rbtrace -i will read plain lines (no editing, no history).\n"
end
# The bootstrap: position-independent, no sanitizer (it runs inside any
# Ruby, which would need the ASan runtime preloaded), dlsym from libc
# (glibc 2.34+) or libdl.
boot_cflags = "#{warnings.join(' ')} -std=gnu99 -O2 -g -shared -fPIC -fvisibility=hidden"
boot_libs = client_dl_libs || ''
File.open('Makefile', 'a') do |mk|
  mk.puts <<~MAKE

    RBTRACE_CLIENT = rbtrace-client
    RBTRACE_CLIENT_SRCS = $(wildcard $(srcdir)/cli/*.c) $(wildcard $(srcdir)/cli/formats/*.c) $(srcdir)/codec.c
    RBTRACE_CLIENT_HDRS = $(wildcard $(srcdir)/cli/*.h) $(wildcard $(srcdir)/cli/formats/*.h) $(srcdir)/codec.h $(srcdir)/protocol.h
    # --inject's bootstrap (boot/rbtrace_boot.c): linked with no Ruby, so
    # one build serves every Ruby; installed beside the client.
    RBTRACE_BOOT = rbtrace_boot.so

    all: $(RBTRACE_CLIENT) $(RBTRACE_BOOT)

    $(RBTRACE_CLIENT): $(RBTRACE_CLIENT_SRCS) $(RBTRACE_CLIENT_HDRS)
    \t$(CC) #{client_cflags} $(INCFLAGS) -I$(srcdir) -I$(srcdir)/cli -I$(srcdir)/cli/formats -o $@ $(RBTRACE_CLIENT_SRCS) #{client_libs}

    $(RBTRACE_BOOT): $(srcdir)/boot/rbtrace_boot.c
    \t$(CC) #{boot_cflags} -o $@ $(srcdir)/boot/rbtrace_boot.c #{boot_libs}

    install: install-client
    install-client: $(RBTRACE_CLIENT) $(RBTRACE_BOOT)
    \t$(MAKEDIRS) $(RUBYARCHDIR)
    \t$(INSTALL_PROG) $(RBTRACE_CLIENT) $(RUBYARCHDIR)
    \t$(INSTALL_PROG) $(RBTRACE_BOOT) $(RUBYARCHDIR)

    clean: clean-client
    clean-client:
    \t-$(RM) $(RBTRACE_CLIENT) $(RBTRACE_BOOT)
  MAKE
end
