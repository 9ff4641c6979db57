/*
 * sample.c - the sample builder: a sample built over many calls, flushed into the
 * recorder's active window.
 *
 * A builder belongs to one thread at a time. Its pushes validate and copy into its own
 * ppk__sbuf (sbuf.c), with memory of its own, so a sample in progress holds nothing of
 * any window and no lock (G1, G2). Only ppk_sample_flush() takes a lock, its shard's
 * (recorder.h), for the insert itself. The recorder keeps a list of its builders so
 * that, when it is freed, each one learns it (rec becomes NULL) and answers PPK_ECLOSED.
 */
#include <string.h>

#include "recorder.h"

int ppk_sample_create(ppk_recorder *r, ppk_sample **out) {
    if (!out) return PPK_EINVAL;
    *out = NULL;
    if (!r) return PPK_EINVAL;
    /* Every window has the same configuration; the active one is read under the lock
     * because an export may be swapping it. */
    pthread_mutex_lock(&r->shards[0].lock);
    ppk_profile_config cfgv = r->shards[0].active->cfg;
    pthread_mutex_unlock(&r->shards[0].lock);
    const ppk_profile_config *cfg = &cfgv;
    ppk_sample *s = PPK_MEM_NEW(&cfg->allocator, ppk_sample, mem);
    if (!s) return PPK_ENOMEM;
    s->keep_bytes = r->builder_keep_bytes;
    if (ppk__sbuf_init(&s->sb, &s->mem, cfg->max_string_len, cfg->max_frames, cfg->max_labels,
                       cfg->n_sample_types)) {
        PPK_MEM_DELETE(s, ppk_sample, mem);
        return PPK_ENOMEM;
    }
    s->sb.max_bytes = r->builder_max_bytes;
    pthread_mutex_lock(&r->lock);
    int closed = r->closed || r->sealed;
    if (!closed) {
        atomic_init(&s->rec, r);
        s->shard = &r->shards[r->next_shard++ % r->n_shards];
        s->next = r->builders;
        if (r->builders) r->builders->prev = s;
        r->builders = s;
    }
    pthread_mutex_unlock(&r->lock);
    if (closed) {
        ppk_sample_free(s);
        return PPK_ECLOSED;
    }
    *out = s;
    return 0;
}

void ppk_sample_free(ppk_sample *s) {
    if (!s) return;
    ppk_recorder *r = atomic_load(&s->rec);
    if (r) {
        pthread_mutex_lock(&r->lock);
        if (s->prev)
            s->prev->next = s->next;
        else if (r->builders == s)
            r->builders = s->next;
        if (s->next) s->next->prev = s->prev;
        pthread_mutex_unlock(&r->lock);
    }
    ppk__sbuf_destroy(&s->sb);
    PPK_MEM_DELETE(s, ppk_sample, mem);
}

/* PPK_ECLOSED once the recorder is gone, PPK_ESTATE unless a sample is (or is not)
 * begun as `begun` requires. */
static int check(const ppk_sample *s, int begun) {
    if (!s) return PPK_EINVAL;
    if (!atomic_load(&s->rec)) return PPK_ECLOSED;
    return s->begun == begun ? 0 : PPK_ESTATE;
}

int ppk_sample_start(ppk_sample *s) {
    int rc = check(s, 0);
    if (rc) return rc;
    ppk__sbuf_clear(&s->sb, s->keep_bytes);
    s->begun = 1;
    return 0;
}

int ppk_sample_push_frame_ex(ppk_sample *s, const ppk_frame *f) {
    int rc = check(s, 1);
    return rc ? rc : ppk__sbuf_push_frame(&s->sb, f);
}

int ppk_sample_push_frame(ppk_sample *s, ppk_str name, ppk_str filename, int64_t line,
                          uint64_t address) {
    int rc = check(s, 1);
    return rc ? rc : ppk__sbuf_push_simple_frame(&s->sb, name, filename, address, line);
}

int ppk_sample_omit_frames(ppk_sample *s, uint64_t n) {
    int rc = check(s, 1);
    if (rc) return rc;
    ppk__sbuf_omit(&s->sb, n);
    return 0;
}

int ppk_sample_push_frame_id_addr(ppk_sample *s, ppk_function_id id, int64_t line,
                                  uint64_t address) {
    int rc = check(s, 1);
    if (rc) return rc;
    rc = ppk__fdict_check(&atomic_load(&s->rec)->fdict, id);
    return rc ? rc : ppk__sbuf_push_id(&s->sb, id, address, line);
}

int ppk_sample_push_frame_id(ppk_sample *s, ppk_function_id id, int64_t line) {
    return ppk_sample_push_frame_id_addr(s, id, line, 0);
}

int ppk_sample_push_frames_id(ppk_sample *s, const ppk_id_frame *frames, size_t n) {
    int rc = check(s, 1);
    if (rc) return rc;
    if (!n) return 0;
    if (!frames) return PPK_ENULL;
    /* The ids are checked at the flush, by the window (see the header). The common
     * case in one pass: 16-byte records (a line past 32 bits needs a longer record:
     * the general case) and their places. */
    uint8_t *at = ppk__sbuf_id16_room(&s->sb, n);
    if (at) {
        ppk__rec *r = s->sb.frames + s->sb.n_frames;
        size_t off = (size_t)(at - s->sb.buf), i = 0;
        for (; i < n; i++) {
            uint64_t line = (uint64_t)frames[i].line; /* negative: past UINT32_MAX */
            if (line > UINT32_MAX) break;
            ppk__idrec rec = {PPK__FREC_ID16, (uint32_t)line, frames[i].function};
            memcpy(at + i * sizeof rec, &rec, sizeof rec);
            r[i].off = off + i * sizeof rec;
            r[i].len = sizeof rec;
        }
        if (i == n) {
            ppk__sbuf_id16_commit(&s->sb, n);
            return 0;
        }
    }
    return ppk__sbuf_push_ids(&s->sb, frames, n);
}

