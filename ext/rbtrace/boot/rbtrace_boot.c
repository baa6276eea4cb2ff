/*
 * rbtrace_boot.so - the small library `rbtrace --inject` loads into a Ruby
 * process that never required rbtrace (docs/DESIGN.md, "Injection").
 *
 * The client (cli/inject.c) calls rbtrace_boot_start in the target, on its
 * main thread, stopped by ptrace at a safe point, without the GVL. That
 * cannot run Ruby, so it only asks Ruby for a postponed job; the job, run
 * by the VM at its next safe point with the GVL, starts a Ruby thread that
 * evaluates the client's code (which puts the right rbtrace on $LOAD_PATH
 * and requires it). Nothing runs at load time: dlopen holds the loader's
 * lock.
 *
 * It is linked with no Ruby: every function of Ruby's is found with dlsym
 * in the process (the executable or libruby exports them), so one build
 * serves every Ruby, and the APIs a Ruby lacks (register_one is gone from
 * Ruby's master, preregister is 3.3+) are never needed at link time.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef uintptr_t boot_value;
typedef void (*boot_job_fn)(void *);

#define BOOT_EXPORT __attribute__((visibility("default")))
#define BOOT_CODE_MAX 16384

/* The Ruby the job's thread evaluates, copied from the caller's stack. */
static char boot_code[BOOT_CODE_MAX];
static int boot_job_ran;

static void *boot_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

/*
 * Ruby 3.3+: while the thread loads rbtrace, a native thread of ours asks
 * every 2 ms, by a postponed job, the thread that holds the GVL to let it
 * go once. Without it the loading thread, which gives the GVL up at each
 * file it reads, waits a whole time slice (100 ms) behind a thread busy in
 * Ruby each time it wants it back: 2.4 s behind one busy thread on 3.4,
 * minutes behind nine.
 */
static unsigned int boot_yield_handle = (unsigned int)-1;
static int boot_loading; /* read and written with __atomic_* */
static void (*boot_trigger)(unsigned int);

static void *boot_nothing(void *arg)
{
    return arg;
}

/* The job: the GVL let go and taken back, which puts the thread that ran
 * it behind those waiting (call_without_gvl2: runs no interrupt, so
 * nothing is raised inside the job). */
static void boot_yield_job(void *arg)
{
    void *(*without_gvl2)(void *(*)(void *), void *, void (*)(void *),
                          void *) = (void *(*)(void *(*)(void *), void *, void (*)(void *),
                                               void *))boot_sym("rb_thread_call_without_gvl2");

    (void)arg;
    if (__atomic_load_n(&boot_loading, __ATOMIC_RELAXED) && without_gvl2)
        without_gvl2(boot_nothing, NULL, NULL, NULL);
}

/* Nudges until rbtrace is loaded, 30 s at most (on Ruby 4.0.0 an app
 * asleep may never run the job: the nudges would go on for nothing). */
