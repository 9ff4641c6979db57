/*
 * sampler_tasks.c - the Sampler's asyncio tasks that wait (sampler.c explains the
 * whole): at each tick, one sample per task that is not done and not running, whose
 * stack is the task's coroutine chain (its coroutine's frame, then the coroutine or
 * generator it awaits, and so on; leaf first, as pprof reads) and whose labels are the
 * task's name and id, the thread running its loop, and the task awaiting it ("parent
 * task", "parent task id") when one is known. A running task is not sampled here: its
 * thread's sample shows it, on the thread's real stack, with its name. Values: the wall
 * time since the task's previous sample; no CPU time (a waiting task uses none). Label
 * "task state" tells these samples from the threads': "waiting" (on a future) or "ready"
 * (to run, scheduled).
 *
 * Where the tasks are: asyncio's task set (asyncio.tasks._all_tasks on 3.11,
 * _scheduled_tasks on 3.12 and 3.13: a WeakSet whose `data` is a set of weak references
 * to the tasks; the tasks of 3.12's eager set are running, so not sampled here). The
 * set's hash table (PySetObject, public in the 3.11 to 3.13 headers) is scanned from a
 * cursor that goes on from tick to tick, at most max_tasks tasks per tick: with more
 * live tasks than that, the ticks rotate through them, each task's wall time being the
 * time since its own previous sample, so totals stay right; a task not seen in a whole
 * scan of the table has ended.
 *
 * A waiting task costs little at a tick where it has not moved: its _fut_waiter, the
 * future it waits on, is the one it waited on when its chain was last read (compared
 * through a weak reference, so an address reused by a new future does not match; a
 * future that is waited on is not done, and a task that resumes waits on another one
 * or none). Such a task's tick adds its wall time to the task's entry; the entry is
 * recorded as one sample (count = its ticks) once it holds `coalesce` periods of wall
 * time (longer with many tasks, so that there are at most 2,000 such samples a second,
 * up to 5 times that: record_tasks), when its stack changes and when it ends, and at
 * stop: what an export holds can lag by that much, never more. A task that moved costs
 * ~25 times more (its chain is read again): at most max_tasks / 40 (16 at least) are read a tick, the
 * scan stopping there. An
 * entry holds references to what its stack's strings belong to (codes, names, tags), so
 * the stack stays valid until it is recorded; they are released at the pass after it
 * was (with the GIL, like the pass's own).
 *
 * Hook passes (sampler_task_hook.c): while BaseEventLoop.call_soon is the hook, the
 * tasks whose step or wakeup a loop scheduled since the last pass are marked, and a
 * task that was not has not moved. A pass then visits the marked tasks (those it
 * could not read for the bound of reads, and those not settled yet, running or ready
 * or woken up, are kept for the next, as are such tasks that a visit of the set
 * finds: hold_unsettled), and a 64th of max_tasks elements of the set (a
 * task whose first step ran unscheduled and unmarked, as an eager task factory's does
 * when the loop's create_task is not the hook, is found so); phase 2
 * accounts a tick of each entry that has a stack (tt->steady, max_tasks of them a tick,
 * in turn). It can do so once every task has been visited since the hook was there:
 * hook passes begin after a whole scan cycle that followed it (tt->clean_from), and
 * wait for another whenever marks may have been missed (more than MARKS_CAP between
 * two passes, a running loop that the hook does not cover, a loop that stopped; only
 * entries visited since are accounted). Marks past pending_room() are released, their
 * tasks no longer trusted (read at their share's turn): a burst, or ticks that the CPU
 * budget spaced out, would otherwise send the passes back to scanning, at more cost a
 * tick, which spaced the ticks out further. A stack that a pass after a hook pass
 * retires (the task moved, ended, runs) gets the time up to the previous tick: as
 * phase 2 accounts the entries in turn, it may not have had it yet.
 *
 * The parent task is found from the task's done callbacks: another task's wakeup (a C
 * function or a method bound to it: `await task`), TaskGroup._on_task_done (the group's
 * _parent_task), or a closure or a functools.partial over a future whose own callbacks
 * wake a task up (gather's outer future, asyncio.wait's waiter, 3.11's wait_for's). A label rather than the parent's frames as
 * the root of the child's stack: each task's samples then sum to that task's own
 * lifetime (a parent waiting on two children is not counted three times under its
 * frames), and a link that cannot be found (it rests on asyncio's private objects, no
 * graph of awaiters exists before 3.14) only loses a label instead of changing where
 * the time goes.
 *
 * Files: sampler_tasks.h (what they share), sampler_task_read.c (reading a task, without
 * running Python code), this file (the table of the tasks met, the scan, recording).
 */
#include "sampler_tasks.h"

/* ---- Set-up ------------------------------------------------------------------------ */

int ppk_py_tasks_init(SamplerObject *sp) {
    if (ppk_py_asyncio_names()) {
        PyErr_Clear();
        return -1;
    }
    task_table *tt = calloc(1, sizeof *tt);
    if (!tt) return -1;
    tt->cycle = 1; /* a new entry's 0 is none */
    tt->max_string_len = sp->recorder->max_string_len;
    tt->seen = tt->quiet = VEC(size_t);
    tt->walk = VEC(twalk);
    tt->slots = VEC(tslotv);
    tt->retired = VEC(retired);
    tt->recorded = VEC(tstack *);
    tt->unheld = VEC(PyObject *);
    tt->frames = VEC(gframe);
    tt->labels = VEC(glabel);
    tt->pending = VEC(PyObject *);
    tt->steady = VEC(size_t);
    tt->hook_loops = VEC(hook_loop);
    tt->clean_from = UINT64_MAX; /* no hook: no hook pass */
    sp->tasks = tt;
    if (sp->task_hook && !ppk_py_hook_claim(sp) &&
        !(tt->taken = malloc(MARKS_CAP * sizeof *tt->taken)))
        ppk_py_hook_release(sp);
    return 0;
}

/* ---- The entry table --------------------------------------------------------------- */

/* The entry of `task`, new if needed (room was made by table_reserve). */
static size_t entry_get(task_table *tt, PyObject *task) {
    size_t mask = tt->cap - 1, tomb = SIZE_MAX;
    for (size_t i = ppk_py_ptr_hash(task, mask);; i = (i + 1) & mask) {
        tentry *e = &tt->e[i];
        if (e->task == task) return i;
        if (e->task == TOMB) {
            if (tomb == SIZE_MAX) tomb = i;
        } else if (!e->task) {
            uint8_t listed = 0;
            if (tomb != SIZE_MAX) {
                i = tomb;
                tt->tombs--;
                listed = tt->e[i].in_steady; /* the index stays in tt->steady */
            }
            tt->e[i] = (tentry){.task = task, .in_steady = listed};
            tt->used++;
            return i;
        }
    }
}

