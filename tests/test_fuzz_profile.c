/*
 * test_fuzz_profile.c - fuzz target: the input is a sequence of calls on one ppk_profile.
 *
 * The first bytes choose the profile: 1 to 3 sample types, max_string_len 32, max_frames
 * 2..8, max_labels 1..4, a memory_limit of 64, 128 or 256 KiB with 4 or 16 KiB chunks
 * (small, so that the memory-limit degradations run), and whether upscaling rules may be
 * added. Then each op byte picks a call: add a sample (frames with names, files and
 * mappings from the input, invalid UTF-8, NULL with a length; labels string or numeric,
 * reserved and duplicate keys, "local root span id"; values up to the INT64 extremes;
 * timestamps), add many distinct samples at once, set_endpoint, add_endpoint_count, an
 * upscaling rule, encode with each codec, reset.
 *
 * Checked after each call: an add that fails leaves the profile unchanged and one that
 * must fail (more values than types, NULL with a length, reserved key, bad span id, empty or
 * duplicate key, too many labels) does; samples_added counts the accepted adds; the
 * window's memory stays within memory_limit + chunk_size (G4). After each encode: the
 * output is well formed (fz_check_profile in fuzz.h), the same options give the same
 * bytes, and, without upscaling rules, the sum of each value type over the samples is
 * the sum of what ppk_profile_add accepted since the last reset.
 *
 * See fuzz.h for the two builds (libFuzzer, and the ctest regression run).
 */
#define FUZZ_NAME "fuzz_profile"
#include "fuzz.h"

enum { OP_ADD, OP_BULK, OP_ENDPOINT, OP_ENDPOINT_COUNT, OP_UPSCALE_PROP, OP_UPSCALE_POISSON,
       OP_ENCODE, OP_RESET, OP_ADD2, OP_ADD3, OP_COUNT };

typedef struct fstate {
    ppk_profile *p;
    ppk_profile_config cfg;
    fz_limits lim;
    fz_totals tot; /* since the last reset */
    int rules_allowed, rules;
    uint64_t bulk_id;
} fstate;

static int rc_known(int rc) { return rc <= 0 && rc >= PPK_ESYS; }

/* The counters a failed add must not change. */
static int same_window(const ppk_profile_stats *a, const ppk_profile_stats *b) {
    return a->samples_added == b->samples_added &&
           a->samples_aggregated == b->samples_aggregated &&
           a->samples_timestamped == b->samples_timestamped && a->strings == b->strings &&
           a->functions == b->functions && a->mappings == b->mappings &&
           a->locations == b->locations && a->stacks == b->stacks && a->labels == b->labels &&
           a->label_sets == b->label_sets;
}

static void check_memory(fstate *st) {
    ppk_profile_stats s;
    ppk_profile_stats_get(st->p, &s);
    /* The documented bound: the limit, one chunk and 4 KiB. */
    if (s.memory_bytes > st->cfg.memory_limit + st->cfg.chunk_size + 4096)
        FZ_FAIL("window holds %llu bytes, limit %zu + chunk %zu",
                (unsigned long long)s.memory_bytes, st->cfg.memory_limit, st->cfg.chunk_size);
    if (s.samples_added != st->tot.samples)
        FZ_FAIL("samples_added %llu, accepted adds %llu", (unsigned long long)s.samples_added,
                (unsigned long long)st->tot.samples);
}

/* A frame from the input; *bad when one of its strings is NULL with a length. */
static void make_frame(fz_in *in, ppk_frame *f, const ppk_mapping *maps, int allow_bad,
                       int *bad) {
    memset(f, 0, sizeof *f);
    uint8_t b = fz_u8(in);
    f->name = fz_str(in, allow_bad, bad);
    if (b & 1) f->system_name = fz_str(in, allow_bad, bad);
    if (b & 2) f->filename = fz_str(in, allow_bad, bad);
    if (b & 4) f->start_line = fz_value(in);
    if (b & 8) f->line = fz_value(in);
    if (b & 16) f->address = fz_u64(in);
    if (b & 32) f->mapping = &maps[(b >> 6) % 3];
}