static void *boot_nudger(void *arg)
{
    struct timespec ts = { 0, 2000000L };
    sigset_t all;
    int n;

    (void)arg;
    /* Created from the injector's call, it began with every signal blocked,
     * glibc's own too: its setuid broadcast (SIGSETXID) would wait for us.
     * glibc's pthread_sigmask leaves its own signals out of the mask. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    pthread_setname_np(pthread_self(), "rbtrace-nudge");
    for (n = 0; __atomic_load_n(&boot_loading, __ATOMIC_RELAXED) && n < 15000; n++) {
        boot_trigger(boot_yield_handle);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* RubyVM::InstructionSequence.compile(boot_code).eval, under rb_protect:
 * eval of a string needs a Ruby caller's frame, which this thread has
 * not ("Can't eval on top of Fiber or Thread"); an iseq runs as a file
 * does. */
static boot_value boot_eval(boot_value unused)
{
    boot_value (*path2class)(const char *) = (boot_value(*)(const char *))boot_sym("rb_path2class");
    uintptr_t (*intern)(const char *) = (uintptr_t(*)(const char *))boot_sym("rb_intern");
    boot_value (*funcall)(boot_value, uintptr_t, int, ...) =
        (boot_value(*)(boot_value, uintptr_t, int, ...))boot_sym("rb_funcall");
    boot_value (*str_new)(const char *) = (boot_value(*)(const char *))boot_sym("rb_str_new_cstr");
    boot_value iseq;

    (void)unused;
    if (!path2class || !intern || !funcall || !str_new) return 0;
    iseq = funcall(path2class("RubyVM::InstructionSequence"), intern("compile"), 1,
                   str_new(boot_code));
    funcall(iseq, intern("eval"), 0);
    return 0;
}

/* The thread's body: the code rescues and says its own errors (on the
 * app's stderr); 0 is false in every Ruby. */
static boot_value boot_thread(void *arg)
{
    boot_value (*protect)(boot_value(*)(boot_value), boot_value, int *) =
        (boot_value(*)(boot_value(*)(boot_value), boot_value, int *))boot_sym("rb_protect");
    int state = 0;

    (void)arg;
    /* Its native name tells the client the job ran (the thread may then
     * wait long for the GVL behind threads busy in Ruby). */
    pthread_setname_np(pthread_self(), "rbtrace-inject");
    if (protect) protect(boot_eval, 0, &state);
    __atomic_store_n(&boot_loading, 0, __ATOMIC_RELAXED);
    return 0;
}

/* The postponed job, with the GVL at a safe point: only starts the thread
 * (a require can take long; the job runs in the middle of the app's code). */
static void boot_job(void *arg)
{
    boot_value (*thread_create)(boot_value(*)(void *), void *) =
        (boot_value(*)(boot_value(*)(void *), void *))boot_sym("rb_thread_create");

    (void)arg;
    if (boot_job_ran || !thread_create) return;
    boot_job_ran = 1;
    thread_create(boot_thread, NULL);
}

/*
 * Called by the injector on the target's main thread. code: the Ruby to
 * run, NUL-ended. 0: the job is asked for; 1: code too long; 2: this Ruby
 * has neither postponed-job API; 3: Ruby refused the job (its table full).
 */
BOOT_EXPORT int rbtrace_boot_start(const char *code)
{
    unsigned int (*preregister)(unsigned int, boot_job_fn, void *) = (unsigned int (*)(
        unsigned int, boot_job_fn, void *))boot_sym("rb_postponed_job_preregister");
    void (*trigger)(unsigned int) = (void (*)(unsigned int))boot_sym("rb_postponed_job_trigger");
    int (*register_one)(unsigned int, boot_job_fn, void *) =
        (int (*)(unsigned int, boot_job_fn, void *))boot_sym("rb_postponed_job_register_one");
    size_t len = strlen(code);

    if (len >= sizeof(boot_code)) return 1;
    memcpy(boot_code, code, len + 1);
    /* Ruby 3.3+: any thread may trigger; it flags the thread that last
     * held the GVL, which is why the injector diverts the main thread. */
    if (preregister && trigger) {
        unsigned int handle = preregister(0, boot_job, NULL);
        if (handle == (unsigned int)-1) return 3;
        /* not needed to load, only to load fast: no slot, no nudge */
        boot_yield_handle = preregister(0, boot_yield_job, NULL);
        boot_trigger = trigger;
        trigger(handle);
        /* From now: the job itself may wait for the GVL behind busy threads. */
        if (boot_yield_handle != (unsigned int)-1) {
            pthread_t nudger;
            pthread_attr_t attr;
            __atomic_store_n(&boot_loading, 1, __ATOMIC_RELAXED);
            if (pthread_attr_init(&attr) == 0) {
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&nudger, &attr, boot_nudger, NULL) != 0)
                    __atomic_store_n(&boot_loading, 0, __ATOMIC_RELAXED);
                pthread_attr_destroy(&attr);
            } else {
                __atomic_store_n(&boot_loading, 0, __ATOMIC_RELAXED);
            }
        }
        return 0;
    }
    /* Before 3.3: register_one reads the calling thread's execution
     * context, so it is called on a Ruby thread only (the main thread). */
    if (register_one) return register_one(0, boot_job, NULL) ? 0 : 3;
    return 2;
}
