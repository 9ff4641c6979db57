/*
 * sampler_record.c - the Sampler's phase 2 (sampler.c explains the whole): without the
 * GIL, each gathered thread becomes a sample in the recorder, with its wall and CPU time
 * since its previous sample (a table of threads by ident and native id; the main
 * thread's own figures, since it may sample itself).
 */
#include "sampler.h"

/* ---- Thread slots: the previous sample of each thread ------------------------------ */

static size_t slot_hash(unsigned long ident, unsigned long native_id, size_t mask) {
    uint64_t h = (uint64_t)ident * 0x9E3779B97F4A7C15u ^ (uint64_t)native_id;
    h ^= h >> 29;
    return (size_t)(h * 0xBF58476D1CE4E5B9u >> 17) & mask;
}

tslot *ppk_py_slot_find(tslot *slots, size_t cap, unsigned long ident, unsigned long native) {
    size_t mask = cap - 1;
    for (size_t i = slot_hash(ident, native, mask);; i = (i + 1) & mask) {
        tslot *s = &slots[i];
        if (!s->native_id || (s->ident == ident && s->native_id == native)) return s;
    }
}

/* Makes room for `n` threads in both tables (at most half full). -1: no memory. */
int ppk_py_slots_reserve(SamplerObject *sp, size_t n) {
    if (n * 2 <= sp->slot_cap) return 0;
    size_t cap = sp->slot_cap ? sp->slot_cap : 64;
    while (cap < n * 2) cap *= 2;
    tslot *a = calloc(cap, sizeof *a), *b = calloc(cap, sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return -1;
    }
    for (size_t i = 0; i < sp->slot_cap; i++) {
        tslot *s = &sp->slots[i];
        if (s->native_id) *ppk_py_slot_find(a, cap, s->ident, s->native_id) = *s;
    }
    free(sp->slots);
    free(sp->next_slots);
    sp->slots = a;
    sp->next_slots = b;
    sp->slot_cap = cap;
    return 0;
}

/* Phase 0 for one thread's slot; `quiet`: no thread has run Python code since the
 * previous pass. */
static void prepare_slot(SamplerObject *sp, tslot *s, int quiet) {
    s->pre_first = NO_COPY;
    if (s->ts && sp->n_ts_ahead < TS_AHEAD) sp->ts_ahead[sp->n_ts_ahead++] = s->ts;
    size_t n = s->n_frames;
    /* A thread found idle at the previous pass, when nothing ran Python code since:
     * its stack cannot have changed, and its CPU time since, if any (a C call that
     * computes without the GIL), is counted at its next reading, at most CLOCK_SKIPS
     * ticks later, while its stack is still that one unless it took the GIL since. */
    s->pre_assumed = quiet && s->reused && s->unread < CLOCK_SKIPS && s->cpu_ns >= 0 &&
                     s != &sp->main_prev;
    int64_t cpu = s->pre_assumed ? s->cpu_ns : n ? thread_cpu_ns(s->tid) : -1;
    s->pre_cpu = cpu;
    if (cpu < 0 || cpu != s->cpu_ns || s->cpu_late || sp->tick.uniq.n + n > UINT32_MAX ||
        vec_reserve(&sp->tick.frames, n) || vec_reserve(&sp->tick.uniq, n))
        return;
    s->pre_first = sp->tick.frames.n;
    /* Copies shared by the copied stacks (sp->remap), not through the frame cache's
     * stamps: phase 1 checks which codes their entries still hold only for a stack it
     * takes. */
    const uint32_t *from = &AT(sp->prev.frames, uint32_t, s->first_frame);
    uint32_t *to = &AT(sp->tick.frames, uint32_t, s->pre_first);
    uint32_t *map = sp->remap.n ? sp->remap.items : NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t j = from[i];
        if (map && map[j] != UINT32_MAX) {
            to[i] = map[j];
            continue;
        }
        AT(sp->tick.uniq, gframe, sp->tick.uniq.n) = AT(sp->prev.uniq, gframe, j);
        to[i] = (uint32_t)sp->tick.uniq.n++;
        if (map) map[j] = to[i];
    }
    sp->tick.frames.n += n;
    /* Addresses of objects that may be gone by now: a prefetch does not fault. */
    __builtin_prefetch(s->ts);
    __builtin_prefetch(s->name_obj, 1);
}

