/*
 * sampler.h - what the files of the Sampler (sampler.c explains it) share: the data a
 * tick gathers, the Sampler object, and the functions of its two phases.
 */
#ifndef PPK_PY_SAMPLER_H
#define PPK_PY_SAMPLER_H

#include "binding.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Per-tick data ----------------------------------------------------------------- */

typedef struct gframe {
    ppk_str name, file;
    int64_t start_line, line;
    ppk_function_id fid; /* the function in the recorder's dictionary; 0: not known */
    PyCodeObject *code;  /* and instruction offset: the frame cache's key (below) */
    int lasti;
    uint16_t slot;       /* of the frame cache entry it came from (FCACHE_SIZE) */
    uint8_t traceable;   /* lasti is past the code's prologue (ppk_py_frame_traceable) */
} gframe;

typedef struct glabel {
    ppk_str key, str;
    int is_num;
    int64_t num;
} glabel;

typedef struct gthread {
    unsigned long ident;
    unsigned long native_id;
    int64_t parent_id;   /* a waiting task's: the id of the task awaiting it (0: none;
                          * beside ident: a task's visit reads both, sampler_tasks.h) */
    ppk_str name;      /* empty: unknown */
    PyObject *name_obj; /* the str it is the UTF-8 of (borrowed: a kept reference) */
    size_t name_ref;    /* that reference's index in SamplerObject.refs (NO_REF: none) */
    const void *ts;     /* its thread state (prefetched at the next tick) */
    ppk_str task_name; /* empty: no task, or no name */
    int64_t task_id;   /* 0: no task */
    ppk_str parent_name; /* a waiting task's: the task awaiting it (empty: none known) */
    ppk_str task_state;  /* a waiting task's: "waiting" (on a future) or "ready" (to run) */
    size_t first_frame, n_frames;
    uint64_t omitted;    /* frames past n_frames (the recorder's max_frames), not read */
    size_t first_label, n_labels;
    int64_t wall_ns;
    int64_t cpu_now; /* its CPU clock at this tick (-1: none; CPU_LATER: see below) */
    int64_t cpu_pre; /* with CPU_LATER: its clock in phase 0 */
    int reused;      /* its frames are phase 0's copy */
    unsigned unread; /* see tslot */
    int main_mode;   /* the main thread: MAIN_RUNNING, MAIN_BLOCKING or MAIN_BLOCKED */
    int kept;        /* its frames and labels are a kept_sample's (below) */
    uint64_t held_since; /* see tslot */
} gthread;

/* The frame cache: what a frame shows (its code's names and the line, and the
 * function's id once phase 2 learnt it) by code object and instruction offset, so that
 * a frame seen at an earlier tick costs a lookup instead of a line-table walk.
 * Direct-mapped, FCACHE_SIZE gframes (code NULL: empty); an entry holds a reference to
 * its code object (so the address cannot be reused by another code while it is
 * cached); an evicted code is released at the next tick, since strings of the tick
 * being gathered may point into it.
 *
 * A code that the program dropped would stay alive as long as an entry holds it (until
 * another frame takes its slot, maybe never), and with it its names, line table and
 * constants, whatever their size: a program that makes code forever (exec, templates)
 * would see the profiler keep up to FCACHE_SIZE dead codes. So each pass and each
 * callback of the main thread sweeps FCACHE_SWEEP entries in turn
 * (ppk_py_fcache_sweep), evicting those whose code only the cache holds: its reference
 * count is the number of entries holding it, which `fcounts` keeps (an open-addressed
 * table of FCOUNT_SIZE slots, linear probing, by code). Every entry is looked at once
 * every FCACHE_SIZE / FCACHE_SWEEP ticks. */
#define FCACHE_SIZE 4096
#define FCACHE_SWEEP 32
#define FCOUNT_SIZE (2 * FCACHE_SIZE)
_Static_assert(FCACHE_SIZE <= 65536, "gframe.slot is 16 bits");
_Static_assert(FCACHE_SIZE % FCACHE_SWEEP == 0, "a sweep ends at the last entry");

typedef struct fcount {
    PyCodeObject *code; /* NULL: empty */
    Py_ssize_t n;       /* entries holding it */
} fcount;

/* Phase 1 reads the walks of up to AHEAD_THREADS threads together, AHEAD_DEPTH frames
 * of each (ppk_py_walk_ahead), then goes on with each deeper walk alone. */
#define AHEAD_THREADS 16
#define AHEAD_DEPTH 64
/* Thread states whose lines phase 1 asks for before it reads the thread list. */
#define TS_AHEAD 64

