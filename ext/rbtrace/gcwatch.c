/*
 * gcwatch.c - --gc: each garbage collection, with how long it took in
 * all, in marking and in sweeping, whether it was major and why it ran.
 *
 * Measured with the VM's internal GC events. A collection starts
 * (GC_START), marks, ends marking (GC_END_MARK), sweeps, and ends sweeping
 * (GC_END_SWEEP). Marking can be incremental and sweeping lazy: the work
 * then comes in steps, each between a GC_ENTER and a GC_EXIT, with the app
 * running in between. Each step's time goes to the phase it was in, so the
 * figures are time spent collecting, not the time from start to end.
 *
 * Inside these hooks the VM is collecting: nothing may allocate or call
 * Ruby. The hooks only read the clock and GC.latest_gc_info's symbols
 * (which does not allocate once its symbols exist: see rbtrace_gc_start)
 * into a fixed array; a postponed job sends them at the next safe point.
 *
 * A Ractor that has ended switches the hook off when the GC frees it
 * (ractors.c): the GC step that freed it never fires its GC_EXIT, and no
 * GC event fires after it. Each step therefore queues the job, which runs
 * after the step: should the step be still open then, the hook was cut
 * off inside it, and the job switches it on again. That is seen, not
 * assumed from the version: on a Ruby with the bug fixed (4.0) no step is
 * left open, and the job never switches anything on.
 *
 * Only collections the main Ractor's threads run are seen: Ruby calls the
 * hooks of the Ractor whose thread collects, and another Ractor's are out
 * of reach. Those are counted (GC.count moves on) and told at the detach.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "emit.h"
#include "gcwatch.h"
#include "ractors.h"

#define GC_EVENTS \
    (RUBY_INTERNAL_EVENT_GC_START | RUBY_INTERNAL_EVENT_GC_END_MARK | \
     RUBY_INTERNAL_EVENT_GC_END_SWEEP | RUBY_INTERNAL_EVENT_GC_ENTER | \
     RUBY_INTERNAL_EVENT_GC_EXIT)

/* Collections recorded but not yet sent; more are counted as lost. */
#define GC_PENDING_MAX 64

enum gc_phase { GC_IDLE, GC_MARKING, GC_SWEEPING };

struct gc_record {
    uint64_t thread;
    uint64_t start_ns;
    uint64_t mark_ns;
    uint64_t sweep_ns;
    VALUE major_by; /* a static Symbol, or nil for a minor GC */
    VALUE gc_by;    /* a static Symbol */
};

static struct {
    int active;
    int in_step; /* between a GC_ENTER and its GC_EXIT */
    enum gc_phase phase;
    uint64_t step_start; /* when the current step (or phase) began */
    size_t last_count;   /* GC.count at the last collection seen */
    uint64_t other;      /* collections run by other Ractors, not seen */
    struct gc_record current;
    struct gc_record pending[GC_PENDING_MAX];
    unsigned n_pending;
    uint64_t lost;
    int job_queued;
    uint64_t cut_offs; /* steps found cut off (hooks switched on again), ever */
} gcw;

static VALUE sym_major_by, sym_gc_by, sym_state, sym_none;

#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
static rb_postponed_job_handle_t gc_job = POSTPONED_JOB_HANDLE_INVALID;
#endif

static void gc_finish(uint64_t now);

/*
 * The step the hook saw begin never ended for it: a Ractor freed inside
 * it switched the hooks off (ractors.c). Switches them on again. The
 * collection it cut off gets the step's time up to now (the job runs at
 * the app's next safe point, a little after the step ended); if the step
 * ended it (GC.start sweeps at once), it is recorded now, else the steps
 * to come, seen again, finish it.
 */
static void gc_cut_off(void)
{
    uint64_t now = rbtrace_clock_ns();

    gcw.in_step = 0;
    gcw.cut_offs++;
    rbtrace_ractors_restore_hooks();
    /* A collection that began in the gap was this Ractor's, not another's. */
    if (gcw.last_count) gcw.last_count = rb_gc_count();
    if (gcw.phase == GC_IDLE) return;
    if (gcw.phase == GC_SWEEPING && rb_gc_latest_gc_info(sym_state) == sym_none) {
        gc_finish(now); /* the step ended it */
        return;
    }
    if (gcw.phase == GC_MARKING) gcw.current.mark_ns += now - gcw.step_start;
    else gcw.current.sweep_ns += now - gcw.step_start;
}

/* Sends the recorded collections (a postponed job: a safe point). */
static void gc_flush_job(void *unused)
{
    unsigned i;

    (void)unused;
    gcw.job_queued = 0;
    /* Only the main Ractor writes to the ring (ractors.c): the records
     * wait for the next collection's job. */
    if (!rbtrace_main_ractor_p()) return;
    if (gcw.in_step && gcw.active) gc_cut_off();
    if (!gcw.active || !rbtrace.attached) {
        gcw.n_pending = 0;
        return;
    }
    for (i = 0; i < gcw.n_pending; i++) {
        const struct gc_record *r = &gcw.pending[i];
        const char *major = RB_SYMBOL_P(r->major_by) ? rb_id2name(SYM2ID(r->major_by)) : NULL;
        const char *by = RB_SYMBOL_P(r->gc_by) ? rb_id2name(SYM2ID(r->gc_by)) : NULL;
        rbtrace_emit_gc(r->thread, r->start_ns, r->mark_ns, r->sweep_ns, major ? major : "",
                        by ? by : "unknown");
    }
    gcw.n_pending = 0;
    rbtrace.lost += gcw.lost;
    gcw.lost = 0;
}

