/*
 * sampler_tasks.h - what the two files of the Sampler's asyncio tasks share
 * (sampler_tasks.c explains them): the entry table of the tasks met, the stack a task
 * showed, and the reading of one task (sampler_task_read.c).
 */
#ifndef PPK_PY_SAMPLER_TASKS_H
#define PPK_PY_SAMPLER_TASKS_H

#include "sampler.h"

/* The attributes of a task or future read (ppk_py_task_attr). */
enum { A_CORO, A_FUT_WAITER, A_LOOP, A_STATE, A_CALLBACKS, N_ATTRS };

/* What a task showed when its chain was last read: frames (leaf first), labels, and
 * the references that keep their strings alive. One allocation, aligned to a cache
 * line: what the visit of an unchanged task reads of it (visits, gt.ident and
 * gt.parent_id) and what phase 2 adds to it (acc_wall, acc_count) are in its first. */
typedef struct tstack {
    uint32_t visits;       /* ticks it was found unchanged, while it has no parent */
    uint32_t acc_tick;     /* the tick its ticks are counted up to (0: none yet) */
    int64_t acc_wall;      /* not recorded yet: wall time, ticks */
    uint64_t acc_count;
    gthread gt; /* ident, native_id, name, task_name, task_id, parent_*, n_frames, n_labels */
    gframe *frames;
    glabel *labels; /* pprofkit.tag() labels of the task */
    PyObject *name, *tags; /* the task's name and tags then (held: only compared) */
    PyObject *thread_name; /* its loop's thread's name (held) */
    PyObject *parent_name; /* its parent task's name (held) */
    PyObject **refs;
    size_t n_refs;
} tstack;

_Static_assert(offsetof(tstack, gt) + offsetof(gthread, parent_id) + sizeof(int64_t) <= 64 &&
                   offsetof(tstack, gt) + offsetof(gthread, ident) < 64,
               "what a visit reads of a stack and phase 2 adds to it is in its first line");

#define TOMB ((PyObject *)1)

/* Threads whose CPU clocks tell that no task can have moved (more: no quiet ticks). */
#define MAX_QUIET_THREADS 64

/* Loops a block of task_table.loop_blocks holds. */
#define LOOP_BLOCK 16

/* A slot of an open-addressing table of 2^k slots (mask 2^k - 1) for a pointer. */
static inline size_t ppk_py_ptr_hash(const void *p, size_t mask) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15u;
    return (size_t)(h >> 24) & mask;
}

typedef struct tentry {
    PyObject *task;   /* the key, not a reference (NULL: empty; TOMB: deleted) */
    PyObject *wr;     /* a reference to a weak reference to the task (the task set's) */
    PyObject *fut_wr; /* one to a weak reference to the future it waited on when its
                       * chain was read (NULL: none) */
    PyObject *fut;    /* its _fut_waiter at its last full visit (only compared and
                       * prefetched; NULL: none) */
    tstack *stack;    /* NULL: not read, running, done, or its loop not running */
    int64_t last_ns;  /* its previous sample (0: none; its first counts one interval) */
    uint64_t cycle;   /* the scan of the task set it was last visited in */
    uint32_t pass;    /* the pass it was last visited at (one visit a pass) */
    uint8_t done;     /* the task is done: skipped from now on */
    uint8_t in_steady; /* its index is in task_table.steady (once) */
    uint8_t pending;  /* its task is in task_table.pending (once) */
    uint8_t waits : 1;   /* at its last full visit, it waited on a future not done
                          * (computed while the hook is in use) */
    uint8_t settled : 1; /* and it was an asyncio task, the future asyncio's: only a
                          * step that its loop schedules (a mark) can move it */
    uint8_t idle : 1;    /* at its last full visit, its loop was not running (a loop
                          * that stopped ends the hook passes: the scans find it) */
} tentry;

/* A visit reads one cache line of the table (which is aligned to them). */
_Static_assert(sizeof(tentry) == 64, "a task entry is one cache line");

/* A stack replaced or ended, with what it had not recorded yet. */
typedef struct retired {
    tstack *st;
    int64_t wall;
    uint64_t count;
} retired;