/* The entry of `task`, or SIZE_MAX: none. */
static size_t entry_find(const task_table *tt, PyObject *task) {
    size_t mask = tt->cap - 1;
    for (size_t i = tt->cap ? ppk_py_ptr_hash(task, mask) : 0; tt->cap && tt->e[i].task;
         i = (i + 1) & mask)
        if (tt->e[i].task == task) return i;
    return SIZE_MAX;
}

/* Counts the ticks of stack st up to tick `tick` (one at least: its first). */
static void add_ticks(tstack *st, uint32_t tick) {
    uint32_t n = st->acc_tick ? tick - st->acc_tick : 1;
    st->acc_count += n ? n : 1;
    st->acc_tick = tick;
}

void ppk_py_task_awaited(task_table *tt, PyObject *task) {
    size_t i = entry_find(tt, task);
    tentry *e = i == SIZE_MAX ? NULL : &tt->e[i];
    if (e && e->stack && !e->stack->gt.parent_id) ppk_py_find_parent_again(tt, e);
}

void ppk_py_task_seen(task_table *tt, size_t i) {
    size_t *p = vec_push(&tt->seen);
    if (p) *p = i;
    tentry *e = &tt->e[i];
    if (e->in_steady || !(p = vec_push(&tt->steady))) return;
    *p = i;
    e->in_steady = 1;
}

/* Room for `n` more entries (rehashing away the tombs). -1: no memory. */
static int table_reserve(task_table *tt, size_t n) {
    if ((tt->used + tt->tombs + n) * 2 <= tt->cap) return 0;
    size_t cap = 64;
    while (cap < (tt->used + n) * 2) cap *= 2;
    tentry *e = aligned_alloc(64, cap * sizeof *e);
    if (!e) return -1;
    memset(e, 0, cap * sizeof *e);
    tt->steady.n = 0; /* the indices change */
    tt->steady_cursor = 0;
    for (size_t i = 0; i < tt->cap; i++) {
        tentry *o = &tt->e[i];
        if (!o->task || o->task == TOMB) continue;
        size_t j = ppk_py_ptr_hash(o->task, cap - 1);
        while (e[j].task) j = (j + 1) & (cap - 1);
        e[j] = *o;
        size_t *p = o->stack ? vec_push(&tt->steady) : NULL;
        if (p) *p = j;
        e[j].in_steady = p != NULL;
    }
    free(tt->e);
    tt->e = e;
    tt->cap = cap;
    tt->tombs = 0;
    return 0;
}

/* A task was where its stack shows at the last tick that followed a hook pass (had it
 * moved before, a hook pass would have read it): the stack gets the time up to that
 * tick's samples (phase 2 accounts max_tasks steady entries a tick, so it may not have
 * yet), when its stack goes or at stop. Returns the time its samples reach. */
static int64_t catch_up(task_table *tt, tentry *e) {
    int64_t last = e->last_ns;
    if (!e->stack) return last;
    int64_t at = e->stack->gt.ident == tt->main_ident ? tt->trust_main : tt->trust_now;
    if (at <= last) return last;
    e->stack->acc_wall += last ? at - last : tt->acc_step; /* (a first counts one interval) */
    add_ticks(e->stack, tt->trust_tick);
    return at;
}

int64_t ppk_py_retire(task_table *tt, tentry *e) {
    /* From the time its samples reach, the time is its next stack's, or its thread's. */
    int64_t last = catch_up(tt, e);
    if (e->stack) {
        retired *r = vec_push(&tt->retired);
        if (r) {
            *r = (retired){e->stack, e->stack->acc_wall, e->stack->acc_count};
        } else {
            tstack **p = vec_push(&tt->recorded); /* not recorded: released anyway */
            if (p) *p = e->stack;                  /* (else lost: a leak, not a crash) */
        }
        e->stack = NULL;
    }
    e->last_ns = 0;
    return last;
}

void ppk_py_replace_stack(task_table *tt, tentry *e, tstack *st) {
    /* Its next sample counts from its previous one, which showed it waiting (as it was
     * then) or running (its thread's sample): only the stack is new. A first one counts
     * one interval: in a hook pass, from the previous tick's samples, as phase 2 may
     * account it ticks later. */
    int64_t last = ppk_py_retire(tt, e);
    if (!last && tt->hook_pass) last = st->gt.ident == tt->main_ident ? tt->acc_main : tt->acc_now;
    e->last_ns = last;
    e->stack = st;
}

/* Releases an entry's own references with the pass's (with the GIL). */
static void entry_clear(SamplerObject *sp, tentry *e) {
    if (e->wr) ppk_py_keep_ref(sp, e->wr);
    if (e->fut_wr) ppk_py_keep_ref(sp, e->fut_wr);
    e->wr = e->fut_wr = NULL;
}

/* Removes entry e: its stack to record, its references to release. */
static void entry_remove(SamplerObject *sp, task_table *tt, tentry *e) {
    ppk_py_retire(tt, e);
    entry_clear(sp, e);
    tt->cycle_visits -= e->cycle == tt->cycle;
    e->task = TOMB;
    tt->used--;
    tt->tombs++;
}

/* The end of a scan of the task set: the entries of tasks that it and the scan before
 * did not meet, and whose task has been freed, are gone. A task still alive keeps its
 * entry: a set that grows or shrinks under the scans moves its elements, so a live task
 * can be missed by scans in a row, and its next visit must count the time since its
 * last one (a new entry would count one tick). */
static void end_cycle(SamplerObject *sp, task_table *tt) {
    for (size_t i = 0; tt->cycle_visits < tt->used && i < tt->cap; i++) {
        tentry *e = &tt->e[i];
        if (e->task && e->task != TOMB && e->cycle + 1 < tt->cycle &&
            (!e->wr || !ppk_py_weak_target(e->wr)))
            entry_remove(sp, tt, e);
    }
    tt->cycle++;
    tt->cycle_visits = 0;
}

/* Entries whose task has been freed, found SWEEP entries a pass, are removed without
 * waiting for the scan's cycle to end (which takes long when the ticks rotate through
 * many tasks): the table holds the live tasks, and the freed ones of a few passes. */
#define SWEEP 64

static void sweep(SamplerObject *sp, task_table *tt) {
    /* A hook pass, whose tasks are mostly unchanged, looks at a quarter of that (each
     * entry's weak reference is a cold line). */
    for (int k = 0; k < (tt->hook_pass ? SWEEP / 4 : SWEEP) && tt->cap; k++) {
        tentry *e = &tt->e[tt->sweep_cursor++ & (tt->cap - 1)];
        if (e->task && e->task != TOMB && e->wr && !ppk_py_weak_target(e->wr)) entry_remove(sp, tt, e);
    }
}

/* Hook passes cannot trust what was visited before the next scan cycle. */
static void dirty(task_table *tt) {
    if (tt->clean_from != UINT64_MAX) tt->clean_from = tt->cycle + 1;
}

/* A running loop met at a visit: hook passes rely on its marks while it runs in that
 * thread (check_hook_loops); a loop the hook does not cover makes them wait. */