void ppk_py_prepare(SamplerObject *sp) {
    sp->gil_takes_pre = ppk_py_gil_takes(sp->interp); /* before any clock */
    int locked;
    sp->holder_pre = ppk_py_gil_last_holder(sp->interp, &locked);
    sp->holder_pre_locked = locked;
    int quiet = sp->released_valid && sp->gil_takes_pre == sp->gil_takes_released;
    sp->released_valid = 0;
    sp->tick.frames.n = sp->tick.uniq.n = 0;
    /* Without room for the map, each copied stack has copies of its own. */
    sp->remap.n = 0;
    if (sp->prev.uniq.n && !vec_reserve(&sp->remap, sp->prev.uniq.n)) {
        memset(sp->remap.items, 0xff, sp->prev.uniq.n * sizeof(uint32_t));
        sp->remap.n = sp->prev.uniq.n;
    }
    sp->n_ts_ahead = 0;
    for (size_t i = 0; i < sp->slot_cap; i++)
        if (sp->slots[i].native_id) prepare_slot(sp, &sp->slots[i], quiet);
    if (sp->main_prev.native_id) prepare_slot(sp, &sp->main_prev, quiet);
}

/* ---- Phase 2: recording, without the GIL ------------------------------------------- */

static const ppk_str L_THREAD_ID = PPK_STR("thread id"), L_NATIVE = PPK_STR("thread native id"),
                     L_THREAD_NAME = PPK_STR("thread name"), L_TASK_NAME = PPK_STR("task name"),
                     L_TASK_ID = PPK_STR("task id"), L_PARENT = PPK_STR("parent task"),
                     L_PARENT_ID = PPK_STR("parent task id"), L_STATE = PPK_STR("task state");

/* The function id of g, interned now if the frame cache did not know it (the entry
 * learns it with the GIL: a fixup). 0 if the dictionary refuses it (full). */
static ppk_function_id function_id(SamplerObject *sp, vec *fixups, gframe *g) {
    if (g->fid) return g->fid;
    ppk_function fn = {g->name, {NULL, 0}, g->file, g->start_line};
    if (ppk_recorder_intern_function(sp->recorder->rec, &fn, &g->fid)) return 0;
    fixup *x = vec_push(fixups);
    if (x) *x = (fixup){g->slot, g->lasti, g->code, g->fid};
    return g->fid;
}

/* Pushes frame g: by function id, or by its strings when the dictionary refuses it. */
static void push_frame(SamplerObject *sp, ppk_sample *s, vec *fixups, gframe *g, int by_id) {
    /* An id evicted since the cache learnt it (unused for the recorder's
     * function_ttl_exports exports) is interned again, once. */
    for (int attempt = 0; by_id && attempt < 2; attempt++) {
        ppk_function_id id = function_id(sp, fixups, g);
        if (!id) break;
        if (ppk_sample_push_frame_id(s, id, g->line) != PPK_ESTALE) return;
        g->fid = 0;
    }
    ppk_frame f = {.name = g->name, .filename = g->file, .start_line = g->start_line,
                   .line = g->line};
    ppk_sample_push_frame_ex(s, &f);
}

/* Frames pushed at once by ppk_sample_push_frames_id, at most. */
#define ID_BATCH 64

/* The frames and labels of one sample. */
typedef struct rec_in {
    const gthread *gt;
    gframe *frames;
    const uint32_t *idx; /* the sample's frames are frames[idx[i]]; NULL: frames[i] */
    const glabel *labels;
    int64_t cpu, count;
} rec_in;

static inline gframe *frame_at(const rec_in *in, size_t i) {
    return &in->frames[in->idx ? in->idx[i] : i];
}

/* Pushes the sample's frames, leaf first: by id, each run of frames whose ids the frame
 * cache knows in one call (ID_BATCH at most) when `batch`, else one at a time (each id
 * checked as it is pushed: push_frame interns a stale one again); a frame without an
 * id yet one at a time. A kept sample's frames (ids only, no strings) are pushed in
 * runs or not at all: 0, or the error of the run refused. */