/* asyncio's objects that a pass reads, with the GIL: asyncio.tasks._current_tasks (the
 * task each running loop is stepping) and the set under asyncio's task WeakSet
 * (ppk_py_task_set). Looked up in sys.modules and in the module, they cost cold lines
 * at every pass, so they are held (strong references, or NULL: not found, asyncio not
 * imported yet) and looked up again every AIO_REFRESH passes or callbacks (a program
 * that replaces them is followed within that many ticks), and, while one is not found,
 * after each import. An object replaced goes with the pass's references (its last
 * reference may run finalizers). */
#define AIO_REFRESH 16
typedef struct aio_objects {
    PyObject *current;      /* a dict */
    PyObject *set;          /* a set */
    unsigned uses;
    Py_ssize_t modules_len; /* len(sys.modules) when one was not found (-1: none) */
} aio_objects;

/* threading._active, once looked up (ppk_py_threads_by_ident). */
typedef struct threads_dict {
    int looked;
    PyObject *dict; /* borrowed; NULL: none */
    int plain;      /* ppk_py_dict_plain(dict) */
} threads_dict;

/* Frames of a thread read ahead, and its walk to go on with after them. */
typedef struct ppk_py_ahead {
    ppk_py_walk walk;
    const ppk_py_frame_ref *refs;
    size_t n;
} ppk_py_ahead;

/* What a thread had at its previous sample, for the deltas; and its frames then, which
 * are still its frames if its CPU clock has not moved since (ppk_py_gather_thread). */
typedef struct tslot {
    unsigned long ident, native_id; /* native_id 0: empty slot (1 when unknown) */
    unsigned long tid;              /* the kernel's thread id (0: unknown) */
    int64_t wall_ns;                /* CLOCK_MONOTONIC at the previous sample */
    int64_t cpu_ns;                 /* its CPU clock then (-1: none) */
    /* The stack of its last sample that found it running, by function id (ran_cap
     * allocated), and a hash of that sample's labels (sampler_record.c) */
    ppk_id_frame *ran;
    size_t ran_cap, n_ran;
    uint64_t ran_labels;
    size_t first_frame, n_frames;   /* in SamplerObject.prev */
    uint64_t omitted;               /* gthread.omitted */
    /* The frame cache's eviction count (SamplerObject.fcache_evictions) at a moment
     * when each of these frames' code was held by its frame cache entry: while the
     * count has not moved, they still are. NOT_HELD: not known. */
    uint64_t held_since;
    PyObject *name_obj; /* its name then (borrowed: held until the end of the next pass) */
    ppk_str name;       /* its UTF-8 */
    size_t name_ref;    /* gthread.name_ref */
    const void *ts;     /* its thread state then (only prefetched) */
    /* cpu_ns was read in phase 2, after the frames were taken: the thread may have run
     * in between, so an unchanged clock does not prove the frames unchanged. */
    int cpu_late;
    /* Its frames were a copy (it had not run), and its clock reading then was assumed
     * rather than read on this many ticks in a row (CLOCK_SKIPS at most). */
    int reused;
    unsigned unread;
    /* Set by phase 0 of this tick: its CPU clock then (-1: none), and where in
     * SamplerObject.tick its frames were copied, the clock not having moved since they
     * were taken (NO_COPY: not copied). */
    int64_t pre_cpu;
    size_t pre_first;
    int pre_assumed; /* pre_cpu is cpu_ns, not read (ppk_py_prepare) */
} tslot;

#define NO_COPY SIZE_MAX
#define NO_REF SIZE_MAX
/* A thread that phase 0 found running is walked anyway, and its CPU time only needs a
 * reading near its sample. When the pass took the GIL within CPU_FRESH_NS of the start
 * of phase 0, phase 0's reading is that one: CPU time the thread spends between that
 * reading and the walk is counted at its next sample (a tenth of a period at 100 Hz at
 * most). Otherwise (a long wait for the GIL) its clock is read in phase 2, without the
 * GIL, and gthread.cpu_now is CPU_LATER until then (a second clock read that tick: a
 * system call of 1-2 us here). */
#define CPU_FRESH_NS 1000000
#define CPU_LATER (-2)
/* Ticks in a row at most on which phase 0 takes an idle thread's clock as unchanged
 * without reading it (ppk_py_prepare). */
#define CLOCK_SKIPS 3

#define NOT_HELD UINT64_MAX

/* A growable array of `size`-byte items (malloc: phase 2 runs without the GIL). */
typedef struct vec {
    void *items;
    size_t n, cap, size;
} vec;