static void note_loop(task_table *tt, loopinfo *li) {
    if (li->listed || tt->clean_from == UINT64_MAX) return;
    li->listed = 1;
    if (!li->hooked) {
        dirty(tt);
        return;
    }
    for (size_t k = 0; k < tt->hook_loops.n; k++) {
        hook_loop *h = &AT(tt->hook_loops, hook_loop, k);
        if (h->loop == li->loop && h->ident == li->ident) return;
    }
    hook_loop *h = vec_push(&tt->hook_loops);
    if (!h) {
        dirty(tt);
        li->listed = 0;
        return;
    }
    *h = (hook_loop){Py_NewRef(li->loop), li->ident};
}

/* Whether every loop hook passes rely on still runs in its thread and calls the hook:
 * one that stopped (its tasks are no longer waiting), moved, or whose call_soon is no
 * longer the hook (replaced since, on its class or on itself) is forgotten, and the
 * scans take over. */
static int check_hook_loops(SamplerObject *sp, task_table *tt) {
    int ok = 1;
    for (size_t k = 0; k < tt->hook_loops.n;) {
        hook_loop *h = &AT(tt->hook_loops, hook_loop, k);
        if (ppk_py_loop_thread(h->loop) == h->ident && ppk_py_hook_covers(h->loop)) {
            k++;
            continue;
        }
        ok = 0;
        ppk_py_keep_ref(sp, h->loop);
        *h = AT(tt->hook_loops, hook_loop, --tt->hook_loops.n);
    }
    if (!ok) dirty(tt);
    return ok;
}

/* Entry e's task is running: its thread's sample shows it. Its next sample as a
 * waiting task counts from that sample's time: the callback's, when the main thread
 * sampled itself (the tick's, as the first sample of a task counts, otherwise). */
static void running_now(SamplerObject *sp, task_table *tt, tentry *e, unsigned long ident) {
    ppk_py_retire(tt, e);
    if (ident == sp->main_ident) e->last_ns = tt->main_at;
}

/* The running tasks that this pass did not visit (the bound of reads left them marked
 * for the next): their time since is their thread's, not that of the stack they
 * showed before. */
static void note_running(SamplerObject *sp, task_table *tt, const running_task *running,
                         size_t n_running) {
    for (size_t k = 0; k < n_running; k++) {
        size_t i = entry_find(tt, running[k].task);
        if (i != SIZE_MAX && tt->e[i].pass != tt->pass)
            running_now(sp, tt, &tt->e[i], running[k].ident);
    }
}

/* Whether a marked task is still to visit at the next pass: it has not settled yet
 * into a wait that only a new mark can end (on a future not done: one that is done
 * has scheduled the task's wakeup, which has not run yet), or it is running; not when
 * its loop is not running (held, a task of a loop that stopped for good would be kept
 * alive). */
static int unsettled(const tentry *e) {
    return !e->done && !e->waits && !e->idle;
}

static void hold_unsettled(SamplerObject *sp, task_table *tt, tentry *e, PyObject *task);

/* Whether a hook pass knows where entry e's task is without reading it: it has a stack
 * from a visit since the clean cycle began that found it settled (an asyncio task
 * waiting on an asyncio future not done: a task woken or ready then moves by a step
 * whose mark may have been lost, dropped before the clean cycle or in a burst, and a
 * future of another kind may wake a task without the loop), and the loop has not
 * marked it since (pending: marked, not settled at its last visit). */
static int trusted(const task_table *tt, const tentry *e) {
    return e->stack && e->settled && e->cycle >= tt->clean_from && !e->pending && !e->done;
}

/* Visits the task the task set's element `key` refers to (once a pass); `marked`: one
 * the loop marked (visit_marked). */
static void visit(SamplerObject *sp, task_table *tt, PyObject *key, PyObject *task,
                  const running_task *running, size_t n_running, threads_dict *active,
                  int marked) {
    if (!task || (tt->used + tt->tombs + 1) * 4 > tt->cap * 3) return;
    size_t i = entry_get(tt, task);
    tentry *e = &tt->e[i];
    if (e->pass == tt->pass) return;
    e->pass = tt->pass;
    /* The same weak reference as at its last visit: the same task (the reference is
     * alive and points to it). */
    if (e->wr && e->wr != key && ppk_py_weak_target(e->wr) != task) {
        /* A task at the address of one that has ended since its last visit. */
        ppk_py_retire(tt, e);
        entry_clear(sp, e);
        e->done = 0;
    }
    if (!e->wr) e->wr = Py_NewRef(key);
    int known = !marked && tt->hook_pass && trusted(tt, e);
    tt->cycle_visits += e->cycle != tt->cycle;
    e->cycle = tt->cycle;
    for (size_t k = 0; k < n_running; k++) {
        if (running[k].task == task) {
            e->fut = NULL;
            e->waits = e->settled = e->idle = 0;
            if (!e->done) running_now(sp, tt, e, running[k].ident);
            if (!marked) hold_unsettled(sp, tt, e, task);
            return;
        }
    }
    if (known) {
        /* A task that the loop did not mark since a visit this pass trusts has not
         * moved: the task is not read (only its count, by the weak reference's check). */
        tstack *st = e->stack;
        if (!st->gt.parent_id && (++st->visits <= 8 || st->visits % 64 == 0))
            ppk_py_find_parent_again(tt, e);
        ppk_py_task_seen(tt, i);
        return;
    }
    e->fut = NULL;
    e->waits = e->settled = e->idle = 0;
    if (e->done) return;
    loopinfo *li = ppk_py_task_loop(sp, tt, task, active);
    if (!li) {
        ppk_py_retire(tt, e); /* its loop is not running: it is not waiting */
        e->idle = 1;
        return;
    }
    note_loop(tt, li);
    PyObject *fut = ppk_py_task_attr(task, A_FUT_WAITER);
    if (fut && fut != Py_None) e->fut = fut; /* alive: the task holds it */
    Py_XDECREF(fut);
    /* Only an asyncio task waiting on an asyncio future moves by a step its loop
     * schedules (a third-party task or future may run a step itself). (Only the marks
     * and hook passes use them; without the hook, no getter call.) */
    e->waits = e->fut && tt->clean_from != UINT64_MAX && !ppk_py_task_done(e->fut);
    e->settled = e->waits && ppk_py_is_task(task) && ppk_py_is_future(e->fut);
    if (!e->fut) {
        /* No future: ready to run, or done (for good). */
        e->done = ppk_py_task_done(task);
        if (e->done) {
            ppk_py_retire(tt, e);
            return;
        }
    }
    if (e->fut && e->stack && e->fut_wr && ppk_py_weak_target(e->fut_wr) == e->fut &&
        e->stack->gt.ident == li->ident) {
        /* It has not moved. A task is often awaited after its first sample (a task
         * created before the one that awaits it, which runs later): without a parent,
         * it is looked for at its next 8 ticks, then every 64th. */
        tstack *st = e->stack;
        if (!st->gt.parent_id && (++st->visits <= 8 || st->visits % 64 == 0))
            ppk_py_find_parent_again(tt, e);
        ppk_py_task_seen(tt, i);
        if (!marked) hold_unsettled(sp, tt, e, task); /* woken: its future is done */
        return;
    }
    twalk *w = vec_push(&tt->walk);
    if (w) *w = (twalk){i, li};
    if (!marked) hold_unsettled(sp, tt, e, task);
}