static int push_frames(SamplerObject *sp, ppk_sample *s, vec *fixups, const rec_in *in,
                       int by_id, int batch) {
    size_t n = in->gt->n_frames;
    for (size_t i = 0; i < n;) {
        ppk_id_frame run[ID_BATCH];
        size_t m = 0;
        for (; by_id && batch && i + m < n && m < ID_BATCH; m++) {
            const gframe *g = frame_at(in, i + m);
            if (!g->fid) break;
            run[m] = (ppk_id_frame){g->fid, g->line};
        }
        int rc = m ? ppk_sample_push_frames_id(s, run, m) : PPK_ESTALE;
        if (rc == 0) {
            i += m;
            continue;
        }
        if (in->gt->kept) return rc;
        for (size_t end = i + (m ? m : 1); i < end; i++)
            push_frame(sp, s, fixups, frame_at(in, i), by_id);
    }
    ppk_sample_omit_frames(s, in->gt->omitted); /* past max_frames, counted only */
    return 0;
}

static int push_labels(ppk_sample *s, const gthread *gt, const glabel *labels);

/* One sample, flushed: ppk_sample_flush's result, PPK_ECLOSED, or the error that refused
 * a kept sample's frames (push_frames). *labels_refused: 1 if a label was refused. */
static int record(SamplerObject *sp, ppk_sample *s, vec *fixups, const rec_in *in, int by_id,
                  int batch, uint64_t *labels_refused) {
    const gthread *gt = in->gt;
    if (ppk_sample_start(s)) return PPK_ECLOSED; /* the recorder is gone */
    int rc = push_frames(sp, s, fixups, in, by_id, batch);
    if (rc) {
        ppk_sample_drop(s);
        return rc;
    }
    *labels_refused = push_labels(s, gt, in->labels);
    if (sp->wall_idx >= 0) ppk_sample_set_value(s, (size_t)sp->wall_idx, gt->wall_ns);
    if (sp->cpu_idx >= 0) ppk_sample_set_value(s, (size_t)sp->cpu_idx, in->cpu);
    if (sp->count_idx >= 0) ppk_sample_set_value(s, (size_t)sp->count_idx, in->count);
    return ppk_sample_flush(s);
}

/* The labels of thread gt's sample: 1 if one was refused. */
static int push_labels(ppk_sample *s, const gthread *gt, const glabel *labels) {
    int refused = 0;
    refused |= ppk_sample_push_label_num(s, L_THREAD_ID, (int64_t)gt->ident, (ppk_str){0});
    refused |= ppk_sample_push_label_num(s, L_NATIVE, (int64_t)gt->native_id, (ppk_str){0});
    if (gt->name.len) refused |= ppk_sample_push_label_str(s, L_THREAD_NAME, gt->name);
    if (gt->task_id) {
        if (gt->task_name.len)
            refused |= ppk_sample_push_label_str(s, L_TASK_NAME, gt->task_name);
        refused |= ppk_sample_push_label_num(s, L_TASK_ID, gt->task_id, (ppk_str){0});
    }
    if (gt->parent_id) {
        if (gt->parent_name.len)
            refused |= ppk_sample_push_label_str(s, L_PARENT, gt->parent_name);
        refused |= ppk_sample_push_label_num(s, L_PARENT_ID, gt->parent_id, (ppk_str){0});
    }
    if (gt->task_state.len) refused |= ppk_sample_push_label_str(s, L_STATE, gt->task_state);
    for (size_t i = 0; i < gt->n_labels; i++) {
        const glabel *l = &labels[i];
        int rc = l->is_num ? ppk_sample_push_label_num(s, l->key, l->num, (ppk_str){0})
                           : ppk_sample_push_label_str(s, l->key, l->str);
        refused |= rc; /* e.g. a tag with the key of a built-in label */
    }
    return refused != 0;
}

