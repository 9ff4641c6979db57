/*
 * test_fuzz_builder.c - fuzz target: the input is a sequence of calls on a ppk_recorder
 * and two ppk_sample builders, in any order.
 *
 * The first bytes choose the recorder (as test_fuzz_profile.c chooses the profile, plus a
 * builder_max_bytes of 4, 8 or 64 KiB so that a builder runs out of scratch), then each
 * op byte picks a builder and a call: start, push_frame, push_frame_ex, push_label_str,
 * push_label_num, set_value, set_values, set_timestamp, flush, drop, omit_frames,
 * push_prepared_label (a label prepared with the builder, then pushed); or on
 * the recorder:
 * export(&e), export(NULL) (no sinks: the window is counted as exported and dropped),
 * set_endpoint, add_endpoint_count, many flushes of distinct samples at once.
 *
 * Checked: a builder call out of order (a push, set, flush or drop with no sample begun,
 * a start with one begun) returns PPK_ESTATE, and one in order never does; no call
 * returns a code it does not document; after each export(&e) the output is well formed
 * (fz_check_profile in fuzz.h) and the sum of each value type is the sum of the values
 * of the flushes accepted since the previous export, as the builder's model says they
 * were set (set_value / set_values that returned 0); samples_flushed counts the accepted
 * flushes and, after an export, samples_exported equals it. Some inputs end by freeing
 * the recorder first: every builder call must then return PPK_ECLOSED.
 *
 * See fuzz.h for the two builds (libFuzzer, and the ctest regression run).
 */
#define FUZZ_NAME "fuzz_builder"
#include "fuzz.h"

enum { OP_START, OP_FRAME, OP_FRAME_EX, OP_LABEL_STR, OP_LABEL_NUM, OP_SET_VALUE,
       OP_SET_VALUES, OP_TIMESTAMP, OP_FLUSH, OP_DROP, OP_EXPORT, OP_EXPORT_NULL,
       OP_ENDPOINT, OP_BULK, OP_FRAME2, OP_OMIT, OP_PREPARED, OP_COUNT };

typedef struct builder {
    ppk_sample *s;
    int begun;
    int64_t cur[PPK_MAX_SAMPLE_TYPES]; /* the values set so far */
} builder;

typedef struct bstate {
    ppk_recorder *r;
    ppk_recorder_config cfg;
    fz_limits lim;
    fz_totals tot;      /* flushed since the last export */
    uint64_t flushed;   /* accepted flushes, ever */
    uint64_t bulk_id;
    builder b[2];
} bstate;

static const char *op_name(int op) {
    static const char *const names[] = {"start", "push_frame", "push_frame_ex",
                                        "push_label_str", "push_label_num", "set_value",
                                        "set_values", "set_timestamp", "flush", "drop"};
    return op >= 0 && op < 10   ? names[op]
           : op == OP_OMIT     ? "omit_frames"
           : op == OP_PREPARED ? "push_prepared_label"
                               : "?";
}

/* Checks a builder call's result against the model; updates the model's state. */
static void after_call(bstate *st, builder *b, int op, int rc) {
    (void)st;
    int want_begun = op != OP_START;
    if (b->begun != want_begun) {
        if (rc != PPK_ESTATE)
            FZ_FAIL("%s %s a sample begun returned %d, want PPK_ESTATE", op_name(op),
                    b->begun ? "with" : "without", rc);
        return;
    }
    if (rc == PPK_ESTATE) FZ_FAIL("%s in order returned PPK_ESTATE", op_name(op));
    if (rc > 0 || rc < PPK_ESYS || rc == PPK_ECLOSED || rc == PPK_ESYS || rc == PPK_ECOMPRESS)
        FZ_FAIL("%s returned %d", op_name(op), rc);
    switch (op) {
    case OP_START:
        if (rc == 0) {
            b->begun = 1;
            memset(b->cur, 0, sizeof b->cur);
        }
        break;
    case OP_FLUSH:
        b->begun = 0; /* flushed, or dropped and counted */
        if (rc == 0) {
            fz_totals_add(&st->tot, b->cur, st->lim.n_types);
            st->flushed++;
        } else if (rc != PPK_ENOMEM) {
            FZ_FAIL("flush returned %d", rc);
        }
        break;
    case OP_DROP:
        if (rc == 0) b->begun = 0;
        else FZ_FAIL("drop returned %d", rc);
        break;
    default:
        break;
    }
}