/* Reading a chain costs ~25 times a visit: at most a 40th of max_tasks a tick, and
 * no fewer than 16 (~30 us: fewer would only slow finding new tasks). A hook pass,
 * which visits few tasks, may read twice that (the tasks that moved come in bursts),
 * and so may a pass of the clean cycle, which reads the marked tasks as well as those
 * its scan finds moved (the cycle must end before the marks pile up). */
static size_t walks_base(const SamplerObject *sp) {
    return sp->max_tasks / 40 > 16 ? sp->max_tasks / 40 : 16;
}

static size_t max_walks_of(const SamplerObject *sp) {
    const task_table *tt = sp->tasks;
    return tt->hook_pass || tt->cycle == tt->clean_from ? 2 * walks_base(sp) : walks_base(sp);
}

/* A hook pass visits this many tasks of the set (with the marks), so that tasks that
 * were never marked (an eager task's first step, which runs at once, is marked only
 * through the loop's create_task) are found, within a scan cycle. */
static size_t hook_quota(const SamplerObject *sp) {
    return sp->max_tasks / 64 > 16 ? sp->max_tasks / 64 : 16;
}

/* Of those, the reads the marked tasks may take: the scan keeps the rest, so that its
 * cursor moves on however many are marked (a hook pass's share, which finds the tasks
 * never marked and those whose marks were released, at most one read a task; the
 * clean cycle's scan, a scan pass's bound). */
static size_t marked_walks_of(const SamplerObject *sp) {
    const task_table *tt = sp->tasks;
    size_t keep = tt->hook_pass ? hook_quota(sp) : tt->cycle == tt->clean_from ? walks_base(sp) : 0;
    return max_walks_of(sp) - keep;
}

/* How many elements ahead of the one visited each stage of scan() works: enough cache
 * misses in flight to overlap, not so many that the prefetched lines are dropped or
 * evicted before their use. */
#define SCAN_AHEAD 8

/* Prefetches task t's object and the line of the table where its entry begins. */
static void prefetch_task(const task_table *tt, const char *t, size_t mask) {
    for (int line = 0; line < 4; line++) __builtin_prefetch(t + 64 * line);
    __builtin_prefetch(&tt->e[ppk_py_ptr_hash(t, mask)]);
}

/* A scan's second stage: the task a weak reference points to (read raw: a dead one's
 * address is only prefetched) and the task's entry; in a hook pass, the entry and the
 * task's first line only (most tasks are visited without reading the task: visit()). */
static void prefetch_slot_task(const task_table *tt, tslotv *v, size_t mask) {
    if (!PyWeakref_CheckRef(v->key)) {
        v->key = NULL; /* not a task's */
        return;
    }
    const char *t = (const char *)((PyWeakReference *)v->key)->wr_object;
    if (tt->hook_pass) {
        __builtin_prefetch(t); /* (the third stage reads its count) */
        __builtin_prefetch(&tt->e[ppk_py_ptr_hash(t, mask)]);
    } else {
        prefetch_task(tt, t, mask);
    }
}

/* What the entry of `task` points to that visit() reads: its stack, its future
 * (reading _fut_waiter takes a reference: a write) and the weak reference to that
 * future. */
static void prefetch_entry(const task_table *tt, const PyObject *task, size_t mask) {
    for (size_t i = ppk_py_ptr_hash(task, mask); tt->e[i].task; i = (i + 1) & mask) {
        const tentry *e = &tt->e[i];
        if (e->task != task) continue;
        if (e->stack) __builtin_prefetch(e->stack, 1);
        if (e->fut_wr) __builtin_prefetch(e->fut_wr);
        if (e->fut) __builtin_prefetch(e->fut, 1);
        return;
    }
}

/* The third: the task (NULL: dead), and what its entry points to; in a hook pass, the
 * stack of an entry the pass trusts (what its visit reads), else the task too. */
static void prefetch_slot_entry(const task_table *tt, tslotv *v, size_t mask) {
    v->task = v->key ? ppk_py_weak_target(v->key) : NULL;
    if (!v->task) return;
    if (tt->hook_pass) {
        size_t i = entry_find(tt, v->task);
        if (i != SIZE_MAX && trusted(tt, &tt->e[i])) {
            __builtin_prefetch(tt->e[i].stack, 1);
            return;
        }
        for (int line = 0; line < 4; line++) __builtin_prefetch((const char *)v->task + 64 * line);
    }
    prefetch_entry(tt, v->task, mask);
}

/* Visits up to max_tasks elements of the task set's table from the cursor. Waiting tasks
 * are scattered in memory and cold after 10 ms of the program's own work, so each
 * element goes through stages a few elements ahead of its visit, each prefetching what
 * the next one reads: its weak reference; the task and the task's entry; what the entry
 * points to. Their cache misses overlap instead of following each other. */
static void scan(SamplerObject *sp, task_table *tt, PySetObject *so, const running_task *running,
                 size_t n_running, threads_dict *active, size_t quota) {
    size_t slots = (size_t)so->mask + 1, pos = tt->cursor, wrap = SIZE_MAX;
    if (pos >= slots) {
        end_cycle(sp, tt); /* the set shrank under the cursor */
        pos = 0;
    }
    tt->slots.n = 0;
    if (vec_reserve(&tt->slots, quota < tt->live ? quota : tt->live)) return;
    /* A set keeps its size after a burst of tasks: at most 8 slots a task are read. */
    size_t max_slots = quota * 8 < slots ? quota * 8 : slots;
    for (size_t scanned = 0; scanned < max_slots && tt->slots.n < quota; scanned++) {
        setentry *se = &so->table[pos];
        if (se->key && se->hash != -1) {
            tslotv *v = vec_push(&tt->slots); /* cannot fail: room was made */
            v->key = se->key;
            v->pos = pos;
        }
        if (++pos == slots) {
            wrap = tt->slots.n; /* the cycle ends after the visit of those before */
            pos = 0;
        }
    }
    tt->cursor = pos;
    tt->visits = tt->slots.n;
    tslotv *v = tt->slots.items;
    size_t n = tt->slots.n, mask = tt->cap - 1;
    /* The tasks after the one that reached the bound of reads are visited at the next
     * tick. */
    size_t max_walks = max_walks_of(sp);
    /* Element k is visited after element k + SCAN_AHEAD's third stage, k + 2 *
     * SCAN_AHEAD's second and k + 3 * SCAN_AHEAD's first (its weak reference). */
    for (size_t j = 0; j < n && j < 3 * SCAN_AHEAD; j++) __builtin_prefetch(v[j].key);
    for (size_t j = 0; j < n && j < 2 * SCAN_AHEAD; j++) prefetch_slot_task(tt, &v[j], mask);
    for (size_t j = 0; j < n && j < SCAN_AHEAD; j++) prefetch_slot_entry(tt, &v[j], mask);
    for (size_t k = 0; k < n; k++) {
        if (k + 3 * SCAN_AHEAD < n) __builtin_prefetch(v[k + 3 * SCAN_AHEAD].key);
        if (k + 2 * SCAN_AHEAD < n) prefetch_slot_task(tt, &v[k + 2 * SCAN_AHEAD], mask);
        if (k + SCAN_AHEAD < n) prefetch_slot_entry(tt, &v[k + SCAN_AHEAD], mask);
        if (tt->walk.n >= max_walks) {
            tt->cursor = v[k].pos;
            tt->visits = k;
            if (k == wrap) end_cycle(sp, tt); /* those before ended the table */
            return;
        }
        if (k == wrap) end_cycle(sp, tt);
        visit(sp, tt, v[k].key, v[k].task, running, n_running, active, 0);
    }
    if (wrap == n) end_cycle(sp, tt);
}