void ppk_py_record(SamplerObject *sp, ppk_sample *s, vec *fixups, const gthread *gt,
                   gframe *frames, const uint32_t *idx, const glabel *labels, int64_t cpu,
                   int64_t count, rec_counts *c) {
    rec_in in = {gt, frames, idx, labels, cpu, count};
    uint64_t refused = 0;
    int rc = record(sp, s, fixups, &in, sp->function_ids, 1, &refused);
    /* A stale id (a function evicted since the frame cache learnt its id; a batch's ids
     * are checked at the flush): the sample again with one push a frame, which finds
     * the stale ones and interns them again; an eviction between those pushes and the
     * flush: by strings. Each refused flush is counted by the recorder
     * (samples_dropped_stale). A kept sample (gather_stopper) has no strings: dropped. */
    if (rc == PPK_ESTALE && sp->function_ids && !gt->kept)
        rc = record(sp, s, fixups, &in, 1, 0, &refused);
    if (rc == PPK_ESTALE && !gt->kept) rc = record(sp, s, fixups, &in, 0, 0, &refused);
    c->labels_refused += refused;
    if (rc) {
        c->failed++;
    } else {
        c->samples++;
        c->coalesced += (uint64_t)count - 1;
    }
}

void ppk_py_record_thread(SamplerObject *sp, ppk_sample *s, gbuf *b, const gthread *gt,
                          int64_t cpu, rec_counts *c) {
    ppk_py_record(sp, s, &b->fixups, gt, b->uniq.items, &AT(b->frames, uint32_t, gt->first_frame),
                  &AT(b->labels, glabel, gt->first_label), cpu, 1, c);
}

/* The main thread's wall time since its previous sample, and the CPU time charged to
 * this sample. A thread found blocking at this tick spent its CPU time since the
 * previous sample running Python code elsewhere (or in a C call that released the GIL,
 * which this cannot tell apart): that time is carried to its next sample that finds it
 * running, a sample at an instant drawn from its running time. A thread blocked since
 * the previous tick ran no Python code since: its CPU time was spent where it blocks.
 * (What is carried when sampling stops is not recorded: at most the CPU time of one
 * run between two blocking calls.) */
int64_t ppk_py_main_deltas(SamplerObject *sp, gthread *gt, int64_t now) {
    int64_t cpu_now = gt->cpu_now;
    int64_t d = cpu_now >= 0 && sp->main_cpu_ns >= 0 ? cpu_now - sp->main_cpu_ns : 0;
    if (d < 0) d = 0;
    gt->wall_ns = now > sp->main_wall_ns ? now - sp->main_wall_ns : 0;
    sp->main_wall_ns = now;
    sp->main_cpu_ns = cpu_now;
    if (gt->main_mode == MAIN_BLOCKING) {
        sp->main_cpu_carry += d;
        return 0;
    }
    if (gt->main_mode == MAIN_BLOCKED) return d;
    d += sp->main_cpu_carry;
    sp->main_cpu_carry = 0;
    return d;
}

/* Whether thread gt (not the main thread), which used `cpu` since its previous sample,
 * runs at this tick: it held the GIL when phase 0 began (the pass then runs in it, on
 * 3.12 and later, or it lets the GIL go at the sampler's request where it computes:
 * ppk_py_ask_drop), or it used at least RUNNING_SHARE of the wall time since its
 * previous sample (a C call that computes without the GIL, or Python code that waits
 * its turn for the GIL: found where it computes). Else it is found where it blocks.
 * (Reading its CPU clock again over the microseconds of a pass does not tell: here a
 * thread computing in a C call showed the same reading before and after a pass.) */
#define RUNNING_SHARE 0.75
static int runs_now(const SamplerObject *sp, const gthread *gt, int64_t cpu) {
    return (sp->holder_pre_locked && gt->ts == sp->holder_pre) ||
           (double)cpu >= RUNNING_SHARE * (double)gt->wall_ns;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < sizeof n; i++) h = (h ^ ((n >> (8 * i)) & 0xff)) * 0x100000001b3u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3u;
    return h;
}

/* A hash of the labels of thread gt's sample (FNV-1a): a stack noted with others is not
 * charged under these. */