/* An element of the task set met at this pass. */
typedef struct tslotv {
    PyObject *key, *task; /* the weak reference, its task (NULL: dead) */
    size_t pos;           /* in the set's table */
} tslotv;

/* The running loops seen at this pass: their thread. */
typedef struct loopinfo {
    PyObject *loop; /* only compared */
    unsigned long ident, native_id;
    PyObject *name; /* the thread's name (a reference kept until the next pass), or NULL */
    int hooked;     /* its call_soon is the hook (sampler_task_hook.c) */
    int listed;     /* in task_table.hook_loops (checked at this pass) */
} loopinfo;

/* A running loop whose tasks hook passes rely on the marks for, and its thread then. */
typedef struct hook_loop {
    PyObject *loop; /* held */
    unsigned long ident;
} hook_loop;

/* A task whose chain is to be read: its entry, and its loop as its visit found it. */
typedef struct twalk {
    size_t entry;
    const loopinfo *li;
} twalk;

typedef struct task_table {
    tentry *e;
    size_t cap, used, tombs; /* power-of-two capacity, at most half full with tombs */
    size_t cursor;           /* in the task set's hash table */
    size_t sweep_cursor;     /* in this table (sweep) */
    uint64_t cycle;
    size_t cycle_visits;     /* entries visited in this cycle */
    vec slots;               /* tslotv: the task set's elements visited at this pass */
    vec seen;                /* entry indices of this pass: those sampled */
    vec walk;                /* twalk: those whose chain is read, after the visits */
    vec retired;             /* retired: recorded in phase 2 */
    /* After a pass that read tasks: the entries it sampled (seen), the task set's size
     * then, and the CPU clocks then of the threads running their loops (their kernel
     * thread ids). */
    vec quiet;
    size_t quiet_live, quiet_fill;
    size_t n_quiet_threads;
    unsigned long quiet_tid[MAX_QUIET_THREADS];
    int64_t quiet_cpu[MAX_QUIET_THREADS];
    vec recorded;            /* tstack *: recorded, released at the next pass */
    vec unheld;              /* PyObject *: references of stacks recorded and freed
                              * without the GIL, released at the next pass */
    vec frames, labels;      /* scratch for a chain being read */
    size_t max_string_len;   /* the recorder's (ppk_py_utf8_repair) */
    /* The loops met this pass: blocks of LOOP_BLOCK kept from pass to pass (a twalk
     * points into them), found by loop through an open-addressing index (loop + 1 of
     * each slot's, 0: empty), both as large as the most loops a pass met. */
    loopinfo **loop_blocks;
    size_t n_loop_blocks, n_loops;
    uint32_t *loop_index;
    size_t loop_index_cap;
    size_t live, visits; /* tasks in the set, and visited, at this pass */
    int64_t main_at;     /* ppk_py_gather_tasks's main_at of this pass */
    const gbuf *threads; /* the threads this pass gathered (their names: loop_of) */
    unsigned long main_ident; /* the main thread's (SamplerObject.main_ident) */
    /* The last tick's samples (record_tasks): their times, and the interval a task's
     * first sample counts. */
    int64_t acc_now, acc_main, acc_step;
    int64_t trust_now, trust_main; /* those of the last one that followed a hook pass */
    uint32_t ticks, trust_tick;    /* the ticks so far (record_tasks), and that one */
    uint32_t pass;       /* passes so far (tentry.pass) */
    /* Hook passes (sampler_tasks.c): the marks taken at this pass (MARKS_CAP), the
     * marked tasks to visit again at the next one (held: not settled yet), the
     * entries with a stack that they account, the running loops they rely on, and the
     * first scan cycle whose visits they trust (an entry visited before it may have
     * moved unmarked: the marks were lost, or its loop was not covered). */
    PyObject **taken;
    vec pending;      /* PyObject * */
    vec steady;       /* size_t, each entry once (in_steady) */
    size_t steady_cursor;
    vec hook_loops;   /* hook_loop */
    uint64_t clean_from;
    int hook_pass;    /* this pass is one (phase 2 accounts the steady entries) */
} task_table;