/* Notes, after a pass, what is_quiet compares. A task changes only by running in its
 * loop's thread, and a task is made (or ended) in it too (or the set's size changes):
 * while those threads' CPU clocks have not moved and the set is the same size, every
 * task is as this pass found it. (When the ticks rotate through more tasks than they
 * visit, the ones this pass did not visit wait for the next pass that reads: their
 * next sample counts the time since their previous one.) */
static void note_quiet(SamplerObject *sp, task_table *tt, PySetObject *so, const gbuf *pass) {
    tt->quiet.n = 0;
    tt->n_quiet_threads = 0;
    /* No task sampled: a quiet pass would have nothing to sample again (is_quiet), and
     * the clocks would cost a system call a thread (a program that imports asyncio
     * and runs no loop). A pass that did not visit every task (the reads' bound, the
     * cap) is not one to repeat: the tasks after it would never be visited. */
    if (!tt->seen.n || tt->visits < tt->live || vec_reserve(&tt->quiet, tt->seen.n)) return;
    /* Every Python thread but the sampler's: a loop's thread, or one that may run a
     * loop by now (a loop started since, one that had no waiting task then). The
     * clock this pass read for a thread it gathered (before the tasks; they are in
     * the thread list's order) does: one that ran since shows another at the next
     * check, as one read now would. The others' are read now. */
    const gthread *g = pass ? pass->threads.items : NULL;
    size_t k = 0, n = pass ? pass->threads.n : 0;
    for (PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp); t;
         t = PyThreadState_Next(t)) {
        if (t == sp->ts) continue;
        int64_t cpu;
        if (k < n && g[k].ts == t) {
            cpu = g[k].cpu_now == CPU_LATER ? g[k].cpu_pre : g[k].cpu_now;
            k++;
        } else {
            cpu = thread_cpu_ns(t->native_thread_id);
        }
        size_t j = tt->n_quiet_threads;
        if (j == MAX_QUIET_THREADS || cpu < 0) return; /* no clock: never quiet */
        tt->quiet_tid[j] = t->native_thread_id;
        tt->quiet_cpu[j] = cpu;
        tt->n_quiet_threads++;
    }
    if (tt->seen.n) memcpy(tt->quiet.items, tt->seen.items, tt->seen.n * sizeof(size_t));
    tt->quiet.n = tt->seen.n;
    tt->quiet_live = (size_t)so->used;
    tt->quiet_fill = (size_t)so->fill;
}

/* Whether nothing can have changed since note_quiet: the same task set, no loop thread
 * has run. */
static int is_quiet(task_table *tt, PySetObject *so) {
    if (!tt->quiet.n || (size_t)so->used != tt->quiet_live || (size_t)so->fill != tt->quiet_fill ||
        vec_reserve(&tt->seen, tt->quiet.n))
        return 0;
    for (size_t j = 0; j < tt->n_quiet_threads; j++)
        if (thread_cpu_ns(tt->quiet_tid[j]) != tt->quiet_cpu[j]) return 0;
    return 1;
}

/* Gives the references of the stacks recorded since the last pass to this pass's. */
static void release_recorded(SamplerObject *sp, task_table *tt) {
    size_t n = tt->unheld.n;
    for (size_t k = 0; k < tt->recorded.n; k++) n += AT(tt->recorded, tstack *, k)->n_refs;
    if (vec_reserve(&sp->refs, n)) return; /* next time */
    if (tt->unheld.n)
        memcpy(&AT(sp->refs, PyObject *, sp->refs.n), tt->unheld.items,
               tt->unheld.n * sizeof(PyObject *));
    sp->refs.n += tt->unheld.n;
    tt->unheld.n = 0;
    for (size_t k = 0; k < tt->recorded.n; k++) {
        tstack *st = AT(tt->recorded, tstack *, k);
        if (st->n_refs)
            memcpy(&AT(sp->refs, PyObject *, sp->refs.n), st->refs, st->n_refs * sizeof(PyObject *));
        sp->refs.n += st->n_refs;
        free(st);
    }
    tt->recorded.n = 0;
}

/* Releases the marked tasks held (with the pass's references). */
static void drop_pending(SamplerObject *sp, task_table *tt) {
    for (size_t k = 0; k < tt->pending.n; k++) {
        PyObject *t = AT(tt->pending, PyObject *, k);
        size_t i = entry_find(tt, t);
        if (i != SIZE_MAX) tt->e[i].pending = 0;
        ppk_py_keep_ref(sp, t);
    }
    tt->pending.n = 0;
}

/* The marked tasks held at most: four times the reads of a hook pass (with its share's). */
static size_t pending_room(const SamplerObject *sp) {
    return 4 * 2 * walks_base(sp);
}

/* A task that a visit of the set (not of the marks) found running, ready or woken
 * (not settled in a wait) is held with the marked tasks, to be visited at every pass
 * until it settles, as a marked one is: its mark, if it had one, was taken before a
 * clean cycle or released, and the move it makes next may have none (a running task
 * that awaits a future). Otherwise it would wait for the share's turn (hook_quota
 * tasks a tick) on the stack found, as a task not started yet showed its first line. */
static void hold_unsettled(SamplerObject *sp, task_table *tt, tentry *e, PyObject *task) {
    /* (Without the hook, clean_from is UINT64_MAX.) */
    if (e->pending || !unsettled(e) || tt->cycle < tt->clean_from ||
        tt->pending.n >= pending_room(sp) || vec_reserve(&tt->pending, 1))
        return;
    e->pending = 1;
    AT(tt->pending, PyObject *, tt->pending.n++) = Py_NewRef(task);
}