static void gc_queue_flush(void)
{
    if (gcw.job_queued) return;
#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
    if (gc_job == POSTPONED_JOB_HANDLE_INVALID) return;
    rb_postponed_job_trigger(gc_job);
    gcw.job_queued = 1;
#else
    /* Registered from the thread that holds the GVL, not from a signal
     * handler: the use this API was made for. */
    if (rb_postponed_job_register_one(0, gc_flush_job, NULL) > 0) gcw.job_queued = 1;
#endif
}

static void gc_finish(uint64_t now)
{
    gcw.current.sweep_ns += now - gcw.step_start;
    gcw.phase = GC_IDLE;
    if (gcw.n_pending < GC_PENDING_MAX) gcw.pending[gcw.n_pending++] = gcw.current;
    else gcw.lost++;
    gc_queue_flush();
}

/* A collection began that this hook saw; those GC.count went past since
 * the last one were run by other Ractors (ractors.c). */
static void gc_begin(uint64_t now)
{
    size_t count = rb_gc_count();

    if (gcw.last_count && count > gcw.last_count + 1) gcw.other += count - gcw.last_count - 1;
    gcw.last_count = count;
    gcw.phase = GC_MARKING;
    gcw.step_start = now;
    gcw.current.thread = rbtrace_thread_id();
    gcw.current.start_ns = now;
    gcw.current.mark_ns = gcw.current.sweep_ns = 0;
    gcw.current.major_by = rb_gc_latest_gc_info(sym_major_by);
    gcw.current.gc_by = rb_gc_latest_gc_info(sym_gc_by);
}

static void gc_hook(rb_event_flag_t flag, VALUE data, VALUE self, ID mid, VALUE klass)
{
    uint64_t now = rbtrace_clock_ns();

    (void)data;
    (void)self;
    (void)mid;
    (void)klass;
    /* The main Ractor's hook (ractors.c); gcw is not another's to touch. */
    if (!gcw.active || !rbtrace_main_ractor_p()) return;
    switch (flag) {
    case RUBY_INTERNAL_EVENT_GC_ENTER:
        gcw.in_step = 1;
        gcw.step_start = now;
        /* Runs after the step: finds it open if it cut the hooks off. */
        gc_queue_flush();
        break;
    case RUBY_INTERNAL_EVENT_GC_START:
        gc_begin(now);
        break;
    case RUBY_INTERNAL_EVENT_GC_END_MARK:
        if (gcw.phase != GC_MARKING) break;
        gcw.current.mark_ns += now - gcw.step_start;
        gcw.step_start = now;
        gcw.phase = GC_SWEEPING;
        break;
    case RUBY_INTERNAL_EVENT_GC_END_SWEEP:
        if (gcw.phase == GC_SWEEPING) gc_finish(now);
        break;
    case RUBY_INTERNAL_EVENT_GC_EXIT:
        gcw.in_step = 0;
        if (gcw.phase == GC_MARKING) gcw.current.mark_ns += now - gcw.step_start;
        else if (gcw.phase == GC_SWEEPING) gcw.current.sweep_ns += now - gcw.step_start;
        break;
    default:
        break;
    }
}

/* Starts watching collections. The first GC.latest_gc_info(key) call
 * makes the symbols it returns; it is done here, outside any GC. */
void rbtrace_gc_start(void)
{
    if (gcw.active) return;
    rb_gc_latest_gc_info(sym_major_by);
    rb_gc_latest_gc_info(sym_gc_by);
    rb_gc_latest_gc_info(sym_state);
    gcw.phase = GC_IDLE;
    gcw.in_step = 0;
    gcw.n_pending = 0;
    gcw.lost = 0;
    gcw.other = 0;
    gcw.last_count = 0;
    gcw.active = 1;
    rb_add_event_hook(gc_hook, GC_EVENTS, Qnil);
}

void rbtrace_gc_stop(void)
{
    if (!gcw.active) return;
    rb_remove_event_hook(gc_hook);
    gcw.active = 0;
    gcw.in_step = 0;
    gcw.n_pending = 0;
    gcw.phase = GC_IDLE;
}

int rbtrace_gc_active(void)
{
    return gcw.active;
}

/* Collections run by other Ractors' threads since the last call, not seen. */
uint64_t rbtrace_gc_take_other(void)
{
    uint64_t n = gcw.other;

    gcw.other = 0;
    return n;
}

/*
 * call-seq: RBTrace.gc_cut_offs -> Integer
 *
 * How many GC steps --gc found cut off by a freed Ractor (Ruby's Bug
 * #19112) in this process, each time switching the hooks on again. For
 * the specs: 0 on a Ruby with the bug fixed.
 */
static VALUE gc_cut_offs_m(VALUE self)
{
    (void)self;
    return ULL2NUM(gcw.cut_offs);
}

void Init_rbtrace_gcwatch(VALUE mod)
{
    rb_define_singleton_method(mod, "gc_cut_offs", gc_cut_offs_m, 0);
    sym_major_by = ID2SYM(rb_intern("major_by"));
    sym_gc_by = ID2SYM(rb_intern("gc_by"));
    sym_state = ID2SYM(rb_intern("state"));
    sym_none = ID2SYM(rb_intern("none"));
#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
    gc_job = rb_postponed_job_preregister(0, gc_flush_job, NULL);
#endif
}