static uint64_t labels_hash(const SamplerObject *sp, const gthread *gt) {
    uint64_t h = 0xcbf29ce484222325u;
    h = hash_bytes(h, gt->name.ptr, gt->name.len);
    h = hash_bytes(h, gt->task_name.ptr, gt->task_name.len);
    h = hash_bytes(h, &gt->task_id, sizeof gt->task_id);
    const glabel *l = &AT(sp->tick.labels, glabel, gt->first_label);
    for (size_t i = 0; i < gt->n_labels; i++) {
        h = hash_bytes(h, l[i].key.ptr, l[i].key.len);
        h = l[i].is_num ? hash_bytes(h, &l[i].num, sizeof l[i].num)
                        : hash_bytes(h, l[i].str.ptr, l[i].str.len);
    }
    return h;
}

/* Remembers, in slot `next`, the stack of thread gt's sample that found it running, by
 * function id, and its labels' hash (none if a frame has no id: the dictionary refused
 * it; or if frames past max_frames were only counted). */
static void note_running_stack(SamplerObject *sp, tslot *next, const gthread *gt) {
    const uint32_t *idx = &AT(sp->tick.frames, uint32_t, gt->first_frame);
    size_t n = gt->n_frames;
    next->n_ran = 0;
    if (gt->omitted) return;
    for (size_t i = 0; i < n; i++)
        if (!AT(sp->tick.uniq, gframe, idx[i]).fid) return;
    if (n > next->ran_cap) {
        ppk_id_frame *f = realloc(next->ran, n * sizeof *f);
        if (!f) return;
        next->ran = f;
        next->ran_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        const gframe *g = &AT(sp->tick.uniq, gframe, idx[i]);
        next->ran[i] = (ppk_id_frame){g->fid, g->line};
    }
    next->n_ran = n;
    next->ran_labels = labels_hash(sp, gt);
}

/* Charges `cpu` to thread gt's stack of its last sample that found it running (slot
 * `next`), with no wall time and no count: 0, or -1 if there is none, its labels were
 * others (a tag, a task, the thread's name), or its functions were evicted since (it is
 * forgotten then). */
static int charge_running_stack(SamplerObject *sp, tslot *next, const gthread *gt,
                                int64_t cpu, rec_counts *c) {
    ppk_sample *s = sp->builder;
    if (!next->n_ran || sp->cpu_idx < 0 || next->ran_labels != labels_hash(sp, gt) ||
        ppk_sample_start(s))
        return -1;
    if (ppk_sample_push_frames_id(s, next->ran, next->n_ran)) {
        ppk_sample_drop(s);
        next->n_ran = 0;
        return -1;
    }
    c->labels_refused += (uint64_t)push_labels(s, gt, &AT(sp->tick.labels, glabel, gt->first_label));
    ppk_sample_set_value(s, (size_t)sp->cpu_idx, cpu);
    if (ppk_sample_flush(s)) {
        c->failed++;
    } else {
        c->samples++;
        c->cpu_moved++;
    }
    return 0;
}

void ppk_py_slots_release(tslot *slots, size_t cap) {
    for (size_t i = 0; i < cap; i++) {
        free(slots[i].ran);
        slots[i].ran = NULL;
        slots[i].ran_cap = slots[i].n_ran = 0;
    }
}

/* The slot of thread gt gathered by this pass, its CPU clock `cpu_ns`: what the next
 * pass compares with and copies from. */
static tslot slot_of(const gthread *gt, int64_t cpu_ns) {
    return (tslot){.ident = gt->ident,
                   .native_id = gt->native_id ? gt->native_id : 1,
                   .tid = gt->native_id,
                   .cpu_ns = cpu_ns,
                   .reused = gt->reused,
                   .unread = gt->unread,
                   .first_frame = gt->first_frame,
                   .n_frames = gt->n_frames,
                   .omitted = gt->omitted,
                   .held_since = gt->held_since,
                   .name_obj = gt->name_obj,
                   .name = gt->name,
                   .name_ref = gt->name_ref,
                   .ts = gt->ts};
}