static void reverse(PyObject **p, size_t n) {
    for (size_t a = 0, b = n; a + 1 < b; a++, b--) {
        PyObject *t = p[a];
        p[a] = p[b - 1];
        p[b - 1] = t;
    }
}

/* Takes the marks of the tasks whose loop scheduled a step since the last pass, after
 * those held from it (tt->pending; a task already there is not added again). Before
 * the clean cycle they are of no use: released. Past pending_room() (the passes do
 * not keep up: a burst, or ticks that the CPU budget spaced out), the oldest marks,
 * those held from before first, are released, their entries no longer trusted: a hook
 * pass reads such a task at its share's turn, as it does a task never marked. The
 * newest are kept: an older mark's task has more likely moved on, or ended (a burst of
 * short tasks), and a task marked as it was made, which has no entry yet, would lose
 * its time until that turn. -1:
 * they could not be kept (marks lost, or no memory: the hook passes wait for another
 * clean cycle). */
static int take_marks(SamplerObject *sp, task_table *tt) {
    if (!tt->taken) return 0;
    int overflow;
    size_t n = ppk_py_hook_take(sp, tt->taken, &overflow);
    if (!n && !overflow) {
        /* Held from before a dirty(): their tasks (in a loop that stopped, say) are
         * not kept alive until the next mark. */
        if (tt->cycle < tt->clean_from) drop_pending(sp, tt);
        return 0;
    }
    int lost = overflow || vec_reserve(&tt->pending, n);
    if (lost || tt->cycle < tt->clean_from) {
        for (size_t k = 0; k < n; k++) ppk_py_keep_ref(sp, tt->taken[k]);
        drop_pending(sp, tt);
        if (lost) dirty(tt);
        return lost ? -1 : 0;
    }
    size_t room = pending_room(sp), from = tt->pending.n, added = 0;
    uint64_t excess = 0;
    for (size_t k = n; k-- > 0;) { /* newest first */
        PyObject *t = tt->taken[k];
        size_t i = entry_find(tt, t);
        if (i != SIZE_MAX && tt->e[i].pending) {
            ppk_py_keep_ref(sp, t);
            continue;
        }
        if (added == room) {
            if (i != SIZE_MAX) tt->e[i].settled = 0;
            ppk_py_keep_ref(sp, t);
            excess++;
            continue;
        }
        if (i != SIZE_MAX) tt->e[i].pending = 1;
        AT(tt->pending, PyObject *, tt->pending.n++) = t;
        added++;
    }
    PyObject **p = tt->pending.items;
    reverse(p + from, added); /* oldest first */
    /* The tasks held from before, oldest first, make way for newer marks past the room
     * (a pass that came in the middle of a burst held its first part). */
    size_t drop = tt->pending.n > room ? tt->pending.n - room : 0;
    for (size_t j = 0; j < drop; j++) {
        size_t i = entry_find(tt, p[j]);
        if (i != SIZE_MAX) tt->e[i].pending = tt->e[i].settled = 0;
        ppk_py_keep_ref(sp, p[j]);
    }
    if (drop) memmove(p, p + drop, (tt->pending.n - drop) * sizeof *p);
    tt->pending.n -= drop;
    excess += drop;
    if (excess) {
        pthread_mutex_lock(&sp->lock);
        sp->st.task_marks_dropped += excess;
        pthread_mutex_unlock(&sp->lock);
    }
    return 0;
}

/* How many tasks ahead of the one visited or read each stage of visit_marked() and
 * read_tasks() works (a visit or a read takes 0.3-1 us: time for the lines to come). */
#define READ_AHEAD 4

/* A marked task's second stage: what its entry points to, and its coroutine. */
static void prefetch_marked(const task_table *tt, PyObject *task, size_t mask) {
    prefetch_entry(tt, task, mask);
    ppk_py_prefetch_chain(task, 0);
}

/* Visits the marked tasks, as many as their share of the bound of reads lets
 * (marked_walks_of); their number. They are cold (they waited since their last step,
 * and the program ran meanwhile): as in scan(), each goes through stages ahead of its
 * visit, the first prefetching the task and the line of its entry, the second what the
 * entry points to and the task's coroutine (which its read begins with). */
static size_t visit_marked(SamplerObject *sp, task_table *tt, const running_task *running,
                           size_t n_running, threads_dict *active) {
    size_t max_walks = marked_walks_of(sp), k = 0, n = tt->pending.n, mask = tt->cap - 1;
    PyObject **p = tt->pending.items;
    for (size_t j = 0; j < n && j < 2 * READ_AHEAD; j++)
        prefetch_task(tt, (const char *)p[j], mask);
    for (size_t j = 0; j < n && j < READ_AHEAD; j++) prefetch_marked(tt, p[j], mask);
    for (; k < n && tt->walk.n < max_walks; k++) {
        if (k + 2 * READ_AHEAD < n) prefetch_task(tt, (const char *)p[k + 2 * READ_AHEAD], mask);
        if (k + READ_AHEAD < n) prefetch_marked(tt, p[k + READ_AHEAD], mask);
        PyObject *task = p[k], *key;
        size_t i = entry_find(tt, task);
        if (i != SIZE_MAX && tt->e[i].wr && ppk_py_weak_target(tt->e[i].wr) == task) {
            key = Py_NewRef(tt->e[i].wr);
        } else if (!(key = PyWeakref_NewRef(task, NULL))) {
            PyErr_Clear();
            continue;
        }
        visit(sp, tt, key, task, running, n_running, active, 1);
        ppk_py_keep_ref(sp, key);
    }
    return k;
}

/* After the reads: of the first `visited` marked tasks (visited at this pass), keeps
 * those still to visit, each once, after the rest (so that tasks read at every pass,
 * a task that yields with sleep(0), do not keep the others from their visit), and
 * releases the others. */
static void keep_pending(SamplerObject *sp, task_table *tt, size_t visited) {
    PyObject **p = tt->pending.items;
    size_t kept = 0, n = tt->pending.n;
    for (size_t k = 0; k < visited; k++) { /* (a new task had no entry when taken) */
        size_t i = entry_find(tt, p[k]);
        if (i != SIZE_MAX) tt->e[i].pending = 0;
    }
    for (size_t k = 0; k < visited; k++) {
        size_t i = entry_find(tt, p[k]);
        int keep = i != SIZE_MAX && unsettled(&tt->e[i]) && !tt->e[i].pending;
        if (keep) {
            tt->e[i].pending = 1;
            p[kept++] = p[k];
        } else {
            ppk_py_keep_ref(sp, p[k]);
        }
    }
    if (visited < n) memmove(p + kept, p + visited, (n - visited) * sizeof *p);
    n -= visited - kept;
    if (kept && kept < n) { /* [kept | rest] -> [rest | kept] */
        reverse(p, kept);
        reverse(p + kept, n - kept);
        reverse(p, n);
    }
    tt->pending.n = n;
}