static ppk_mapping fz_mapping(fz_in *in) {
    ppk_mapping m;
    memset(&m, 0, sizeof m);
    m.memory_start = (uint64_t)fz_u8(in) << 12;
    m.memory_limit = m.memory_start + ((uint64_t)fz_u8(in) << 12);
    m.filename = fz_str(in, 1, NULL);
    m.build_id = fz_str(in, 1, NULL);
    return m;
}

static void builder_op(fz_in *in, bstate *st, builder *b, int op) {
    int rc = 0, bad = 0;
    switch (op) {
    case OP_START:
        rc = ppk_sample_start(b->s);
        break;
    case OP_FRAME:
    case OP_FRAME2: {
        ppk_str name = fz_str(in, 1, &bad), file = fz_str(in, 1, &bad);
        uint64_t addr = (fz_u8(in) & 1) ? fz_u64(in) : 0;
        rc = ppk_sample_push_frame(b->s, name, file, fz_value(in), addr);
        op = OP_FRAME;
        break;
    }
    case OP_FRAME_EX: {
        uint8_t f = fz_u8(in);
        ppk_frame fr;
        memset(&fr, 0, sizeof fr);
        fr.name = fz_str(in, 1, &bad);
        if (f & 1) fr.system_name = fz_str(in, 1, &bad);
        if (f & 2) fr.filename = fz_str(in, 1, &bad);
        if (f & 4) fr.start_line = fz_value(in);
        if (f & 8) fr.line = fz_value(in);
        if (f & 16) fr.address = fz_u64(in);
        ppk_mapping m;
        if (f & 32) {
            m = fz_mapping(in);
            fr.mapping = fz_copy(&m, sizeof m);
        }
        rc = ppk_sample_push_frame_ex(b->s, (f & 0xc0) == 0xc0 ? NULL : fz_copy(&fr, sizeof fr));
        break;
    }
    case OP_LABEL_STR: {
        ppk_str k = fz_str(in, 1, &bad), v = fz_str(in, 1, &bad);
        rc = ppk_sample_push_label_str(b->s, k, v);
        break;
    }
    case OP_LABEL_NUM: {
        ppk_str k = fz_str(in, 1, &bad);
        uint8_t f = fz_u8(in);
        int64_t num = (f & 1) ? fz_value(in) : (int64_t)(f >> 1) % 4;
        ppk_str u = (f & 0x80) ? fz_str(in, 1, &bad) : (ppk_str){NULL, 0};
        rc = ppk_sample_push_label_num(b->s, k, num, u);
        break;
    }
    case OP_SET_VALUE: {
        size_t idx = fz_u8(in) % (st->lim.n_types + 2);
        int64_t v = fz_value(in);
        rc = ppk_sample_set_value(b->s, idx, v);
        if (b->begun) {
            if (rc == 0 && idx >= st->lim.n_types) FZ_FAIL("set_value accepted index %zu", idx);
            if (rc == 0) b->cur[idx] = v;
        }
        break;
    }
    case OP_SET_VALUES: {
        size_t n = fz_u8(in) % (st->lim.n_types + 2);
        int64_t v[PPK_MAX_SAMPLE_TYPES + 2];
        for (size_t i = 0; i < n; i++) v[i] = fz_value(in);
        int null_arr = n && fz_u8(in) == 0xff;
        rc = ppk_sample_set_values(b->s, null_arr ? NULL : (n ? fz_copy(v, n * sizeof *v) : NULL), n);
        if (b->begun) {
            if (rc == 0 && (n > st->lim.n_types || null_arr))
                FZ_FAIL("set_values accepted n %zu (NULL %d)", n, null_arr);
            if (rc == 0) memcpy(b->cur, v, n * sizeof *v);
        }
        break;
    }
    case OP_TIMESTAMP:
        rc = ppk_sample_set_timestamp(b->s, fz_value(in));
        break;
    case OP_FLUSH:
        rc = ppk_sample_flush(b->s);
        break;
    case OP_DROP:
        rc = ppk_sample_drop(b->s);
        break;
    case OP_OMIT:
        rc = ppk_sample_omit_frames(b->s, (fz_u8(in) & 1) ? fz_u64(in) : fz_u8(in));
        break;
    case OP_PREPARED: {
        uint8_t f = fz_u8(in);
        ppk_label l = {.key = fz_str(in, 1, &bad), .is_num = f & 1};
        if (f & 1) {
            l.num = (f & 2) ? fz_value(in) : (int64_t)(f >> 2) % 4;
            l.num_unit = (f & 0x80) ? fz_str(in, 1, &bad) : (ppk_str){NULL, 0};
        } else {
            l.str = fz_str(in, 1, &bad);
        }
        ppk_prepared_label *pl = NULL;
        rc = ppk_label_prepare(b->s, &l, &pl);
        if (rc) {
            /* Refused as a label push would refuse it; nothing was pushed. */
            if ((rc != PPK_ENULL && rc != PPK_EEMPTYKEY && rc != PPK_ERESERVED &&
                 rc != PPK_ESPANID && rc != PPK_ENOMEM) || pl)
                FZ_FAIL("ppk_label_prepare returned %d", rc);
            if (rc == PPK_ENULL && !bad) FZ_FAIL("ppk_label_prepare: PPK_ENULL without a NULL string");
            fz_release();
            return;
        }
        if (bad) FZ_FAIL("ppk_label_prepare accepted NULL with a length");
        bad = 0;
        rc = ppk_sample_push_prepared_label(b->s, pl);
        ppk_prepared_label_free(pl);
        break;
    }
    }
    fz_release();
    if (b->begun && bad && rc == 0) FZ_FAIL("%s accepted NULL with a length", op_name(op));
    after_call(st, b, op, rc);
}