static inline void *vec_push(vec *v) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        void *p = realloc(v->items, cap * v->size);
        if (!p) return NULL;
        v->items = p;
        v->cap = cap;
    }
    return (char *)v->items + v->size * v->n++;
}

/* Room for `n` more items without reallocating. -1: no memory. */
static inline int vec_reserve(vec *v, size_t n) {
    if (v->cap - v->n >= n) return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap - v->n < n) cap *= 2;
    void *p = realloc(v->items, cap * v->size);
    if (!p) return -1;
    v->items = p;
    v->cap = cap;
    return 0;
}

static inline void vec_free(vec *v) {
    free(v->items);
    v->items = NULL;
    v->n = v->cap = 0;
}

#define VEC(T) ((vec){NULL, 0, 0, sizeof(T)})
#define AT(v, T, i) (((T *)(v).items)[i])

/* A function id phase 2 learnt for a frame cache entry, for the entry (with the GIL). */
typedef struct fixup {
    uint32_t slot;
    int lasti;
    PyCodeObject *code; /* only compared: the entry may have changed since */
    ppk_function_id fid;
} fixup;

/* What one pass gathered: threads, their frames and labels; and the ids its phase 2
 * learnt. A thread's frames are indices (uint32_t) into `uniq`, copies of frame cache
 * entries: in a pass's buffer, phase 1 copies an entry once (the fstamps say where)
 * and a frame of it seen again costs a 4-byte index, not a 72-byte gframe; phase 0
 * copies each copy of the previous pass that idle threads' stacks use once
 * (SamplerObject.remap); the main thread's callback (SamplerObject.cb) copies every
 * frame. The copies stay valid whatever the frame cache does after (an entry evicted
 * later in the pass, or by the main thread's callback while phase 2 reads them). */
typedef struct gbuf {
    vec frames, uniq, labels, threads, fixups;
} gbuf;

/* Where frame cache entry i was copied into the pass's `uniq` (idx), if that pass's
 * generation is `gen` (SamplerObject.fgen, never 0; an eviction sets 0): the pass's
 * later frames of the entry take that copy. */
typedef struct fstamp {
    uint32_t gen, idx;
} fstamp;

static inline void gbuf_init(gbuf *b) {
    b->frames = VEC(uint32_t);
    b->uniq = VEC(gframe);
    b->labels = VEC(glabel);
    b->threads = VEC(gthread);
    b->fixups = VEC(fixup);
}

static inline void gbuf_free(gbuf *b) {
    vec_free(&b->frames);
    vec_free(&b->uniq);
    vec_free(&b->labels);
    vec_free(&b->threads);
    vec_free(&b->fixups);
}

/* A thread's sample, kept in memory of its own (its frames by function id, its labels'
 * bytes copied): the last pass records the thread that stops the sampler with the stack
 * and labels of its last sample (ppk_py_gather), its own stack then being the stop's. */
typedef struct kept_sample {
    gthread gt; /* its strings point into `bytes`; first_frame, first_label: 0 */
    vec frames; /* ppk_id_frame */
    vec labels; /* glabel, their strings in `bytes` */
    vec bytes;
    int valid;
} kept_sample;

static inline void kept_init(kept_sample *k) {
    k->frames = VEC(ppk_id_frame);
    k->labels = VEC(glabel);
    k->bytes = VEC(char);
    k->valid = 0;
}

static inline void kept_free(kept_sample *k) {
    vec_free(&k->frames);
    vec_free(&k->labels);
    vec_free(&k->bytes);
    k->valid = 0;
}

/* ---- The object -------------------------------------------------------------------- */