/* Phase 2 for every thread gathered at `now`; swaps the slot tables. */
void ppk_py_record_all(SamplerObject *sp, int64_t now, rec_counts *c) {
    ppk_py_record_tasks(sp, now, c); /* first: it counts from the previous tick */
    memset(sp->next_slots, 0, sp->slot_cap * sizeof *sp->next_slots);
    tslot main_prev = {0};
    for (size_t i = 0; i < sp->tick.threads.n; i++) {
        gthread *gt = &AT(sp->tick.threads, gthread, i);
        if (gt->ident == sp->main_ident) {
            main_prev = slot_of(gt, gt->cpu_now);
            int64_t cpu = ppk_py_main_deltas(sp, gt, now);
            if (gt->n_frames) ppk_py_record_thread(sp, sp->builder, &sp->tick, gt, cpu, c);
            continue;
        }
        unsigned long native = gt->native_id ? gt->native_id : 1;
        tslot *prev = ppk_py_slot_find(sp->slots, sp->slot_cap, gt->ident, native);
        int64_t cpu_now = gt->cpu_now;
        int late = cpu_now == CPU_LATER;
        if (late && (cpu_now = thread_cpu_ns(gt->native_id)) < 0) cpu_now = gt->cpu_pre;
        int64_t cpu = 0;
        if (prev->native_id) {
            gt->wall_ns = now - prev->wall_ns;
            if (cpu_now >= 0 && prev->cpu_ns >= 0) cpu = cpu_now - prev->cpu_ns;
        } else {
            /* New since the previous tick: a thread that started since, whose whole
             * CPU time is from since then; or one that ran Python code before, then
             * none for a while (a C thread calling into Python now and then gets a new
             * thread state each time): not more than the time since that tick. */
            gt->wall_ns = now - sp->prev_tick_ns;
            cpu = cpu_now < gt->wall_ns ? cpu_now : gt->wall_ns;
        }
        if (cpu < 0) cpu = 0;
        if (gt->wall_ns < 0) gt->wall_ns = 0;
        tslot *next = ppk_py_slot_find(sp->next_slots, sp->slot_cap, gt->ident, native);
        *next = slot_of(gt, cpu_now);
        next->wall_ns = now;
        next->cpu_late = late;
        if (prev->native_id) {
            next->ran = prev->ran;
            next->ran_cap = prev->ran_cap;
            next->n_ran = prev->n_ran;
            next->ran_labels = prev->ran_labels;
            prev->ran = NULL; /* moved to `next` */
        }
        if (!gt->n_frames) continue; /* in C code only: its figures go on, no sample */
        /* The time a thread used between two ticks goes to a sample that found it
         * running: a thread that computes in bursts and blocks in between (a pool's
         * worker, a thread reading a socket after each request) is mostly found where
         * it blocks, where its bursts did not run (a pass takes the GIL when a thread
         * lets it go, at a blocking call). Found running, its sample gets that time and
         * its stack is noted; found blocking, that time goes to the stack noted, a
         * sample drawn from its running time (to its sample here when there is none:
         * it was never found running, or under other labels). */
        if (runs_now(sp, gt, cpu)) {
            ppk_py_record_thread(sp, sp->builder, &sp->tick, gt, cpu, c);
            if (sp->function_ids) note_running_stack(sp, next, gt);
        } else if (cpu > 0 && !charge_running_stack(sp, next, gt, cpu, c)) {
            ppk_py_record_thread(sp, sp->builder, &sp->tick, gt, 0, c);
        } else {
            ppk_py_record_thread(sp, sp->builder, &sp->tick, gt, cpu, c);
        }
    }
    ppk_py_slots_release(sp->slots, sp->slot_cap); /* threads gone since */
    tslot *t = sp->slots;
    sp->slots = sp->next_slots;
    sp->next_slots = t;
    gbuf g = sp->prev; /* the slots' frames are this pass's now */
    sp->prev = sp->tick;
    sp->tick = g;
    sp->main_prev = main_prev;
    if (now > sp->prev_tick_ns) c->gap_ns = (uint64_t)(now - sp->prev_tick_ns);
    c->tick_ns = (uint64_t)now;
    sp->prev_tick_ns = now;
}