/* ---- sampler_task_read.c: reading asyncio's objects, with the GIL ------------------ */

/* Interns the names read. -1 with an exception set. */
int ppk_py_asyncio_names(void);
/* asyncio's types and getters, once asyncio is imported. */
void ppk_py_asyncio_find(void);
/* Attribute `which` of a task or future, read without running Python code (a new
 * reference, or NULL). */
PyObject *ppk_py_task_attr(PyObject *obj, int which);
/* Whether a task is done (its _state is not PENDING). */
int ppk_py_task_done(PyObject *task);
/* Whether o is an asyncio future (C or pure Python; a task is one). */
int ppk_py_is_future(PyObject *o);
/* What weak reference wr points to, only to compare (NULL: dead). */
PyObject *ppk_py_weak_target(PyObject *wr);
/* asyncio's task set's underlying set (a new reference), or NULL. */
PyObject *ppk_py_task_set(void);
/* The thread ident a loop runs in (its _thread_id), or 0: it is not running. */
unsigned long ppk_py_loop_thread(PyObject *loop);
/* The running loop of `task` and its thread (cached for the pass), or NULL: its loop is
 * not running. */
loopinfo *ppk_py_task_loop(SamplerObject *sp, task_table *tt, PyObject *task,
                           threads_dict *active);
/* Forgets the loops of the previous pass; frees what the loops' table holds. */
void ppk_py_loops_clear(task_table *tt);
void ppk_py_loops_free(task_table *tt);
/* Whether o is an asyncio task (C or pure-Python). */
int ppk_py_is_task(PyObject *o);
/* Reads the chain of a task that moved (or is new); adds it to tt->seen. */
void ppk_py_walk_task(SamplerObject *sp, task_table *tt, const twalk *w);
/* Prefetches a task's coroutine (its frame's first lines: what its read begins with),
 * or with `awaited` what the coroutine awaits (once the coroutine is in the cache). */
void ppk_py_prefetch_chain(PyObject *task, int awaited);
/* Replaces entry e's stack by one with the parent its task has now, if it has one. */
void ppk_py_find_parent_again(task_table *tt, tentry *e);

/* ---- sampler_task_hook.c: tasks that may have moved, told by their loop ------------ */

/* Marks a batch holds at most (more: an overflow). */
#define MARKS_CAP 4096

/* Makes sp the sampler that takes the marks, if none is. 0: it is. */
int ppk_py_hook_claim(SamplerObject *sp);
/* Replaces BaseEventLoop.call_soon (and on 3.12 and later create_task) by the hook if
 * sp has claimed the marks and it is not done yet. 1: done now (the tasks met before
 * were not marked); 0: already, or not possible. */
int ppk_py_hook_install(SamplerObject *sp);
/* Whether calls to loop.call_soon reach the hook. */
int ppk_py_hook_covers(PyObject *loop);
/* Moves the batch of marks (strong references) into `into` (MARKS_CAP); their number.
 * *overflow: marks were lost since the last batch. */
size_t ppk_py_hook_take(SamplerObject *sp, PyObject **into, int *overflow);
/* Gives up the marks (sp's, if it claimed them): BaseEventLoop's methods restored, the
 * batch released (with the GIL; may run finalizers). */
void ppk_py_hook_release(SamplerObject *sp);

/* ---- sampler_tasks.c -------------------------------------------------------------- */

/* The entry's stack, with what it accumulated, to be recorded in phase 2. Returns the
 * time its samples reach (0: none). */
int64_t ppk_py_retire(task_table *tt, tentry *e);
/* Gives entry e stack st instead of the one it had (retired). */
void ppk_py_replace_stack(task_table *tt, tentry *e, tstack *st);
/* `task` is awaited by a task just read: its entry's stack gets the parent it has now
 * (a hook pass may not visit it). */
void ppk_py_task_awaited(task_table *tt, PyObject *task);
/* Entry i's task is sampled at this pass: tt->seen, and tt->steady once. */
void ppk_py_task_seen(task_table *tt, size_t i);

#endif