/* Sampler.stats(): name, and what it counts. One list for the struct and the dict. */
#define PPK_PY_SAMPLER_STATS(X)                                                            \
    X(ticks)                  /* ticks sampled */                                          \
    X(samples)                /* samples flushed */                                        \
    X(ticks_coalesced)        /* ticks recorded in another's sample (a task's: count - 1) */ \
    X(samples_failed)         /* flushes the recorder refused */                           \
    X(labels_refused)         /* samples with a label refused (e.g. a tag's key taken) */   \
    X(ticks_late)             /* ticks more than a period late (the missed ones skipped) */ \
    X(ticks_slowed)           /* ticks the CPU budget moved later (cpu_budget) */         \
    X(slowed_ns_total)        /* by how much, in all */                                    \
    X(tick_gap_ns_max)        /* the longest time between two ticks (not a sum) */        \
    X(gil_wait_ns_total)      /* waiting for the GIL */                                    \
    X(gil_wait_ns_max)                                                                     \
    X(gil_hold_ns_total)      /* phase 1, with the GIL */                                  \
    X(gil_hold_ns_max)                                                                     \
    X(tick_ns_total)          /* phase 1 and phase 2 */                                    \
    X(prepare_ns_total)       /* phase 0, before taking the GIL */                         \
    X(cpu_ns)                 /* the sampler thread's own CPU time (own_tid) */           \
    X(main_callbacks)         /* samples the main thread took of itself */                 \
    X(main_callback_ns_total) /* their time, in the main thread */                         \
    X(main_callback_charged_ns_total) /* what the CPU budget charged them (sampler.c,      \
                               * callback_charge) */                                      \
    X(main_answers_awaited)   /* ticks that waited for its sample (it was alone, and      \
                               * blocked or with asyncio tasks; sampler.c, ask_main) */   \
    X(main_blocked)           /* ticks that sampled the main thread where it blocked */ \
    X(stacks_reused)          /* threads whose frames were the previous pass's (idle) */ \
    X(cpu_moved)              /* of the samples, those of CPU time used between ticks   \
                               * by a thread found blocking, on its last running stack */ \
    X(frame_cache_misses)     /* frames whose line was computed (not in the frame cache) */ \
    X(ticks_without_gil)      /* the main thread sampled itself and was alone */    \
    X(holder_passes)          /* passes whose phase 1 the GIL's holder ran (3.12+) */ \
    X(holder_ns_total)        /* that phase 1, in the holder's thread: part of          \
                               * gil_hold_ns_total, not of cpu_ns */                   \
    X(handoffs)               /* times the main thread let the GIL go for the sampler  \
                               * (yield_gil) */                                          \
    X(handoffs_failed)        /* of which it took the GIL back before the sampler had  \
                               * it (HANDOFF_WAIT_NS passed, or a fork) */               \
    X(refs_held)              /* references held at the last tick (not a sum) */ \
    X(tasks_seen)             /* waiting asyncio tasks sampled (one per task per tick) */ \
    X(tasks_walked)           /* of which their coroutine chain was read (it had moved) */ \
    X(tasks_skipped)          /* live tasks left for a later tick (max_tasks_per_tick) */ \
    X(task_samples)           /* samples recorded for them (coalesced ticks) */ \
    X(task_ns_total)          /* reading them, with the GIL (part of gil_hold_ns_total) */ \
    X(task_read_ns_total)     /* of which reading the chains of tasks_walked */ \
    X(task_ticks_quiet)       /* ticks that found no loop's thread had run: none read */ \
    X(task_ticks_hooked)      /* ticks that visited only the tasks their loop had       \
                               * scheduled (sampler_task_hook.c) */                     \
    X(task_marks_dropped)     /* tasks their loop scheduled past what the hook passes \
                               * could read: read at their turn instead */             \
    X(started_ns)             /* CLOCK_MONOTONIC (time.monotonic_ns()) at the last start: \
                               * the first samples' wall time counts from it */      \
    X(last_tick_ns)           /* CLOCK_MONOTONIC of the last tick's samples (0: none)  \
                               * (a thread's time after it is not recorded yet) */   \
    X(budget_owed_ns)         /* sampling time the CPU budget has not allowed yet, as \
                               * stats() reads it (sampler.c: charge_budget) */

#define PPK_PY_STAT_FIELD_(name) uint64_t name;
typedef struct sampler_stats {
    PPK_PY_SAMPLER_STATS(PPK_PY_STAT_FIELD_)
} sampler_stats;
#undef PPK_PY_STAT_FIELD_