/* Reads the chains of the tasks to read (tt->walk); the time it took. Their stacks are
 * compared with what is read (cold too): prefetched first (up to their first frame).
 * Each task then goes through stages ahead of its read: its coroutine, then what the
 * coroutine awaits (one link down the chain; the next are found as the read goes). */
static int64_t read_tasks(SamplerObject *sp, task_table *tt) {
    const twalk *w = tt->walk.items;
    size_t n = tt->walk.n;
    for (size_t k = 0; k < n; k++) {
        const tstack *st = tt->e[w[k].entry].stack;
        for (int line = 0; st && line < 5; line++) __builtin_prefetch((const char *)st + 64 * line);
    }
    int64_t t0 = mono_ns();
    const tentry *e = tt->e;
    for (size_t j = 0; j < n && j < 2 * READ_AHEAD; j++)
        ppk_py_prefetch_chain(e[w[j].entry].task, 0);
    for (size_t j = 0; j < n && j < READ_AHEAD; j++) ppk_py_prefetch_chain(e[w[j].entry].task, 1);
    for (size_t k = 0; k < n; k++) {
        if (k + 2 * READ_AHEAD < n) ppk_py_prefetch_chain(e[w[k + 2 * READ_AHEAD].entry].task, 0);
        if (k + READ_AHEAD < n) ppk_py_prefetch_chain(e[w[k + READ_AHEAD].entry].task, 1);
        ppk_py_walk_task(sp, tt, &w[k]);
    }
    return mono_ns() - t0;
}

void ppk_py_gather_tasks(SamplerObject *sp, const gbuf *pass, threads_dict *active,
                         const running_task *running, size_t n_running, int64_t main_at) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    int64_t t0 = mono_ns();
    tt->main_at = main_at;
    tt->main_ident = sp->main_ident;
    tt->threads = pass;
    tt->pass++;
    release_recorded(sp, tt);
    tt->seen.n = tt->walk.n = 0;
    ppk_py_loops_clear(tt);
    tt->visits = 0;
    PyObject *set = Py_XNewRef(sp->aio.set); /* ppk_py_aio_refresh */
    PySetObject *so = (PySetObject *)set;
    tt->live = so ? (size_t)so->used : 0;
    size_t want = tt->live < sp->max_tasks ? tt->live : sp->max_tasks;
    /* Tasks met before the hook was there were not marked: its first clean cycle is the
     * next one. */
    if (so && tt->taken && ppk_py_hook_install(sp)) tt->clean_from = tt->cycle + 1;
    int marked = take_marks(sp, tt) == 0 && tt->pending.n;
    tt->hook_pass = so && tt->cycle > tt->clean_from && check_hook_loops(sp, tt);
    int quiet = !tt->hook_pass && !marked && so && is_quiet(tt, so);
    int64_t t_read = 0;
    if (quiet) {
        /* Nothing has run: the tasks sampled at the last pass, as they were. */
        memcpy(tt->seen.items, tt->quiet.items, tt->quiet.n * sizeof(size_t));
        tt->seen.n = tt->quiet.n;
        tt->visits = tt->live;
    } else if (!so || table_reserve(tt, want + 1 + tt->pending.n)) {
        if (tt->used) end_cycle(sp, tt); /* no task set: every task has ended */
        tt->quiet.n = 0;
        tt->hook_pass = 0;
        drop_pending(sp, tt);
        dirty(tt);
    } else {
        size_t visited = visit_marked(sp, tt, running, n_running, active);
        scan(sp, tt, so, running, n_running, active,
             tt->hook_pass ? hook_quota(sp) : sp->max_tasks);
        note_running(sp, tt, running, n_running);
        t_read = read_tasks(sp, tt);
        keep_pending(sp, tt, visited);
        sweep(sp, tt);
        if (tt->hook_pass)
            tt->quiet.n = 0; /* (a scan pass after it reads) */
        else
            note_quiet(sp, tt, so, pass);
    }
    Py_XDECREF(set);
    tt->threads = NULL; /* (this pass's) */
    int64_t t1 = mono_ns();
    /* A hook pass counts the steady tasks as sampled, up to max_tasks (phase 2
     * accounts them in turn, each with its time since its previous sample); a scan
     * pass those it visited (and skips the rest of the set). */
    size_t sampled = tt->seen.n, skipped = tt->live > tt->visits ? tt->live - tt->visits : 0;
    if (tt->hook_pass) {
        sampled = tt->steady.n < sp->max_tasks ? tt->steady.n : sp->max_tasks;
        skipped = tt->steady.n - sampled;
    }
    pthread_mutex_lock(&sp->lock);
    sp->st.task_ticks_quiet += quiet || (tt->hook_pass && !marked && !tt->walk.n);
    sp->st.task_ticks_hooked += tt->hook_pass;
    sp->st.tasks_seen += sampled;
    sp->st.tasks_walked += tt->walk.n;
    sp->st.tasks_skipped += skipped;
    sp->st.task_ns_total += (uint64_t)(t1 - t0);
    sp->st.task_read_ns_total += (uint64_t)t_read;
    pthread_mutex_unlock(&sp->lock);
}

/* ---- Recording, without the GIL ---------------------------------------------------- */

static void record_stack(SamplerObject *sp, tstack *st, int64_t wall, uint64_t count,
                         rec_counts *c) {
    st->gt.wall_ns = wall;
    ppk_py_record(sp, sp->builder, &sp->tick.fixups, &st->gt, st->frames, NULL, st->labels, 0,
                  (int64_t)count, c);
    c->task_samples++;
}

/* Records the retired stacks, and frees them: their references go to tt->unheld, for the
 * next pass to release with the GIL (freeing them here keeps that work out of the
 * GIL's hold: a service that makes and ends tasks all along retires a stack for each). */
static void record_retired(SamplerObject *sp, task_table *tt, rec_counts *c) {
    for (size_t k = 0; k < tt->retired.n; k++) {
        retired *r = &AT(tt->retired, retired, k);
        tstack *st = r->st;
        if (r->count) record_stack(sp, st, r->wall, r->count, c);
        if (!vec_reserve(&tt->unheld, st->n_refs)) {
            if (st->n_refs)
                memcpy(&AT(tt->unheld, PyObject *, tt->unheld.n), st->refs,
                       st->n_refs * sizeof(PyObject *));
            tt->unheld.n += st->n_refs;
            free(st);
            continue;
        }
        tstack **p = vec_push(&tt->recorded); /* the next pass takes its references */
        if (p) *p = st; /* (else lost: a leak, not a crash) */
    }
    tt->retired.n = 0;
}

#define RECORDS_PER_S 2000

typedef struct tick_times {
    int64_t now, main_at, step, coalesce;
} tick_times;

/* A tick of entry e's stack: its wall time since its previous sample, recorded once it
 * holds `coalesce` of it. */