static void check_stats(bstate *st, int exported) {
    ppk_recorder_stats rs;
    ppk_recorder_stats_get(st->r, &rs);
    if (rs.samples_flushed != st->flushed)
        FZ_FAIL("samples_flushed %llu, accepted flushes %llu",
                (unsigned long long)rs.samples_flushed, (unsigned long long)st->flushed);
    /* Exports to the caller count as exported; exports to the sinks, of which there are
     * none, as dropped (samples_dropped_no_sink). */
    uint64_t out = rs.samples_exported + rs.samples_dropped_no_sink;
    if (exported && out != rs.samples_flushed)
        FZ_FAIL("after an export samples_exported + samples_dropped_no_sink %llu != "
                "samples_flushed %llu",
                (unsigned long long)out, (unsigned long long)rs.samples_flushed);
}

static void op_export(fz_in *in, bstate *st) {
    (void)in;
    ppk_export e;
    int rc = ppk_recorder_export(st->r, &e);
    if (rc != 0) {
        /* The window's samples are lost and counted (samples_lost_export). */
        if (rc != PPK_ENOMEM && rc != PPK_ECOMPRESS) FZ_FAIL("export returned %d", rc);
        memset(&st->tot, 0, sizeof st->tot);
        return;
    }
    fz_check_profile(&e.data, e.codec, &st->lim, &st->tot, 0, 0);
    if (e.stats.samples_added != st->tot.samples)
        FZ_FAIL("export stats: samples_added %llu, accepted flushes %llu",
                (unsigned long long)e.stats.samples_added, (unsigned long long)st->tot.samples);
    ppk_export_free(&e);
    memset(&st->tot, 0, sizeof st->tot);
    check_stats(st, 1);
}