typedef struct SamplerObject {
    PyObject_HEAD
    RecorderObject *recorder;
    PyObject *tags_thread; /* dict: thread ident -> ((key, value), ...), or NULL */
    PyObject *tags_task;   /* dict: id(task) -> ((key, value), ...), or NULL */
    int64_t period_ns;
    int wall_idx, cpu_idx, count_idx; /* -1: not recorded */
    int function_ids; /* frames pushed by function id (else by their strings) */
    int tasks_on;         /* sample asyncio tasks that wait (sampler_tasks.c) */
    int task_hook;        /* learn which tasks moved from their loop's call_soon */
    size_t max_tasks;     /* tasks visited per tick at most */
    uint64_t coalesce;    /* ticks of an unchanged waiting task recorded as one sample */
    /* The share of one core sampling may take (cpu_budget / 100; 0: no limit), and
     * from when the sampling so far is within it (CLOCK_MONOTONIC; under lock). */
    double budget;
    int64_t budget_until;

    PyInterpreterState *interp;
    pthread_t thread;
    int state;           /* SAMPLER_STOPPED, _STARTING, _RUNNING, _STOPPING (GIL) */
    int restart_pending; /* it was running when the process forked (GIL) */
    struct SamplerObject *next_live, *prev_live; /* started samplers (GIL) */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC */
    /* The sampler waits for the GIL (under lock; `handoff` says when it has it): the
     * main thread hands it over (yield_gil, pending while yield_pending: at most one
     * is queued, so the main thread's callbacks always find room). */
    int gil_wanted;
    pthread_cond_t handoff; /* CLOCK_MONOTONIC */
    atomic_int yield_pending;
    int stop;            /* under lock */
    /* The thread that stopped the sampler (under lock): the last pass, which `final`
     * marks, records it with its last sample's stack and labels (its stack is the
     * stop's), kept in `stopper_last` (the sampler's thread). */
    unsigned long stopper;
    int final;
    kept_sample stopper_last;
    /* Phase 1 run by whichever thread holds the GIL (holder_callback, CPython 3.12 and
     * later), while the sampler waits: holder_state (HOLDER_IDLE, _ASKED, _RUNNING,
     * _DONE) and holder_queued (calls in CPython's queue, not run yet) under lock;
     * holder_out is what that phase 1 did, written by it before _DONE. */
    int holder_state, holder_queued;
    unsigned long pass_ident; /* the thread running phase 1 (GIL), 0 when none */
    struct phase1 {
        int64_t hold, release; /* CLOCK_MONOTONIC: phase 1 began and ended */
        int open, ok;          /* the recorder was open; the pass gathered */
        size_t held;           /* references held after it */
        uint64_t misses;       /* fcache_misses after it */
    } holder_out;

    /* The sampler thread's own state (its thread only, or under the GIL while it is
     * stopped). */
    PyThreadState *ts;
    ppk_sample *builder;
    gbuf tick, prev; /* this pass's and the previous one's (recorded) */
    vec remap;       /* phase 0: prev.uniq index -> tick.uniq index (UINT32_MAX: none) */
    vec running, cb_running; /* running_task: of a pass, of the main thread's callback */
    uint64_t pass_reused; /* threads of this pass whose frames were copied from prev */
    /* The GIL's changes of holder (ppk_py_gil_takes) when phase 0 began, and whether
     * there was at most one since: then no thread whose clock phase 0 found unmoved ran
     * Python code since (ppk_py_gather_thread). */
    unsigned long gil_takes_pre;
    int gil_kept;
    /* The GIL's last holder when phase 0 began: it may take the GIL again without a
     * counted change, so its clock is always read again. holder_pre_locked: it held
     * the GIL then (running Python code at the tick: runs_now). */
    const PyThreadState *holder_pre;
    int holder_pre_locked;
    /* The same count when the previous pass began its phase 1 and, unchanged, when it let
     * the GIL go (valid: it completed, and no tick without a pass came since): equal at
     * phase 0, no thread has run Python code since that pass. */
    unsigned long gil_takes_released;
    int released_valid;
    /* This pass's phase 1 began within CPU_FRESH_NS of the start of its phase 0
     * (phase0_ns): the clocks phase 0 read are the CPU readings of the threads it found
     * running. */
    int64_t phase0_ns;
    int pre_fresh;
    uint64_t passes;      /* passes begun */
    tslot *slots, *next_slots; /* every thread but the main one; power-of-two capacity */
    size_t slot_cap;
    int64_t prev_tick_ns; /* CLOCK_MONOTONIC of the previous phase 1 */
    /* The thread states of the previous pass's threads, listed by phase 0 (at most
     * TS_AHEAD): phase 1 asks for their lines first, together. After a long wait for
     * the GIL every line a pass reads is cold, and one after another each costs up to
     * a microsecond here. */
    const PyThreadState *ts_ahead[TS_AHEAD];
    size_t n_ts_ahead;

    /* Under the GIL (phase 1 and main_callback): the frame cache, and the references
     * that keep what the gathered frames point to alive until the next phase 1. */
    gframe *fcache; /* FCACHE_SIZE entries, allocated at start */
    fstamp *fstamps; /* FCACHE_SIZE, for phase 1 into sp->tick, allocated with it */
    uint32_t fgen;   /* the pass's generation: a new one at each phase 1 */
    ppk_py_frame_ref ahead[AHEAD_THREADS * AHEAD_DEPTH]; /* walks read ahead */
    fcount *fcounts; /* FCOUNT_SIZE: the entries holding each code (FCACHE_SIZE) */
    uint32_t fsweep; /* the next entry ppk_py_fcache_sweep looks at */
    /* Entries holding a code in each run of FCACHE_SWEEP entries that a sweep looks at:
     * a run with none is not read (a run's lines are cold by its turn, ~128 passes
     * later: 36 of them, 2-6 us of a pass with the GIL). */
    uint16_t fheld[FCACHE_SIZE / FCACHE_SWEEP];
    uint64_t fcache_evictions; /* entries whose code was replaced or swept, ever */
    uint64_t fcache_misses;    /* frames not found in it, since start */
    /* The UTF-8 form of code names and filenames that have none (lone surrogates):
     * str -> bytes, kept from start to stop, at most REPAIRS_MAX (code_str). */
    PyObject *repairs;
    aio_objects aio; /* ppk_py_aio_refresh */
    vec refs, old_refs; /* this pass's; the previous one's, until this one has taken
                         * what it reuses (the names of idle threads) */

    /* The main thread: sampled by main_callback (in the main thread, with the GIL) or
     * by the sampler's pass, never both in one tick (main_state says which). */
    unsigned long main_ident;
    _Atomic(PyThreadState *) main_ts; /* its thread state, as last seen (only compared) */
    atomic_int main_state;  /* MAIN_IDLE, MAIN_REQUESTED, MAIN_DONE, MAIN_CANCELLED */
    ppk_sample *cb_builder; /* main_callback's own: it may run during phase 2 */
    gbuf cb;
    int64_t main_wall_ns, main_cpu_ns; /* at the main thread's previous sample */
    int64_t main_cpu_carry;            /* CPU time not charged yet (main_deltas) */
    tslot main_prev; /* its frames in prev, if the sampler's pass gathered it there */
    kept_sample main_last; /* main_callback's last sample (the main thread's, GIL) */
    int main_requested_now;            /* this tick asked main_callback to run */
    /* Requests made (main_seq, counted by the sampler thread), and the last one that
     * main_callback answered, with the number of other threads it saw then (besides the
     * sampler's; -1: unknown). Under lock. */
    uint64_t main_seq, main_answered;
    int main_others;
    int main_no_tasks;  /* no asyncio task at that answer (no set, or an empty one) */
    int answer_awaited; /* the sampler thread waits for main_callback's answer (wait_alone) */
    /* The last tick had no pass (skip_pass): no frames of a pass wait to be copied or
     * recorded, so main_callback may release the references (under lock). */
    int passless;
    int main_blocked_now;              /* this tick's pass sampled the main thread */
    /* The asyncio tasks (sampler_tasks.c): read by the sampler thread's pass, or by
     * main_callback when the sampler waits for it (cb_tasks, under lock). */
    struct task_table *tasks;
    int cb_tasks;    /* TASKS_NONE, _ASKED (the callback may read them), _BUSY, _DONE */
    int tasks_by_cb; /* this tick's callback read them, and holds the recorder busy
                      * until they are recorded (the sampler thread's) */
    void *main_task; /* the task the callback's last sample showed running (compared) */
    sampler_stats st; /* under lock */
    /* The sampler thread's kernel id from its start until it ends (under lock; 0: no
     * thread): stats() reads its CPU clock (st.cpu_ns is written as it ends), rather
     * than the thread reading it at every tick (a system call of 1.5-2.5 us here). */
    unsigned long own_tid;
} SamplerObject;