static void make_label(fz_in *in, ppk_label *l, int allow_bad, int *bad, int *must_fail) {
    memset(l, 0, sizeof *l);
    uint8_t b = fz_u8(in);
    int kbad = 0, vbad = 0;
    l->key = fz_str(in, allow_bad, &kbad);
    l->is_num = b & 1;
    if (l->is_num) {
        l->num = (b & 2) ? fz_value(in) : (int64_t)(b >> 2);
        if (b & 64) l->num_unit = fz_str(in, allow_bad, &vbad);
    } else {
        l->str = fz_str(in, allow_bad, &vbad);
    }
    if (kbad || vbad) *bad = 1;
    if (!kbad && l->key.len == 0) *must_fail = 1;                    /* PPK_EEMPTYKEY */
    if (fz_str_eq(l->key, "end_timestamp_ns")) *must_fail = 1;       /* PPK_ERESERVED */
    if (fz_str_eq(l->key, "local root span id") && (!l->is_num || l->num == 0))
        *must_fail = 1; /* PPK_ESPANID */
}

static void op_add(fz_in *in, fstate *st) {
    uint8_t flags = fz_u8(in);
    int allow_bad = (flags & 3) == 0, bad = 0, must_fail = 0;
    ppk_mapping maps[3];
    memset(maps, 0, sizeof maps);
    for (int i = 0; i < 3 && (flags & 0x80); i++) {
        /* Mostly a plausible range; sometimes any 64 bits, the extremes included (the
         * encoder's bounds must hold for the largest varints). */
        if (flags & 0x40) {
            maps[i].memory_start = (uint64_t)fz_value(in);
            maps[i].memory_limit = (uint64_t)fz_value(in);
            maps[i].file_offset = (uint64_t)fz_value(in);
        } else {
            maps[i].memory_start = (uint64_t)fz_u8(in) << 12;
            maps[i].memory_limit = maps[i].memory_start + ((uint64_t)fz_u8(in) << 12);
            maps[i].file_offset = fz_u8(in);
        }
        int mbad = 0;
        maps[i].filename = fz_str(in, allow_bad, &mbad);
        maps[i].build_id = fz_str(in, allow_bad, &mbad);
        (void)mbad; /* a mapping is checked only if a kept frame uses it */
    }
    size_t nf = fz_u8(in) % (st->lim.max_frames + 4);
    size_t nl = fz_u8(in) % (st->lim.max_labels + 3);
    size_t nv = st->lim.n_types;
    if (allow_bad && (flags & 4)) nv = fz_u8(in) % (st->lim.n_types + 2);
    ppk_frame frames[16];
    ppk_label labels[8];
    int64_t values[PPK_MAX_SAMPLE_TYPES + 2] = {0};
    for (size_t i = 0; i < nf; i++) {
        int fbad = 0;
        make_frame(in, &frames[i], maps, allow_bad, &fbad);
        if (frames[i].mapping) {
            const ppk_mapping *m = frames[i].mapping;
            if ((m->filename.ptr == NULL && m->filename.len) ||
                (m->build_id.ptr == NULL && m->build_id.len))
                fbad = 1;
        }
        /* Frames past max_frames - 1 may be omitted unchecked. */
        if (fbad && i + 1 < st->lim.max_frames) bad = 1;
    }
    for (size_t i = 0; i < nl; i++) {
        make_label(in, &labels[i], allow_bad, &bad, &must_fail);
        for (size_t k = 0; k < i; k++)
            if (labels[k].key.ptr && labels[i].key.ptr && labels[k].key.len == labels[i].key.len &&
                memcmp(labels[k].key.ptr, labels[i].key.ptr, labels[i].key.len) == 0)
                must_fail = 1; /* PPK_EDUPLABEL */
    }
    if (nl > st->lim.max_labels) must_fail = 1;
    for (size_t i = 0; i < nv; i++) values[i] = fz_value(in);
    if (nv > st->lim.n_types) must_fail = 1; /* fewer: the rest are 0 */

    ppk_sample_data s = {0};
    s.frames = nf ? fz_copy(frames, nf * sizeof *frames) : NULL;
    s.n_frames = nf;
    s.labels = nl ? fz_copy(labels, nl * sizeof *labels) : NULL;
    s.n_labels = nl;
    s.values = nv ? fz_copy(values, nv * sizeof *values) : NULL;
    s.n_values = nv;
    if (allow_bad && (flags & 8)) { /* arrays NULL with a count */
        uint8_t which = fz_u8(in) % 3;
        if (which == 0 && nf) s.frames = NULL, bad = 1;
        if (which == 1 && nl) s.labels = NULL, bad = 1;
        if (which == 2 && nv) s.values = NULL, bad = 1;
    }
    if (flags & 16) s.timestamp_ns = fz_value(in);

    ppk_profile_stats before, after;
    ppk_profile_stats_get(st->p, &before);
    int rc = ppk_profile_add(st->p, &s);
    ppk_profile_stats_get(st->p, &after);
    fz_release();
    if (rc == 0) {
        if (bad || must_fail) FZ_FAIL("ppk_profile_add accepted an invalid sample (bad %d)", bad);
        fz_totals_add(&st->tot, values, st->lim.n_types);
    } else {
        if (!rc_known(rc)) FZ_FAIL("ppk_profile_add returned %d", rc);
        if (rc == PPK_ESTATE || rc == PPK_ECLOSED || rc == PPK_ESYS || rc == PPK_ECOMPRESS)
            FZ_FAIL("ppk_profile_add returned %s", ppk_strerror(rc));
        if (!same_window(&before, &after)) FZ_FAIL("a failed add (%d) changed the profile", rc);
        if (bad && rc != PPK_ENULL && rc != PPK_EVALUES && rc != PPK_ETOOMANY &&
            rc != PPK_EDUPLABEL && rc != PPK_EEMPTYKEY && rc != PPK_ERESERVED &&
            rc != PPK_ESPANID && rc != PPK_EINVAL)
            FZ_FAIL("NULL input refused with %d", rc);
    }
}