static void account(SamplerObject *sp, task_table *tt, tentry *e, const tick_times *tm,
                    rec_counts *c) {
    tstack *st = e->stack;
    int64_t at = st->gt.ident == sp->main_ident ? tm->main_at : tm->now;
    int64_t wall = e->last_ns ? at - e->last_ns : tm->step;
    e->last_ns = at;
    st->acc_wall += wall > 0 ? wall : 0;
    add_ticks(st, tt->ticks);
    if (st->acc_wall < tm->coalesce) return;
    record_stack(sp, st, st->acc_wall, st->acc_count, c);
    st->acc_wall = 0;
    st->acc_count = 0;
}

/* After a hook pass: the ticks of the steady entries, each twice a `coalesce` at least
 * (in turn, max_tasks of them a tick at most), each counting the time since its
 * previous sample. An entry of an unchanged task need not be accounted more often: its
 * time is the same then, and a stack that goes gets its time up to the last tick
 * (catch_up).
 * An entry visited last before the clean cycle waits for its next visit. Entries that
 * lost their stack or task leave the list. */
static void account_steady(SamplerObject *sp, task_table *tt, const tick_times *tm,
                           rec_counts *c) {
    size_t *list = tt->steady.items;
    size_t k = tt->steady_cursor < tt->steady.n ? tt->steady_cursor : 0, done = 0;
    /* (Twice a coalesce: once would find most entries just short of it, and record
     * them at the next.) */
    size_t due =
        (size_t)(2.0 * (double)tt->steady.n * (double)sp->period_ns / (double)tm->coalesce) + 1;
    if (due > sp->max_tasks) due = sp->max_tasks;
    while (k < tt->steady.n && done < due) {
        tentry *e = &tt->e[list[k]];
        if (!e->task || e->task == TOMB || !e->stack) {
            e->in_steady = 0;
            list[k] = list[--tt->steady.n]; /* one not reached yet */
            continue;
        }
        if (e->cycle >= tt->clean_from) account(sp, tt, e, tm, c);
        done++;
        k++;
    }
    tt->steady_cursor = k < tt->steady.n ? k : 0;
}

void ppk_py_record_tasks(SamplerObject *sp, int64_t now, rec_counts *c) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    tt->ticks++;
    record_retired(sp, tt, c);
    /* A task sampled for the first time (or again after it ran) gets the interval since
     * the previous tick, as a new thread does: when the ticks rotate through more tasks
     * than they visit, one found late loses the time before (never more than a turn). */
    int64_t step = now - sp->prev_tick_ns;
    /* With many tasks, one sample each per `coalesce` periods would cost more than the
     * rest of the tick (~1 us each): the period grows so that there are at most
     * RECORDS_PER_S a second, up to 5 times `coalesce`. */
    int64_t period = (int64_t)sp->coalesce * sp->period_ns;
    int64_t spread = (int64_t)((double)tt->live / RECORDS_PER_S * 1e9);
    int64_t coalesce = spread > 5 * period ? 5 * period : spread > period ? spread : period;
    /* A task's samples, running (its thread's) and waiting, follow one another: each
     * counts from the one before. A waiting task's sample is at its loop thread's time
     * at this tick: the tick's, or for the main thread's loop the time of the callback
     * in which the main thread sampled itself (earlier: the pass waited for the GIL
     * meanwhile). Counted from the tick's, a task that ran in the main thread at one
     * tick and waited at the next lost that wait each time (a loop thread beside a busy
     * thread: a tenth of a spinning task's time), and the main thread's next sample
     * counted it twice the other way. */
    int64_t main_at = tt->main_at ? tt->main_at : now;
    tick_times tm = {now, main_at, step, coalesce};
    if (tt->hook_pass) {
        account_steady(sp, tt, &tm, c);
    } else {
        for (size_t k = 0; k < tt->seen.n; k++) {
            tentry *e = &tt->e[AT(tt->seen, size_t, k)];
            if (e->stack) account(sp, tt, e, &tm, c); /* (else removed since: freed) */
        }
    }
    tt->seen.n = 0;
    tt->acc_now = now;
    tt->acc_main = main_at;
    tt->acc_step = step;
    if (tt->hook_pass) {
        tt->trust_now = now;
        tt->trust_main = main_at;
        tt->trust_tick = tt->ticks;
    }
}

int ppk_py_tasks_none(const SamplerObject *sp) {
    const task_table *tt = sp->tasks;
    return !tt || (!tt->used && !tt->retired.n && !tt->recorded.n && !tt->unheld.n &&
                   !tt->pending.n && !tt->hook_loops.n);
}

void ppk_py_flush_tasks(SamplerObject *sp, rec_counts *c) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    record_retired(sp, tt, c);
    for (size_t i = 0; i < tt->cap; i++) {
        tentry *e = &tt->e[i];
        tstack *st = e->task && e->task != TOMB ? e->stack : NULL;
        if (st) e->last_ns = catch_up(tt, e);
        if (!st || !st->acc_count) continue;
        record_stack(sp, st, st->acc_wall, st->acc_count, c);
        st->acc_wall = 0;
        st->acc_count = 0;
    }
}

/* ---- Release ----------------------------------------------------------------------- */

static void free_stack(tstack *st) {
    for (size_t i = 0; i < st->n_refs; i++) Py_DECREF(st->refs[i]);
    free(st);
}

void ppk_py_free_tasks(SamplerObject *sp) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    sp->tasks = NULL; /* first: a finalizer run by a release finds nothing */
    ppk_py_hook_release(sp);
    for (size_t k = 0; k < tt->pending.n; k++) Py_DECREF(AT(tt->pending, PyObject *, k));
    for (size_t k = 0; k < tt->hook_loops.n; k++) Py_DECREF(AT(tt->hook_loops, hook_loop, k).loop);
    vec_free(&tt->pending);
    vec_free(&tt->hook_loops);
    vec_free(&tt->steady);
    free(tt->taken);
    for (size_t i = 0; i < tt->cap; i++) {
        tentry *e = &tt->e[i];
        if (!e->task || e->task == TOMB) continue;
        if (e->stack) free_stack(e->stack);
        Py_XDECREF(e->wr);
        Py_XDECREF(e->fut_wr);
    }
    for (size_t k = 0; k < tt->retired.n; k++) free_stack(AT(tt->retired, retired, k).st);
    for (size_t k = 0; k < tt->recorded.n; k++) free_stack(AT(tt->recorded, tstack *, k));
    for (size_t k = 0; k < tt->unheld.n; k++) Py_DECREF(AT(tt->unheld, PyObject *, k));
    free(tt->e);
    vec_free(&tt->slots);
    vec_free(&tt->quiet);
    vec_free(&tt->seen);
    vec_free(&tt->walk);
    vec_free(&tt->retired);
    vec_free(&tt->recorded);
    vec_free(&tt->unheld);
    vec_free(&tt->frames);
    vec_free(&tt->labels);
    ppk_py_loops_free(tt);
    free(tt);
}