int ppk_sample_push_label_str(ppk_sample *s, ppk_str key, ppk_str value) {
    int rc = check(s, 1);
    if (rc) return rc;
    ppk_label l = {.key = key, .str = value};
    return ppk__sbuf_push_label(&s->sb, &l);
}

int ppk_sample_push_label_num(ppk_sample *s, ppk_str key, int64_t num, ppk_str unit) {
    int rc = check(s, 1);
    if (rc) return rc;
    ppk_label l = {.key = key, .is_num = 1, .num = num, .num_unit = unit};
    return ppk__sbuf_push_label(&s->sb, &l);
}

/* A label record made once (see pprofkit.h), with what pushing it needs. */
struct ppk_prepared_label {
    ppk_allocator a; /* of the builder it was made with: it frees it */
    size_t max_string_len;
    ppk__fit_counts fit;
    uint64_t hash;
    size_t len;
    uint8_t rec[]; /* len bytes */
};

int ppk_label_prepare(const ppk_sample *s, const ppk_label *l, ppk_prepared_label **out) {
    if (!out) return PPK_EINVAL;
    *out = NULL;
    if (!s || !l) return PPK_EINVAL;
    /* The record as a builder of s's limits makes it: in a builder of its own, on the
     * stack, its memory from s's allocator. */
    ppk__mem mem;
    ppk__mem_init(&mem, &s->mem.a);
    ppk__sbuf sb;
    if (ppk__sbuf_init(&sb, &mem, s->sb.max_string_len, 1, 1, 0)) return PPK_ENOMEM;
    int rc = ppk__sbuf_push_label(&sb, l);
    if (!rc) {
        const ppk__rec *r = &sb.labels[0];
        ppk_prepared_label *pl = mem.a.alloc(mem.a.opaque, sizeof *pl + r->len);
        if (pl) {
            pl->a = mem.a;
            pl->max_string_len = s->sb.max_string_len;
            pl->fit = sb.fit;
            pl->hash = r->hash;
            pl->len = r->len;
            memcpy(pl->rec, sb.buf + r->off, r->len);
            *out = pl;
        } else {
            rc = PPK_ENOMEM;
        }
    }
    ppk__sbuf_destroy(&sb);
    return rc;
}

void ppk_prepared_label_free(ppk_prepared_label *pl) {
    if (pl) pl->a.free(pl->a.opaque, pl, sizeof *pl + pl->len);
}

int ppk_sample_push_prepared_label(ppk_sample *s, const ppk_prepared_label *pl) {
    int rc = check(s, 1);
    if (rc) return rc;
    if (!pl || pl->max_string_len != s->sb.max_string_len) return PPK_EINVAL;
    return ppk__sbuf_push_label_rec(&s->sb, pl->rec, pl->len, pl->hash, pl->fit);
}

int ppk_sample_set_value(ppk_sample *s, size_t idx, int64_t value) {
    int rc = check(s, 1);
    if (rc) return rc;
    if (idx >= s->sb.n_types) return PPK_EINVAL;
    s->sb.values[idx] = value;
    return 0;
}

int ppk_sample_set_values(ppk_sample *s, const int64_t *values, size_t n) {
    int rc = check(s, 1);
    if (rc) return rc;
    if (n > s->sb.n_types) return PPK_EVALUES;
    if (n && !values) return PPK_ENULL;
    if (n) memcpy(s->sb.values, values, n * sizeof *values);
    return 0;
}

int ppk_sample_set_timestamp(ppk_sample *s, int64_t timestamp_ns) {
    int rc = check(s, 1);
    if (rc) return rc;
    if (timestamp_ns < 0) return PPK_EINVAL;
    s->sb.timestamp_ns = timestamp_ns;
    return 0;
}

int ppk_sample_drop(ppk_sample *s) {
    int rc = check(s, 1);
    if (rc == PPK_ECLOSED) s->begun = 0;
    if (rc) return rc;
    s->begun = 0;
    ppk__sbuf_clear(&s->sb, s->keep_bytes);
    return 0;
}

int ppk_sample_flush(ppk_sample *s) {
    int rc = check(s, 1);
    if (rc == PPK_ECLOSED) s->begun = 0;
    if (rc) return rc;
    ppk_recorder *r = atomic_load(&s->rec);
    s->begun = 0;
    ppk__recs recs;
    ppk__sbuf_seal(&s->sb, &recs); /* outside the lock */
    if (atomic_load_explicit(&r->settle_pending, memory_order_relaxed)) {
        /* After a fork: the exporter thread, if it should run, starts again. */
        pthread_mutex_lock(&r->lock);
        ppk__recorder_settle_locked(r);
        pthread_mutex_unlock(&r->lock);
    }
    ppk__shard *sh = s->shard;
    pthread_mutex_lock(&sh->lock);
    if (sh->closed) {
        sh->dropped_closed++;
        rc = PPK_ECLOSED;
    } else {
        ppk__shard_settle_locked(sh);
        rc = ppk__profile_add_recs(sh->active, &recs);
        if (rc == 0)
            sh->flushed++;
        else if (rc == PPK_ESTALE)
            sh->dropped_stale++;
        else
            sh->dropped_nomem++;
    }
    pthread_mutex_unlock(&sh->lock);
    ppk__sbuf_clear(&s->sb, s->keep_bytes);
    return rc;
}