/* Many distinct samples (new names, files, label values): fills the window fast. */
static void op_bulk(fz_in *in, fstate *st) {
    size_t n = 1 + fz_u8(in) % 128;
    uint8_t shape = fz_u8(in);
    for (size_t k = 0; k < n; k++) {
        char name[3][24], val[24];
        ppk_frame fr[3];
        memset(fr, 0, sizeof fr);
        uint64_t id = st->bulk_id++;
        for (int i = 0; i < 3; i++) {
            int len = snprintf(name[i], sizeof name[i], "fn_%llu_%d", (unsigned long long)id, i);
            fr[i].name = (ppk_str){name[i], (size_t)len};
            fr[i].filename = (shape & 1) ? PPK_STR("bulk.py") : fr[i].name;
            fr[i].line = (int64_t)id;
        }
        int vl = snprintf(val, sizeof val, "task-%llu", (unsigned long long)id);
        ppk_label lab[2] = {{.key = PPK_STR("task name"), .str = {val, (size_t)vl}},
                            {.key = PPK_STR("local root span id"), .is_num = 1,
                             .num = (int64_t)(id % 7) + 1}};
        int64_t v[PPK_MAX_SAMPLE_TYPES];
        for (size_t i = 0; i < st->lim.n_types; i++) v[i] = (int64_t)(id % 13) + (int64_t)i;
        ppk_sample_data s = {fr, 3, lab, (shape & 2) ? 2 : 1, v, st->lim.n_types,
                             (shape & 4) ? (int64_t)id + 1 : 0};
        if (st->lim.max_labels < s.n_labels) s.n_labels = st->lim.max_labels;
        int rc = ppk_profile_add(st->p, &s);
        if (rc == 0) fz_totals_add(&st->tot, v, st->lim.n_types);
        else if (rc != PPK_ENOMEM) FZ_FAIL("bulk add refused with %d", rc);
    }
}