enum { SAMPLER_STOPPED, SAMPLER_STARTING, SAMPLER_RUNNING, SAMPLER_STOPPING };
enum { HOLDER_IDLE, HOLDER_ASKED, HOLDER_RUNNING, HOLDER_DONE };

enum { MAIN_IDLE, MAIN_REQUESTED, MAIN_DONE, MAIN_CANCELLED };

enum { TASKS_NONE, TASKS_ASKED, TASKS_BUSY, TASKS_DONE };

/* How the main thread was found: running Python code (it sampled itself), blocked
 * since this tick (it ran Python code since its previous sample), or blocked since the
 * previous tick at least (it ran no Python code since). */
enum { MAIN_RUNNING = 1, MAIN_BLOCKING, MAIN_BLOCKED };


static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A thread's CPU time from its kernel thread id: the Linux encoding of a per-thread
 * CPU-time clock (what pthread_getcpuclockid computes from the pthread_t). The tid is
 * used instead of the pthread_t because a tid of a thread that has exited only makes
 * clock_gettime fail, while a stale pthread_t would be dereferenced. -1: no clock. */
static inline int64_t thread_cpu_ns(unsigned long tid) {
    if (!tid) return -1;
    clockid_t cid = (clockid_t)((~(unsigned)tid << 3) | 6u);
    struct timespec ts;
    if (clock_gettime(cid, &ts)) return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* What ppk_py_record_thread did, added to the statistics by its caller. */
typedef struct rec_counts {
    uint64_t samples, coalesced, failed, labels_refused, task_samples;
    uint64_t cpu_moved; /* samples of CPU time moved to a running stack */
    uint64_t gap_ns;  /* since the previous tick recorded */
    uint64_t tick_ns; /* the tick recorded (0: none) */
} rec_counts;

/* The loops running a task now: pairs (thread ident, task). */
typedef struct running_task {
    unsigned long ident;
    PyObject *task; /* borrowed from _current_tasks, which phase 1 does not change */
} running_task;

/* ---- sampler_walk.c: phase 1, with the GIL ---------------------------------------- */

/* Interns the attribute names phase 1 reads. -1 with an exception set. */
int ppk_py_walk_ready(void);
/* Releases the references the passes kept (with the GIL). */
void ppk_py_release_refs(SamplerObject *sp);
/* Forgets the frames of the previous pass (none will be reused): after a pass failed,
 * what they point to may be released. */
void ppk_py_forget_frames(SamplerObject *sp);
/* The sampler's pass: every thread but its own; the main thread only when it is
 * blocked. -1: no memory (the tick is skipped; the caller then forgets the frames). */
int ppk_py_gather(SamplerObject *sp);
/* Keeps thread gt's sample of b in k, once phase 2 has recorded it (its frames have
 * their function ids then); k is not valid if a frame has none (the dictionary refused
 * it, or ids are off), or without memory. */
void ppk_py_keep_sample(kept_sample *k, const gbuf *b, const gthread *gt);
/* Evicts, from the next FCACHE_SWEEP entries of the frame cache, those whose code only
 * the cache holds (the program dropped it), their references released with the pass's;
 * and, once a turn of the whole cache, the repaired names (sp->repairs) that only the
 * sampler holds. With the GIL. */
void ppk_py_fcache_sweep(SamplerObject *sp);
/* Gives the frame cache the function ids b's phase 2 learnt (with the GIL). */
void ppk_py_apply_fixups(SamplerObject *sp, gbuf *b);
/* Gathers thread t into b; its frames are those of `prev` (its slot, or NULL) when
 * they cannot have changed. -1: no memory. */
int ppk_py_gather_thread(SamplerObject *sp, gbuf *b, PyThreadState *t, const tslot *prev,
                         const ppk_py_ahead *ahead, threads_dict *active, const running_task *tasks,
                         size_t n_tasks);
/* Disables the cyclic GC for a walk (returns whether it was enabled); resume restores. */
int ppk_py_gc_pause(void);
void ppk_py_gc_resume(int was_enabled);
/* threading._active (borrowed), or NULL: looked up once a pass, when first needed (most
 * passes read no thread's name, and the lookups, in sys.modules and in the module,
 * cost microseconds when they are not in the caches). */
PyObject *ppk_py_threads_by_ident(threads_dict *d);
/* threading._active[ident] (borrowed), or NULL; no Python code runs. */
PyObject *ppk_py_thread_of(threads_dict *d, PyObject *ident);
/* Looks up asyncio's objects again (aio_objects) when due: at every AIO_REFRESH-th
 * call, and, while one is not found, at every call after an import (sys.modules grew
 * or shrank). A pass and the main thread's callback call it first. */
void ppk_py_aio_refresh(SamplerObject *sp);
/* The (thread ident, task) of every loop running a task now, at most `max`. */
size_t ppk_py_running_tasks(SamplerObject *sp, vec *out);

/* Whether type t looks attributes up as object.__getattribute__ does (no
 * __getattribute__ of its own; a __getattr__ may follow, for names not found). */
int ppk_py_generic_first(PyTypeObject *t);
/* Helpers of phase 1 that sampler_tasks.c shares. */
PyObject *ppk_py_safe_getattr(PyObject *obj, PyObject *name);
int ppk_py_dict_plain(PyObject *d);
PyObject *ppk_py_dict_get(PyObject *d, PyObject *key, int plain);
PyObject *ppk_py_module_attr(PyObject *mod, PyObject *attr);
int ppk_py_keep_ref(SamplerObject *sp, PyObject *o);
ppk_str ppk_py_utf8(PyObject *s);
/* The same, but a str with lone surrogates gets them encoded as such, in a new bytes
 * object (*bytes, to keep alive with the str; NULL when not needed): those of its first
 * max_len + 1 characters only, max_len being the recorder's max_string_len. Each
 * character gives the library one byte at least, so it cuts the string at the same
 * place (and counts the same repair and cut) as it would the whole; the bytes and the
 * encoding's time are then bounded by max_len, whatever the string's length. */
ppk_str ppk_py_utf8_repair(PyObject *s, size_t max_len, PyObject **bytes);
/* ppk_py_utf8_repair for this pass: the bytes, if any, kept until the next pass. */
ppk_str ppk_py_utf8_kept(SamplerObject *sp, PyObject *s);
PyObject *ppk_py_task_name(PyObject *task);
/* What the frame at instruction offset `lasti` of `code` (borrowed, alive) shows,
 * through the frame cache. -1: no memory. */
int ppk_py_code_frame(SamplerObject *sp, PyCodeObject *code, int lasti, gframe *out);
/* The tuple of pprofkit.tag() labels for `key` in dict `tags` (borrowed), or NULL. */
PyObject *ppk_py_tags_of(PyObject *tags, PyObject *key);
/* Appends the labels of such a tuple to `labels`; their number. */
size_t ppk_py_tag_labels(PyObject *t, vec *labels);

/* ---- sampler_tasks.c: asyncio tasks that wait -------------------------------------- */

/* Sets up the task table (start). -1: no memory. */
int ppk_py_tasks_init(SamplerObject *sp);
/* Phase 1 for tasks (with the GIL: in the pass after the threads, or in main_callback):
 * visits the tasks their loop marked, and up to max_tasks live tasks of asyncio's task
 * set (a 64th of that in a hook pass), reading the coroutine chain of those that
 * moved. `pass`: the threads gathered before (their clocks). main_at: when
 * the main thread sampled itself at this tick (its callback's time), or 0 when phase 2
 * samples it (at the tick's time): the time of this tick's samples of the tasks of its
 * loop (sampler_tasks.c, record_tasks). */
void ppk_py_gather_tasks(SamplerObject *sp, const gbuf *pass, threads_dict *active,
                         const running_task *running, size_t n_running, int64_t main_at);
/* Phase 2 for tasks: their wall time since their previous sample, a task's recorded as
 * one sample once it holds `coalesce` periods of it, and when its stack changed or it
 * ended. */
void ppk_py_record_tasks(SamplerObject *sp, int64_t now, rec_counts *c);
/* Records what the tasks accumulated (at stop; the thread has ended). */
void ppk_py_flush_tasks(SamplerObject *sp, rec_counts *c);
/* Whether the table holds nothing of any task (none met, or all ended and their
 * stacks recorded and released; the sampler thread, while no phase 1 reads them). */
int ppk_py_tasks_none(const SamplerObject *sp);
/* Releases the table and its references (with the GIL, the thread stopped). */
void ppk_py_free_tasks(SamplerObject *sp);

/* ---- sampler_record.c: phase 2, without the GIL ----------------------------------- */

/* Phase 0, before taking the GIL, so that it is not held for this work: the frames of
 * each thread of the previous pass whose CPU clock has not moved since, copied into the
 * new pass (which phase 1 takes if the clock still has not moved then), and prefetches
 * of what phase 1 will read of them. (Reading a thread's clock the first time after the
 * sampler slept costs microseconds; again, right after, a fraction of one.) */
void ppk_py_prepare(SamplerObject *sp);


tslot *ppk_py_slot_find(tslot *slots, size_t cap, unsigned long ident, unsigned long native);
/* Makes room for `n` threads in both slot tables. -1: no memory. */
int ppk_py_slots_reserve(SamplerObject *sp, size_t n);
/* Frees what the slots hold (their running stacks). */
void ppk_py_slots_release(tslot *slots, size_t cap);
/* Pushes one gathered thread as a sample with builder s, and flushes it. */
void ppk_py_record_thread(SamplerObject *sp, ppk_sample *s, gbuf *b, const gthread *gt,
                          int64_t cpu, rec_counts *c);
/* The same for a sample of frames and labels of its own, with its count: the frames
 * are frames[idx[i]] (idx NULL: frames[i]). */
void ppk_py_record(SamplerObject *sp, ppk_sample *s, vec *fixups, const gthread *gt,
                   gframe *frames, const uint32_t *idx, const glabel *labels, int64_t cpu,
                   int64_t count, rec_counts *c);
/* The main thread's wall time (into gt) and the CPU time charged to this sample. */
int64_t ppk_py_main_deltas(SamplerObject *sp, gthread *gt, int64_t now);
/* Phase 2 for every thread of sp->tick, gathered at `now`. */
void ppk_py_record_all(SamplerObject *sp, int64_t now, rec_counts *c);

#endif
