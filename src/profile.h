/*
 * profile.h - one aggregation window (struct ppk_profile), shared by profile.c, which
 * fills it, and pprof.c, which encodes it.
 *
 * Everything a window holds is interned into dense ids, in insertion order, by
 * ppk__dict tables whose keys are fixed-layout records (no padding left undefined):
 * strings -> mappings, functions -> locations -> stacks (arrays of location ids);
 * labels -> label sets (sorted arrays of label ids); (stack, label set) -> aggregated
 * sample, whose values live in `values`. Samples arrive as records (record.h), looked
 * up first in caches keyed by those records. Timestamped samples are kept one by one in
 * `ts`. Ids inside records are the dict ids (0-based); pprof ids are those + 1, and 0
 * means "none" in the few records where a reference is optional (stored as id + 1).
 * All record bytes live in the window's arena; the tables and arrays are allocated
 * through `mem` and kept (not shrunk) across resets. Single-threaded.
 */
#ifndef PPK_PROFILE_H
#define PPK_PROFILE_H

#include "pprofkit.h"

#include <string.h>

#include "alloc.h"
#include "arena.h"
#include "dict.h"
#include "pb.h"
#include "record.h"
#include "stack_cache.h"
#include "strtab.h"

struct ppk__sbuf;

/* The string that replaces new strings once the budget is reached, and the name of
 * the one frame of the overflow stack (PPK_DEGRADATIONS's texts name it). */
#define PPK__PLACEHOLDER "[pprofkit: memory limit]"

/* Counters of repairs (G7) and degradations (G4) by reason; see ppk_profile_stats. */
typedef struct ppk__degraded {
#define PPK__FIELD(name, what) uint64_t name;
    PPK_REPAIRS(PPK__FIELD)
    PPK_DEGRADATIONS(PPK__FIELD)
#undef PPK__FIELD
} ppk__degraded;

/* Ids a window makes when it first needs them. */
typedef struct ppk__ids {
    uint32_t end_ts_key;   /* "end_timestamp_ns", 0 until a timestamped sample */
    uint32_t endpoint_key; /* "trace endpoint", 0 until an endpoint is set */
    /* Made past the budget when first needed (insert.c), else PPK_DICT_NONE: the string
     * PPK__PLACEHOLDER, the empty label set, the overflow stack and sample. */
    uint32_t placeholder, empty_set, overflow_stack, overflow_sample;
} ppk__ids;

typedef struct ppk__mapping_rec {
    uint64_t memory_start;
    uint64_t memory_limit;
    uint64_t file_offset;
    uint32_t filename;
    uint32_t build_id;
} ppk__mapping_rec;

typedef struct ppk__function_rec {
    uint32_t name;
    uint32_t system_name;
    uint32_t filename;
    uint32_t pad_;
    int64_t start_line;
} ppk__function_rec;

typedef struct ppk__location_rec {
    uint32_t mapping;  /* mapping id + 1; 0: none */
    uint32_t function; /* function id + 1; 0: none */
    uint64_t address;
    int64_t line;
} ppk__location_rec;

/* A label as the labels dict stores it: a string label as its first 8 bytes only (key,
 * value), a numeric one as all 16 (key, unit, number); the length tells them apart.
 * Most labels are strings, and a window of unique task names holds one per sample. */
typedef struct ppk__label_key {
    uint32_t key;
    uint32_t str;      /* string label: the value; numeric label: the unit */
    int64_t num;       /* numeric label only */
} ppk__label_key;

#define PPK__LABEL_STR_BYTES 8  /* key, value */
#define PPK__LABEL_NUM_BYTES 16 /* key, unit, number */

/* A label decoded (ppk__label_get). */
typedef struct ppk__label_rec {
    uint32_t key;
    uint32_t str;
    uint32_t num_unit;
    uint32_t is_num;
    int64_t num;
} ppk__label_rec;

typedef struct ppk__sample_rec {
    uint32_t stack;
    uint32_t label_set;
} ppk__sample_rec;

typedef struct ppk__ts_sample {
    uint32_t stack;
    uint32_t label_set;
    int64_t timestamp_ns;
} ppk__ts_sample;

enum { PPK__RULE_PROPORTIONAL, PPK__RULE_POISSON };

typedef struct ppk__rule {
    int kind;
    uint32_t value_mask;  /* bit i: scale value i */
    char *label_key;      /* owned copies; empty key: every sample */
    size_t label_key_len;
    char *label_value;
    size_t label_value_len;
    double scale;         /* proportional */
    size_t sum_idx, count_idx;
    uint64_t sampling_distance;
} ppk__rule;

struct ppk_profile {
    ppk__mem mem;
    ppk__arena arena;
    ppk__strtab strings;
    ppk__dict mappings, functions, locations, stacks, labels, label_sets, samples;
    ppk__dict endpoints;      /* uint64 local root span id -> endpoint string id */
    ppk__dict endpoint_names; /* endpoint name -> index into endpoint_counts */
    /* Caches keyed by records (record.h), hashed at push: a known frame record gives
     * its location at the cost of one lookup, a known label record its label. */
    ppk__dict frame_recs, label_recs;
    ppk__frame_val *frame_val; /* by frame_recs id: location id, record by id (stack_cache.h) */
    size_t frame_val_cap;
    uint32_t *label_of;       /* by label_recs id: labels id */
    size_t label_of_cap;
    ppk__stack_cache sc;      /* a known stack without a lookup per frame */
    ppk__stack_cache setc;    /* a known label set without a lookup per label */