static void op_encode(fz_in *in, fstate *st) {
    uint8_t b = fz_u8(in);
    ppk_encode_options o = {0};
    o.codec = (ppk_codec)(b % 3);
    static const int levels[] = {0, 0, 0, 1, 3, 6, 9, -1, 100};
    o.level = levels[(b >> 2) % 9];
    int explicit_times = (b & 0x40) != 0;
    if (explicit_times) {
        o.start_ns = 1 + (int64_t)fz_u8(in) * 1000000007;
        o.end_ns = o.start_ns + (int64_t)fz_u8(in) * 999983;
        if (fz_u8(in) == 0xff) o.end_ns = 1; /* before the start */
    }
    int null_opt = !explicit_times && (b & 0xb0) == 0x80;
    ppk_bytes out;
    memset(&out, 0x5a, sizeof out);
    int rc = ppk_profile_encode(st->p, null_opt ? NULL : &o, &out);
    ppk_codec codec = null_opt ? PPK_CODEC_GZIP : o.codec;
    int level = null_opt ? 0 : o.level;
    int level_ok = codec == PPK_CODEC_NONE ? level == 0 : (level >= 0 && level <= 9);
    int times_ok = !explicit_times || o.end_ns >= o.start_ns;
    if (rc != 0) {
        if (rc == PPK_EINVAL && (!level_ok || !times_ok)) return;
        if (!rc_known(rc) || (rc != PPK_ENOMEM && rc != PPK_ECOMPRESS))
            FZ_FAIL("encode (codec %d level %d) returned %d", (int)codec, level, rc);
        if (out.data || out.len) FZ_FAIL("a failed encode left bytes in out");
        return;
    }
    if (!level_ok) FZ_FAIL("encode accepted codec %d with level %d", (int)codec, level);
    if (!times_ok) FZ_FAIL("encode accepted an end before the start");
    fz_check_profile(&out, codec, &st->lim, st->rules ? NULL : &st->tot,
                     explicit_times ? o.start_ns : 0, explicit_times ? o.end_ns : 0);
    if (explicit_times && !null_opt) { /* deterministic output */
        ppk_bytes again;
        int rc2 = ppk_profile_encode(st->p, &o, &again);
        if (rc2 == 0 && (again.len != out.len || memcmp(again.data, out.data, out.len) != 0))
            FZ_FAIL("two encodes of one window differ (codec %d, %zu vs %zu bytes)",
                    (int)codec, out.len, again.len);
        ppk_bytes_free(&again);
    }
    ppk_bytes_free(&out);
}