/* Many complete samples of distinct strings through builder 0 (if it is free). */
static void op_bulk(fz_in *in, bstate *st) {
    builder *b = &st->b[0];
    if (b->begun) return;
    size_t n = 1 + fz_u8(in) % 128;
    uint8_t shape = fz_u8(in);
    for (size_t k = 0; k < n; k++) {
        uint64_t id = st->bulk_id++;
        char name[24], val[24];
        int rc = ppk_sample_start(b->s);
        for (int i = 0; rc == 0 && i < 3 + (shape & 7); i++) {
            int len = snprintf(name, sizeof name, "fn_%llu_%d", (unsigned long long)id, i);
            rc = ppk_sample_push_frame(b->s, (ppk_str){name, (size_t)len},
                                       (shape & 8) ? PPK_STR("bulk.py") : (ppk_str){name, (size_t)len},
                                       (int64_t)id, 0);
        }
        int vl = snprintf(val, sizeof val, "task-%llu", (unsigned long long)id);
        if (rc == 0) rc = ppk_sample_push_label_str(b->s, PPK_STR("task name"), (ppk_str){val, (size_t)vl});
        int64_t v[PPK_MAX_SAMPLE_TYPES] = {0};
        for (size_t i = 0; i < st->lim.n_types; i++) v[i] = (int64_t)(id % 11) + (int64_t)i;
        if (rc == 0) rc = ppk_sample_set_values(b->s, v, st->lim.n_types);
        if (rc == 0 && (shape & 16)) rc = ppk_sample_set_timestamp(b->s, (int64_t)id + 1);
        if (rc != 0) {
            FZ_FAIL("bulk sample: %s", ppk_strerror(rc));
            ppk_sample_drop(b->s);
            continue;
        }
        rc = ppk_sample_flush(b->s);
        if (rc == 0) {
            fz_totals_add(&st->tot, v, st->lim.n_types);
            st->flushed++;
        } else if (rc != PPK_ENOMEM) {
            FZ_FAIL("bulk flush: %s", ppk_strerror(rc));
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, data + size};
    bstate st;
    memset(&st, 0, sizeof st);
    ppk_recorder_config_init(&st.cfg);
    uint8_t c0 = fz_u8(&in), c1 = fz_u8(&in);
    static const ppk_value_type types[3] = {{PPK_STR("samples"), PPK_STR("count")},
                                            {PPK_STR("wall-time"), PPK_STR("nanoseconds")},
                                            {PPK_STR("alloc-space"), PPK_STR("bytes")}};
    ppk_profile_config *pc = &st.cfg.profile;
    pc->n_sample_types = 1 + c0 % 3;
    memcpy(pc->sample_types, types, sizeof types);
    pc->period_type = types[1];
    pc->period = 10000000;
    pc->max_string_len = 32;
    pc->max_frames = 2 + (c0 >> 2) % 7;
    pc->max_labels = 1 + (c0 >> 5) % 4;
    static const size_t limits[3] = {64 << 10, 128 << 10, 256 << 10};
    pc->memory_limit = limits[c1 % 3];
    pc->chunk_size = (c1 & 4) ? 16 << 10 : 4 << 10;
    pc->keep_bytes = (c1 & 8) ? 0 : 64 << 10;
    static const size_t bmax[4] = {4 << 10, 8 << 10, 64 << 10, 64 << 10};
    st.cfg.builder_max_bytes = bmax[(c1 >> 4) % 4];
    st.cfg.builder_keep_bytes = st.cfg.builder_max_bytes / 2;
    st.cfg.codec = (ppk_codec)((c1 >> 6) % 3);
    st.lim = (fz_limits){pc->n_sample_types, pc->max_string_len, pc->max_frames,
                         pc->max_labels};
    int rc = ppk_recorder_create(&st.cfg, &st.r);
    if (rc != 0) {
        FZ_FAIL("ppk_recorder_create: %s", ppk_strerror(rc));
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        rc = ppk_sample_create(st.r, &st.b[i].s);
        if (rc != 0) FZ_FAIL("ppk_sample_create: %s", ppk_strerror(rc));
    }
    if (!st.b[0].s || !st.b[1].s) goto out;
    int ops = 0;
    while (fz_more(&in) && ops++ < 300) {
        uint8_t ob = fz_u8(&in);
        int op = (ob & 0x7f) % OP_COUNT;
        builder *b = &st.b[ob >> 7];
        switch (op) {
        case OP_EXPORT:
            op_export(&in, &st);
            break;
        case OP_EXPORT_NULL:
            if ((fz_u8(&in) & 3) == 0) {
                rc = ppk_recorder_export(st.r, NULL);
                if (rc != 0 && rc != PPK_ENOMEM && rc != PPK_ECOMPRESS)
                    FZ_FAIL("export(NULL) returned %d", rc);
                memset(&st.tot, 0, sizeof st.tot);
                if (rc == 0) check_stats(&st, 1);
            } else {
                op_export(&in, &st);
            }
            break;
        case OP_ENDPOINT: {
            uint8_t e = fz_u8(&in);
            ppk_str s = fz_str(&in, 1, NULL);
            if (e & 1) {
                rc = ppk_recorder_set_endpoint(st.r, e >> 5, s);
                if (rc == 0 && (e >> 5) == 0) FZ_FAIL("set_endpoint accepted id 0");
            } else {
                int64_t n = fz_value(&in);
                rc = ppk_recorder_add_endpoint_count(st.r, s, n);
                if (rc == 0 && n < 0) FZ_FAIL("add_endpoint_count accepted %lld", (long long)n);
            }
            fz_release();
            if (rc > 0 || rc < PPK_ESYS) FZ_FAIL("endpoint call returned %d", rc);
            break;
        }
        case OP_BULK:
            op_bulk(&in, &st);
            break;
        default:
            builder_op(&in, &st, b, op);
            break;
        }
        fz_release();
    }
    check_stats(&st, 0);
    op_export(&in, &st);
    if (size && (data[size - 1] & 0xf) == 0xf) {
        /* The recorder goes first: every builder call is then PPK_ECLOSED. */
        ppk_recorder_free(st.r);
        st.r = NULL;
        for (int op = OP_START; op <= OP_DROP; op++) {
            for (int i = 0; i < 2; i++) {
                int64_t v = 1;
                switch (op) {
                case OP_START: rc = ppk_sample_start(st.b[i].s); break;
                case OP_FRAME: rc = ppk_sample_push_frame(st.b[i].s, PPK_STR("f"), PPK_STR(""), 0, 0); break;
                case OP_FRAME_EX: rc = ppk_sample_push_frame_ex(st.b[i].s, &(ppk_frame){.name = PPK_STR("g")}); break;
                case OP_LABEL_STR: rc = ppk_sample_push_label_str(st.b[i].s, PPK_STR("k"), PPK_STR("v")); break;
                case OP_LABEL_NUM: rc = ppk_sample_push_label_num(st.b[i].s, PPK_STR("n"), 1, PPK_STR("")); break;
                case OP_SET_VALUE: rc = ppk_sample_set_value(st.b[i].s, 0, 1); break;
                case OP_SET_VALUES: rc = ppk_sample_set_values(st.b[i].s, &v, 1); break;
                case OP_TIMESTAMP: rc = ppk_sample_set_timestamp(st.b[i].s, 5); break;
                case OP_FLUSH: rc = ppk_sample_flush(st.b[i].s); break;
                default: rc = ppk_sample_drop(st.b[i].s); break;
                }
                if (rc != PPK_ECLOSED)
                    FZ_FAIL("%s after ppk_recorder_free returned %d, want PPK_ECLOSED",
                            op_name(op), rc);
            }
        }
    }
out:
    ppk_sample_free(st.b[0].s);
    ppk_sample_free(st.b[1].s);
    ppk_recorder_free(st.r);
    return 0;
}
