/*
 * otlp.h - what the two halves of the OTLP encoder share (otlp.c: the tables and
 * ppk_otlp_encode; otlp_write.c: writing the request): the field numbers, the interned
 * records and the encoder's state. See otlp.c for how it works.
 */
#ifndef PPK_OTLP_H
#define PPK_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "dict.h"
#include "pb.h"
#include "pprofkit.h"

/* ExportProfilesServiceRequest */
enum { REQ_RESOURCE_PROFILES = 1, REQ_DICTIONARY = 2 };
/* ResourceProfiles, ScopeProfiles, Resource, InstrumentationScope */
enum { RP_RESOURCE = 1, RP_SCOPE_PROFILES = 2, SP_SCOPE = 1, SP_PROFILES = 2 };
enum { RES_ATTRIBUTES = 1, SCOPE_NAME = 1, SCOPE_VERSION = 2 };
/* KeyValue, AnyValue */
enum { KV_KEY = 1, KV_VALUE = 2, AV_STRING = 1, AV_INT = 3 };
/* Profile */
enum {
    PR_SAMPLE_TYPE = 1, PR_SAMPLES = 2, PR_TIME = 3, PR_DURATION = 4, PR_PERIOD_TYPE = 5,
    PR_PERIOD = 6, PR_ID = 7, PR_DROPPED_ATTRIBUTES = 8
};
/* ValueType, Sample */
enum { VT_TYPE = 1, VT_UNIT = 2 };
enum { SM_STACK = 1, SM_ATTRIBUTES = 2, SM_VALUES = 4, SM_TIMESTAMPS = 5 };
/* ProfilesDictionary */
enum {
    DI_MAPPINGS = 1, DI_LOCATIONS = 2, DI_FUNCTIONS = 3, DI_LINKS = 4, DI_STRINGS = 5,
    DI_ATTRIBUTES = 6, DI_STACKS = 7
};
/* Mapping, Location, Line, Function, Stack, KeyValueAndUnit */
enum { MA_START = 1, MA_LIMIT = 2, MA_OFFSET = 3, MA_FILENAME = 4 };
enum { LO_MAPPING = 1, LO_ADDRESS = 2, LO_LINES = 3, LI_FUNCTION = 1, LI_LINE = 2 };
enum { FN_NAME = 1, FN_SYSTEM_NAME = 2, FN_FILENAME = 3, FN_START_LINE = 4 };
enum { ST_LOCATIONS = 1, KU_KEY = 1, KU_VALUE = 2, KU_UNIT = 3 };

/* The largest OTLP index (int32). */
#define MAX_INDEX 0x7fffffffu

/* The interned records: a mapping, a function, a location (followed by its lines). */
typedef struct map_rec {
    uint64_t start, limit, offset;
    uint32_t file, pad;
} map_rec;
typedef struct fn_rec {
    uint32_t name, system_name, file, pad;
    int64_t start_line;
} fn_rec;
typedef struct loc_rec {
    uint32_t mapping, n_lines;
    uint64_t address;
} loc_rec;
typedef struct line_rec {
    uint32_t function, pad;
    int64_t line;
} line_rec;

/* One attribute, as interned: a string value is a string index. */
typedef struct attr_rec {
    uint32_t key, unit;
    uint32_t kind; /* AV_STRING or AV_INT */
    uint32_t pad;
    uint64_t value;
} attr_rec;

typedef struct enc {
    ppk__mem mem;
    ppk__arena arena;
    ppk__dict strs;   /* the string table */
    ppk__dict lvals;  /* string label values (inline in AnyValue): ids for attributes */
    ppk__dict maps, fns, locs, stacks, attrs, groups;
    ppk__pb pb;
    const ppk_pprof *p;
    uint8_t *fix;          /* room to repair one string */
    size_t fix_cap;
    uint32_t *map_ix, *fn_ix, *loc_ix; /* per pprof element: its OTLP index */
    uint8_t *rec;          /* room for one location record */
    uint32_t *type_strs;   /* per sample type: type, unit; then the period type's */
    uint32_t *s_stack;     /* per sample */
    uint32_t *s_group;
    uint8_t *s_has_ts;
    int64_t *s_ts;
    uint32_t *s_dropped;   /* per sample: labels left out (a key again, an empty key) */
    uint32_t *s_attr_off;  /* per sample + 1: its attributes in attr_ix */
    uint32_t *attr_ix;
    uint32_t *scratch;     /* per sample: a key being built, then the group members */
    uint32_t *g_first;     /* per group + 1: its members in `members` */
    uint32_t *members;
    size_t n_attr_ix, n_groups;
    struct { void *p; size_t bytes; } arrays[16]; /* freed at the end */
    size_t n_arrays;
    int rc;
    char *err;
    size_t err_len;
} enc;

/* Records rc (the first error wins) with a message; returns rc. */
int ppk__otlp_fail(enc *e, int rc, const char *what);
/* s itself when it is valid UTF-8, else its repair (in e->fix, valid until the next
 * call); s.ptr NULL on failure, with e->rc set. */
ppk_str ppk__otlp_valid_utf8(enc *e, ppk_str s);
/* Writes the request (pass 2), the tables interned. 0 or e->rc. */
int ppk__otlp_write(enc *e, const ppk_otlp_resource *res);

/* A dict's key bytes. */
static inline const void *ppk__otlp_key(const ppk__dict *d, uint32_t id) {
    const ppk__dent *x = &d->ents[id];
    return x->len <= PPK_DICT_INLINE ? (const void *)x->key.bytes : (const void *)x->key.ptr;
}

#endif