static void op_upscale(fz_in *in, fstate *st, int poisson) {
    size_t idx[4];
    size_t n = fz_u8(in) % 4;
    for (size_t i = 0; i < n; i++) idx[i] = fz_u8(in) % (st->lim.n_types + 1);
    ppk_str key = fz_str(in, 1, NULL), val = fz_str(in, 1, NULL);
    int rc;
    if (poisson) {
        size_t sum = fz_u8(in) % (st->lim.n_types + 1), cnt = fz_u8(in) % (st->lim.n_types + 1);
        uint64_t dist = fz_u8(in) % 4 == 0 ? 0 : (uint64_t)fz_u8(in) * 4096 + 1;
        if (fz_u8(in) == 0xff) dist = UINT64_MAX;
        rc = ppk_profile_add_upscaling_poisson(st->p, n ? idx : NULL, n, key, val, sum, cnt, dist);
    } else {
        uint64_t sampled = fz_u8(in), real = fz_u8(in) % 4 == 0 ? fz_u64(in) : fz_u8(in) * 10u;
        rc = ppk_profile_add_upscaling_proportional(st->p, n ? idx : NULL, n, key, val, sampled,
                                                    real);
    }
    fz_release();
    if (!rc_known(rc) || rc == PPK_ESTATE) FZ_FAIL("upscaling rule returned %d", rc);
    if (rc == 0) st->rules = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, data + size};
    fstate st;
    memset(&st, 0, sizeof st);
    ppk_profile_config_init(&st.cfg);
    uint8_t c0 = fz_u8(&in), c1 = fz_u8(&in);
    static const ppk_value_type types[3] = {{PPK_STR("samples"), PPK_STR("count")},
                                            {PPK_STR("cpu-time"), PPK_STR("nanoseconds")},
                                            {PPK_STR("alloc-space"), PPK_STR("bytes")}};
    st.cfg.n_sample_types = 1 + c0 % 3;
    memcpy(st.cfg.sample_types, types, sizeof types);
    st.cfg.period_type = types[1];
    st.cfg.period = 10000000;
    st.cfg.max_string_len = 32;
    st.cfg.max_frames = 2 + (c0 >> 2) % 7;
    st.cfg.max_labels = 1 + (c0 >> 5) % 4;
    static const size_t limits[3] = {64 << 10, 128 << 10, 256 << 10};
    st.cfg.memory_limit = limits[c1 % 3];
    st.cfg.chunk_size = (c1 & 4) ? 16 << 10 : 4 << 10;
    st.cfg.keep_bytes = (c1 & 8) ? 0 : 64 << 10;
    st.rules_allowed = (c1 & 0x30) == 0x30;
    st.lim = (fz_limits){st.cfg.n_sample_types, st.cfg.max_string_len, st.cfg.max_frames,
                         st.cfg.max_labels};
    int rc = ppk_profile_create(&st.cfg, &st.p);
    if (rc != 0) {
        FZ_FAIL("ppk_profile_create: %s", ppk_strerror(rc));
        return 0;
    }
    int ops = 0;
    while (fz_more(&in) && ops++ < 200) {
        uint8_t op = fz_u8(&in) % OP_COUNT;
        switch (op) {
        case OP_ADD:
        case OP_ADD2:
        case OP_ADD3:
            op_add(&in, &st);
            break;
        case OP_BULK:
            op_bulk(&in, &st);
            break;
        case OP_ENDPOINT: {
            uint8_t b = fz_u8(&in);
            uint64_t id = (b & 0x80) ? fz_u64(&in) : b % 8;
            ppk_str e = fz_str(&in, 1, NULL);
            rc = ppk_profile_set_endpoint(st.p, id, e);
            fz_release();
            if (!rc_known(rc) || (rc == 0 && id == 0)) FZ_FAIL("set_endpoint(%llu) returned %d", (unsigned long long)id, rc);
            break;
        }
        case OP_ENDPOINT_COUNT: {
            ppk_str e = fz_str(&in, 1, NULL);
            int64_t n = fz_value(&in);
            rc = ppk_profile_add_endpoint_count(st.p, e, n);
            fz_release();
            if (!rc_known(rc) || (rc == 0 && n < 0)) FZ_FAIL("add_endpoint_count(%lld) returned %d", (long long)n, rc);
            break;
        }
        case OP_UPSCALE_PROP:
        case OP_UPSCALE_POISSON:
            if (st.rules_allowed) op_upscale(&in, &st, op == OP_UPSCALE_POISSON);
            else op_encode(&in, &st);
            break;
        case OP_ENCODE:
            op_encode(&in, &st);
            break;
        case OP_RESET:
            ppk_profile_reset(st.p, (fz_u8(&in) & 1) ? 1000 : 0);
            memset(&st.tot, 0, sizeof st.tot);
            break;
        }
        fz_release();
        check_memory(&st);
    }
    /* Always end with a raw encode, the totals checked. */
    ppk_encode_options o = {PPK_CODEC_NONE, 0, 0, 0};
    ppk_bytes out;
    rc = ppk_profile_encode(st.p, &o, &out);
    if (rc == 0) fz_check_profile(&out, PPK_CODEC_NONE, &st.lim, st.rules ? NULL : &st.tot, 0, 0);
    else if (rc != PPK_ENOMEM) FZ_FAIL("final encode returned %d", rc);
    ppk_bytes_free(&out);
    ppk_profile_free(st.p);
    return 0;
}
