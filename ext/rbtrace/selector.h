/*
 * selector.h - a method selector (`rbtrace -m` text, a tracer file's line,
 * --slow-methods) parsed once, into named fields; and the selectors' errors,
 * reported in one place. selector.c is the only file that reads a selector's
 * text or what lib/rbtrace/selector.rb makes of it: trace.c and slow.c
 * read this struct.
 */
#ifndef RBTRACE_SELECTOR_H
#define RBTRACE_SELECTOR_H

#include <ruby.h>

/*
 * One parsed selector. It lives on its caller's stack while the selector is
 * put in place (the GC scans the stack: its VALUEs need no marking there);
 * what outlives that is copied into a struct that is marked (the tracer's,
 * rbtrace_trace_mark; --slow's filters, rbtrace_slow_mark).
 */
struct rbtrace_selector {
    /* The class or module calls must be of, or 0 for any. */
    VALUE owner;
    /* The method's original name (as the VM names its calls), or 0 for any. */
    ID mid;
    /* Trace expressions (a frozen Array of Strings), or Qnil. */
    VALUE exprs;
    /* Messages of the expressions the check left out (Strings), or Qnil. */
    VALUE notes;
    /* The UnboundMethod of a method defined in Ruby (a TracePoint targets
     * its bytecode alone), or Qnil; whether it is a block's (define_method). */
    VALUE ruby_method;
    int block_method;
    /* A C method traced by a wrapper (wrapper.c): the wrapper's visibility
     * (a Symbol; Qnil: not wrapped), the name it takes (an alias's, for the
     * calls through it) and its arity (the method's own). */
    VALUE visibility;
    ID wrapped_mid;
    int arity;
};

/* Whether rbtrace_selector_parse checks the expressions against the method
 * (lib/rbtrace/expression_check.rb): -m and -c do, --slow-methods shows no
 * expressions. */
enum rbtrace_selector_check { RBTRACE_SELECTOR_AS_IS = 0, RBTRACE_SELECTOR_CHECKED = 1 };

/* Parses text into *sel: 0, or -1 with the error (an exception whose
 * message is meant for the user) in *error. */
int rbtrace_selector_parse(VALUE text, enum rbtrace_selector_check check,
                           struct rbtrace_selector *sel, VALUE *error);

/* Whether sel's method is traced by a wrapper (wrapper.c). */
static inline int rbtrace_selector_wrapped(const struct rbtrace_selector *sel)
{
    return !NIL_P(sel->visibility);
}

/* Whether a selector's text ends in a list of trace expressions (without
 * parsing it: no Ruby). */
int rbtrace_selector_has_exprs(VALUE text);

/* The class a selector names, for --devmode, without resolving its method:
 * 0 with the class's path (a frozen String) in *path and the class in
 * *klass (Qnil while it is not defined); -1 for a selector that names no
 * class (sleep), or that cannot be read. */
int rbtrace_selector_class(VALUE text, VALUE *path, VALUE *klass);

/* Reports the expressions the check left out (sel->notes), each an ERROR. */
void rbtrace_selector_report_notes(const struct rbtrace_selector *sel);

/* Reports a selector that is not traced, and why (an ERROR event). */
void rbtrace_report_selector_error(VALUE text, VALUE error);

/* Whether error says the selector's class or method is not defined (yet:
 * --devmode waits for it). */
int rbtrace_selector_not_defined_p(VALUE error);

/* A selector that starts with '?' is optional: a tracer file's line for
 * other versions of a library (redis.tracer's RedisClient, of redis-rb 5),
 * whose class or method missing is a NOTICE, not an error. Returns 1 and
 * sets *text to the selector without its '?', or returns 0. */
int rbtrace_selector_optional(VALUE *text);

/* An optional selector whose class or method is not defined (a NOTICE). */
void rbtrace_selector_report_absent(VALUE text, VALUE error);

/*
 * The errors of one command's selectors. A tracer file names classes of
 * libraries a process may not use (-c pg in an app without pg): one line
 * per missing class, not one per selector. Made by _errors_new (a Ruby
 * object: the caller keeps it on its stack), fed by _errors_add (a missing
 * class is remembered, any other error reported at once), said by
 * _errors_report.
 */
VALUE rbtrace_selector_errors_new(void);
void rbtrace_selector_errors_add(VALUE errors, VALUE text, VALUE error);
void rbtrace_selector_errors_report(VALUE errors);

void Init_rbtrace_selector(VALUE mod);

#endif