    int64_t *values;          /* n_types per aggregated sample */
    size_t values_cap;        /* in samples */
    ppk__ts_sample *ts;
    int64_t *ts_values;       /* n_types per timestamped sample */
    size_t ts_n, ts_cap, ts_values_cap;
    uint32_t *endpoint_str;   /* by endpoints id */
    size_t endpoint_str_cap;
    int64_t *endpoint_counts; /* by endpoint_names id */
    size_t endpoint_counts_cap;

    /* The recorder's function dictionary (fdict.h), for frames pushed by id; NULL in a
     * profile of its own. */
    struct ppk__fdict *fdict;

    /* Configuration. */
    size_t n_types;
    char *cfg_text;           /* owned copies of the config strings */
    size_t cfg_text_len;
    ppk_profile_config cfg;   /* as given, its strings pointing into cfg_text */
    size_t max_frames, max_labels;
    ppk__rule *rules;
    size_t n_rules, rules_cap;

    /* The window. */
    int64_t start_ns;
    ppk__degraded deg;        /* repairs and degradations, by reason */
    ppk__ids ids;             /* ids made on demand; an undo restores them */
    uint32_t type_ids[PPK_MAX_SAMPLE_TYPES], unit_ids[PPK_MAX_SAMPLE_TYPES];
    uint32_t period_type_id, period_unit_id;
    uint64_t samples_added;

    /* Scratch, sized by the limits at create. */
    uint32_t *stack_buf;      /* max_frames location ids */
    uint32_t *rec_buf;        /* max_frames frame_recs ids (same allocation) */
    uint32_t *label_buf;      /* max_labels label ids */
    uint32_t *lrec_buf;       /* max_labels label_recs ids (same allocation) */
    /* Outside the budget (`mem` has the limit): the encoder's buffer and
     * ppk_profile_add's sample, which are scratch, not the window's content. */
    ppk__mem aux;
    ppk__pb pb;               /* the encoder's buffer, reused */
    size_t pb_used;           /* what the window's last encode needed of it */
    struct ppk__sbuf *sbuf;   /* ppk_profile_add's sample builder, made on first use */
};

/* Label `id` of the window, decoded. */
static inline ppk__label_rec ppk__label_get(const ppk_profile *p, uint32_t id) {
    uint32_t len;
    const uint8_t *k = ppk__dict_key(&p->labels, id, &len);
    ppk__label_key lk = {0, 0, 0};
    memcpy(&lk, k, len);
    ppk__label_rec l = {lk.key, lk.str, 0, 0, 0};
    if (len == PPK__LABEL_NUM_BYTES) {
        l.str = 0;
        l.num_unit = lk.str;
        l.is_num = 1;
        l.num = lk.num;
    }
    return l;
}

/* What an insert that ran out of memory puts back (insert.c, endpoints). */
typedef struct ppk__undo {
    ppk__arena_mark arena;
    uint32_t n[12]; /* PPK__TABLES' counts, then the string table's */
    ppk__fit_counts fit;
    size_t ts_n;
    ppk__ids ids;
} ppk__undo;

/* The window's tables but the string table, in a fixed order (profile.c). */
#define PPK__TABLES(X)                                                                     \
    X(mappings) X(functions) X(locations) X(stacks) X(labels) X(label_sets) X(samples)     \
        X(endpoints) X(endpoint_names) X(frame_recs) X(label_recs)

/* Inline: every flush makes one. */
static inline void ppk__undo_save(ppk_profile *p, ppk__undo *u) {
    uint32_t *n = u->n;
#define PPK__SAVE_N(table) *n++ = p->table.n;
    PPK__TABLES(PPK__SAVE_N)
#undef PPK__SAVE_N
    *n = p->strings.d.n;
    u->arena = ppk__arena_get_mark(&p->arena);
    u->fit = p->strings.fit;
    u->ts_n = p->ts_n;
    u->ids = p->ids;
}
void ppk__undo_restore(ppk_profile *p, const ppk__undo *u);
void ppk__degraded_add(ppk__degraded *to, const ppk__degraded *d);

/* a + b, saturating at INT64_MIN/INT64_MAX; a saturation is counted in *saturated. */
static inline int64_t ppk__sat_add(int64_t a, int64_t b, uint64_t *saturated) {
    int64_t r;
    if (!__builtin_add_overflow(a, b, &r)) return r;
    (*saturated)++;
    return b > 0 ? INT64_MAX : INT64_MIN;
}

/* Interns a key string the window needs (e.g. "end_timestamp_ns") once per window:
 * past the budget if need be, in the string table's headroom. 0 or PPK_ENOMEM. */
int ppk__profile_key(ppk_profile *p, const char *key, size_t len, uint32_t *id);

/* ppk_profile_encode with the protobuf built in `pb` (the recorder shares one between
 * its windows, since its exports are serialized). */
int ppk__profile_encode_with(ppk_profile *p, ppk__pb *pb, const ppk_encode_options *opt,
                             ppk_bytes *out);
/* Several windows of one configuration (a sharded recorder's) as one profile: each
 * window's strings, locations, functions and mappings follow the previous window's,
 * with their ids offset; types, period and endpoints are the first window's; the
 * degradation comments are summed. The output of one window is the same as
 * ppk__profile_encode_with's. */
int ppk__profile_encode_many(ppk_profile *const *ws, size_t n_ws, ppk__pb *pb,
                             const ppk_encode_options *opt, ppk_bytes *out);

/* Adds the sample `r` (built and sealed by a ppk__sbuf, whose pushes made
 * ppk_profile_add's checks). On PPK_ENOMEM the window is as it was; over budget,
 * detail degrades (insert.c). */
int ppk__profile_add_recs(ppk_profile *p, const ppk__recs *r);

#endif
