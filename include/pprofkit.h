/*
 * pprofkit.h - turn stack samples into pprof profiles, with bounded memory.
 *
 * pprofkit is a C11 library for the native core of in-process profilers (Python, Ruby,
 * PHP or a native program profiling itself). A profiler takes stack samples, hands each
 * one to pprofkit, and every few seconds asks for the aggregated window as a pprof
 * profile (profile.proto, gzip or zstd compressed) that `go tool pprof` and profiling
 * backends read.
 *
 * This header is the only public one. It reads top to bottom:
 *   1. conventions: strings, errors, allocators;
 *   2. the simple path: a profile, add samples, encode, reset;
 *   3. advanced calls: endpoints, upscaling rules, statistics;
 *   4. concurrent recording: a thread-safe recorder, per-thread sample builders, exports
 *      that swap windows, a background exporter, sinks;
 *   5. uploads: sinks that send exports to Datadog and to Pyroscope / Grafana;
 *   6. reading: a strict decoder of pprof files (from pprofkit or any other producer);
 *   7. OpenTelemetry (experimental): a profile as an OTLP profiles request, and a sink
 *      that sends each export to an OpenTelemetry collector.
 *
 * The promises G1-G7 cited below (transient input, no dangling references, conservation,
 * bounded memory, flush never waits for I/O, fork safety, bad input is an error) are
 * stated in docs/contract.md.
 *
 * Conventions that hold for every function:
 *   - Strings are pointer + length (ppk_str), never NUL-terminated. A NULL pointer with
 *     a zero length is the empty string; NULL with a non-zero length is PPK_ENULL.
 *   - Everything passed in is transient: the caller may free or overwrite any string or
 *     array as soon as the call returns. pprofkit copies what it keeps.
 *   - Functions that can fail return 0 or a negative PPK_E* code; ppk_strerror()
 *     explains a code. A call that fails leaves the object as it was.
 *   - A ppk_profile is not thread safe: calls on one profile must not overlap. Different
 *     profiles are independent. A ppk_recorder is thread safe; each ppk_sample builder is
 *     used by one thread at a time. No function here is async-signal safe.
 *   - Invalid UTF-8 is repaired (each bad byte becomes U+FFFD) and strings longer than
 *     max_string_len are cut at a character boundary, wherever they come from (a frame,
 *     a label, a sample type of the config); both repairs are counted in the statistics.
 *     pprof requires valid UTF-8 strings. Strings are compared as stored, after repair
 *     and cut (two label keys that differ only beyond the cut are the same key).
 */
#ifndef PPROFKIT_H
#define PPROFKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PPK_VERSION_MAJOR 0
#define PPK_VERSION_MINOR 1
#define PPK_VERSION_PATCH 0
#define PPK_VERSION_STRING "0.1.0"

#if defined(PPK_STATIC)
#define PPK_API
#elif defined(__GNUC__)
#define PPK_API __attribute__((visibility("default")))
#else
#define PPK_API
#endif

/* ---------------------------------------------------------------------------------- */
/* 1. Conventions                                                                      */
/* ---------------------------------------------------------------------------------- */

/* A borrowed string: `len` bytes at `ptr`, not NUL-terminated. */
typedef struct ppk_str {
    const char *ptr;
    size_t len;
} ppk_str;

/* A ppk_str from a string literal, without strlen. Only a literal compiles: a pointer or
 * an array would give sizeof's length, not the string's (use ppk_cstr for those). */
#define PPK_STR(lit) ((ppk_str){"" lit "", sizeof(lit) - 1})

/* A ppk_str from a NUL-terminated string (NULL gives the empty string). */
PPK_API ppk_str ppk_cstr(const char *s);

/* Error codes: name, value, message. ppk_strerror() returns the message. */
#define PPK_ERROR_LIST(X)                                                                  \
    X(PPK_OK, 0, "success")                                                                \
    X(PPK_EINVAL, -1, "invalid argument")                                                  \
    X(PPK_ENOMEM, -2, "out of memory")                                                     \
    X(PPK_ENULL, -3, "NULL pointer with a non-zero length")                                \
    X(PPK_EVALUES, -4, "more values than sample types")                                    \
    X(PPK_EDUPLABEL, -5, "a label key appears more than once in one sample (keys compare " \
                         "after UTF-8 repair and the cut to max_string_len)")               \
    X(PPK_ESPANID, -6, "label \"local root span id\" must be numeric and non-zero")        \
    X(PPK_ERESERVED, -7, "label key \"end_timestamp_ns\" is reserved: set the timestamp")  \
    X(PPK_ETOOMANY, -8, "too many labels in one sample (see max_labels)")                  \
    X(PPK_EEMPTYKEY, -9, "a label key must not be empty")                                  \
    X(PPK_ECOMPRESS, -10, "compression failed")                                          \
    X(PPK_ESTATE, -11, "call out of order (e.g. push before start, flush twice)")          \
    X(PPK_ECLOSED, -12, "the recorder was freed or is shutting down")                     \
    X(PPK_ESYS, -13, "a system call failed (thread, file or directory; see errno)")       \
    X(PPK_ESTALE, -14, "unknown or evicted function id: intern the function again")       \
    X(PPK_EFULL, -15, "a table is full (the function dictionary: max_functions, "            \
                      "max_function_bytes; a recorder's sinks: PPK_MAX_SINKS)")            \
    X(PPK_ETIMEDOUT, -16, "timed out")                                                     \
    X(PPK_EFORMAT, -17, "malformed profile (see the message for the field and byte offset)") \
    X(PPK_ETOOBIG, -18, "the profile is over the reader's limits (max_decoded_bytes, "      \
                        "max_memory)")

#define PPK_ERROR_ENUM_(name, value, msg) name = (value),
enum ppk_error { PPK_ERROR_LIST(PPK_ERROR_ENUM_) };
#undef PPK_ERROR_ENUM_

/* A static, NUL-terminated message for any code (unknown codes included). */
PPK_API const char *ppk_strerror(int code);

/*
 * A memory allocator. `alloc` returns memory aligned for any type, or NULL on failure;
 * `free` receives the pointer and the size it was allocated with. Both may be called
 * from any thread that uses an object built with them. A zeroed ppk_allocator (alloc
 * and free NULL) selects malloc/free; one of the two without the other is refused
 * (PPK_EINVAL) wherever an allocator is taken.
 */
typedef struct ppk_allocator {
    void *(*alloc)(void *opaque, size_t size);
    void (*free)(void *opaque, void *ptr, size_t size);
    void *opaque;
} ppk_allocator;

/* Bytes returned by pprofkit, owned by the caller until ppk_bytes_free() (data is not the
 * start of an allocation: free it with nothing else). */
typedef struct ppk_bytes {
    uint8_t *data;
    size_t len;
} ppk_bytes;

/* Frees `b->data` and zeroes `b`. Accepts NULL and an already zeroed ppk_bytes. */
PPK_API void ppk_bytes_free(ppk_bytes *b);

/* Wall-clock time (CLOCK_REALTIME) in nanoseconds since the Unix epoch. */
PPK_API int64_t ppk_now_ns(void);

/* ---------------------------------------------------------------------------------- */
/* 2. The simple path: a single-threaded profile                                       */
/* ---------------------------------------------------------------------------------- */

#define PPK_MAX_SAMPLE_TYPES 16

/* A (type, unit) pair, e.g. ("cpu-time", "nanoseconds"). */
typedef struct ppk_value_type {
    ppk_str type;
    ppk_str unit;
} ppk_value_type;

/*
 * Everything a profile is created with. Start from ppk_profile_config_init(), which
 * sets the defaults given below, then set the sample types and the period.
 */
typedef struct ppk_profile_config {
    ppk_value_type sample_types[PPK_MAX_SAMPLE_TYPES]; /* 1..16 of them */
    size_t n_sample_types;
    ppk_value_type period_type; /* e.g. ("wall-time", "nanoseconds"); may be empty */
    int64_t period;             /* e.g. 10000000 for a 10 ms sampling interval */

    /* Limits (G7). Default 4096 bytes: longer strings are cut at a UTF-8 boundary. */
    size_t max_string_len;
    /* Default 512: deeper stacks keep their leaf-most max_frames - 1 frames and get one
     * synthetic root frame "<N frames omitted>". Minimum 2. */
    size_t max_frames;
    /* Default 32: a sample with more labels is refused with PPK_ETOOMANY. */
    size_t max_labels;

    /* Memory (G4; docs/memory.md explains how to size these).
     * memory_limit (default 64 MiB, at least 64 KiB): every byte the window allocates
     * (arena chunks, hash tables, sample storage) counts, and the window never holds
     * more than this plus one chunk and 4 KiB (the overflow records, once a window). Past it, detail degrades and totals are kept: new
     * strings become "[pprofkit: memory limit]", new stacks the one frame of that name,
     * new samples add their values to one overflow sample; each counted by reason, in
     * the statistics and as comments of the encoded profile. SIZE_MAX: no limit.
     * chunk_size (default 256 KiB; 4 KiB to 1 GiB, and at most memory_limit / 4): the
     * arena's unit of allocation.
     * keep_bytes (default 8 MiB): chunk memory a reset keeps for the next window (no
     * more than memory_limit leaves beside the window's tables); the rest goes back to
     * the operating system, as do hash tables and arrays that had
     * grown to over four times what the last window needed. Touching fresh pages costs
     * a page fault each (~10 us per 4 KiB on the machines this was measured on), so
     * memory is reused across windows and only the excess is returned. */
    size_t memory_limit;
    size_t chunk_size;
    size_t keep_bytes;

    /* Allocator for everything the profile allocates, including encoded output and
     * compression state. Zeroed: malloc/free. */
    ppk_allocator allocator;
} ppk_profile_config;

/* Fills `cfg` with defaults and no sample types. */
PPK_API void ppk_profile_config_init(ppk_profile_config *cfg);

/* A profile: one aggregation window. Opaque. */
typedef struct ppk_profile ppk_profile;

/*
 * Creates an empty profile whose window starts now. The config's strings are copied
 * (repaired and cut like every string, the repairs counted in the first window).
 * @return 0, PPK_EINVAL (no or more than 16 sample types, bad limits, an allocator with
 *         only one of alloc and free), PPK_ENULL, PPK_ENOMEM. On error *out is NULL.
 */
PPK_API int ppk_profile_create(const ppk_profile_config *cfg, ppk_profile **out);

/* Frees the profile and everything it owns. Accepts NULL. */
PPK_API void ppk_profile_free(ppk_profile *p);

/*
 * A binary mapping (an executable or shared library mapped into memory). Optional:
 * interpreted languages leave frames without one.
 */
typedef struct ppk_mapping {
    uint64_t memory_start;
    uint64_t memory_limit;
    uint64_t file_offset;
    ppk_str filename;
    ppk_str build_id;
} ppk_mapping;

/*
 * One stack frame. A frame whose name, system_name and filename are all empty and whose
 * start_line is 0 has no function (an unsymbolized native frame: address and mapping).
 */
typedef struct ppk_frame {
    ppk_str name;               /* function name, e.g. "pkg.mod.handler" */
    ppk_str system_name;        /* e.g. a mangled name; may be empty */
    ppk_str filename;           /* source file; may be empty */
    int64_t start_line;         /* first line of the function; 0 if unknown */
    int64_t line;               /* the line executing in this frame; 0 if unknown */
    uint64_t address;           /* instruction address; 0 if unknown */
    const ppk_mapping *mapping; /* NULL: no mapping */
} ppk_frame;

/*
 * A label: a key with either a string value or a number (with an optional unit).
 * Reserved keys: "end_timestamp_ns" (set ppk_sample_data.timestamp_ns instead) and
 * "local root span id", which must be numeric and non-zero.
 */
typedef struct ppk_label {
    ppk_str key;
    int is_num;       /* 0: str is the value; 1: num (and num_unit) is */
    ppk_str str;
    int64_t num;
    ppk_str num_unit; /* e.g. "bytes"; may be empty */
} ppk_label;

/* One sample as handed to ppk_profile_add(). */
typedef struct ppk_sample_data {
    const ppk_frame *frames; /* leaf (innermost) first */
    size_t n_frames;
    const ppk_label *labels; /* any order, each key at most once */
    size_t n_labels;
    /* In the config's order of sample types; those not given (n_values below the number
     * of types) are 0. More than the types: PPK_EVALUES. */
    const int64_t *values;
    size_t n_values;
    /* 0: aggregate with every sample of the same stack and labels. Positive: keep this
     * sample on its own, written with a numeric label "end_timestamp_ns" (nanoseconds
     * since the Unix epoch). Negative: PPK_EINVAL. */
    int64_t timestamp_ns;
} ppk_sample_data;

/*
 * Adds one sample. Samples with the same stack and the same labels (in any order) are
 * aggregated: their values are summed, saturating at INT64_MIN/INT64_MAX.
 * @return 0; PPK_EINVAL, PPK_ENULL, PPK_EVALUES, PPK_EDUPLABEL, PPK_ESPANID,
 *         PPK_ERESERVED, PPK_ETOOMANY, PPK_EEMPTYKEY for bad input; PPK_ENOMEM.
 *         After an error the profile is unchanged.
 */
PPK_API int ppk_profile_add(ppk_profile *p, const ppk_sample_data *s);

/* Output codecs. gzip is what `go tool pprof` and most backends expect. */
typedef enum ppk_codec {
    PPK_CODEC_GZIP = 0, /* default */
    PPK_CODEC_ZSTD = 1,
    PPK_CODEC_NONE = 2  /* the raw protobuf */
} ppk_codec;

typedef struct ppk_encode_options {
    ppk_codec codec;
    int level;        /* 0: the codec's default here (gzip 1, zstd 1) */
    int64_t start_ns; /* 0: when the window started (create or reset) */
    int64_t end_ns;   /* 0: now. duration_nanos = end_ns - start_ns */
} ppk_encode_options; /* negative times, or an end_ns given before the start: PPK_EINVAL */

/*
 * Encodes the window as a pprof profile into `out` (which the caller frees with
 * ppk_bytes_free). `opt` may be NULL for gzip, default level, start..now. The same
 * window and options give the same bytes. The window is not changed.
 * @return 0, PPK_EINVAL, PPK_ENOMEM, PPK_ECOMPRESS. On error *out is zeroed.
 */
PPK_API int ppk_profile_encode(ppk_profile *p, const ppk_encode_options *opt,
                               ppk_bytes *out);

/*
 * Empties the window for the next period: samples, strings, stacks, endpoints and
 * endpoint counts go; the config and upscaling rules stay. Keeps up to keep_bytes of
 * arena memory for reuse. `start_ns` is the new window's start (0 or negative: now).
 * Cannot fail.
 */
PPK_API void ppk_profile_reset(ppk_profile *p, int64_t start_ns);

/* ---------------------------------------------------------------------------------- */
/* 3. Advanced: endpoints, upscaling, statistics                                       */
/* ---------------------------------------------------------------------------------- */

/*
 * Registers the endpoint (e.g. "GET /users") of a local root span. At encode, every
 * sample whose numeric label "local root span id" equals `local_root_span_id` also gets
 * a string label "trace endpoint" with this value (unless it already has that key).
 * Registering the same id again replaces the endpoint. Cleared by reset.
 * @return 0, PPK_EINVAL (id 0), PPK_ENULL, PPK_ENOMEM.
 */
PPK_API int ppk_profile_set_endpoint(ppk_profile *p, uint64_t local_root_span_id,
                                     ppk_str endpoint);

/*
 * Adds `count` to the number of requests seen for `endpoint` in this window, for
 * uploaders that report endpoint counts (saturating). Cleared by reset.
 * @return 0, PPK_EINVAL (count < 0), PPK_ENULL, PPK_ENOMEM.
 */
PPK_API int ppk_profile_add_endpoint_count(ppk_profile *p, ppk_str endpoint, int64_t count);

/*
 * Calls fn(opaque, endpoint, count) for each endpoint count of the window, in the order
 * the endpoints were first counted. The endpoint string is valid during the call only.
 */
PPK_API void ppk_profile_foreach_endpoint_count(const ppk_profile *p,
                                                void (*fn)(void *opaque, ppk_str endpoint,
                                                           int64_t count),
                                                void *opaque);

/*
 * Upscaling rules turn sampled values into estimates of the real totals. They are
 * applied when encoding (the window keeps the raw values) and survive reset. A rule
 * applies to the samples that carry the string label (label_key, label_value), or to
 * every sample when label_key is empty; it scales the values at the listed indices.
 * Each value of a sample is scaled by at most one rule: the first added that matches.
 *
 * Proportional: values are multiplied by total_real / total_sampled (e.g. 1000 of
 * 10000 exceptions were sampled: 1000, 10000).
 * @return 0, PPK_EINVAL (index out of range, n_idx 0, total_sampled 0), PPK_ENULL,
 *         PPK_ENOMEM.
 */
PPK_API int ppk_profile_add_upscaling_proportional(ppk_profile *p, const size_t *value_idx,
                                                   size_t n_idx, ppk_str label_key,
                                                   ppk_str label_value,
                                                   uint64_t total_sampled,
                                                   uint64_t total_real);

/*
 * Poisson: for allocations sampled once every `sampling_distance` bytes on average.
 * With avg = values[sum_idx] / values[count_idx], values are multiplied by
 * 1 / (1 - exp(-avg / sampling_distance)). Samples with a zero count are not scaled.
 * @return 0, PPK_EINVAL (an index out of range, n_idx 0, sampling_distance 0),
 *         PPK_ENULL, PPK_ENOMEM.
 */
PPK_API int ppk_profile_add_upscaling_poisson(ppk_profile *p, const size_t *value_idx,
                                              size_t n_idx, ppk_str label_key,
                                              ppk_str label_value, size_t sum_idx,
                                              size_t count_idx, uint64_t sampling_distance);

/*
 * The counters of repairs (G7) and of degradations at the memory limit (G4) that
 * ppk_profile_stats and ppk_recorder_stats both hold, by reason: X(field, what it
 * counts), the text the profile's comments use. For code that handles every counter
 * alike (sums, reports, bindings).
 */
#define PPK_REPAIRS(X)                                                                     \
    X(strings_utf8_repaired, "strings with invalid UTF-8 repaired")                          \
    X(strings_truncated, "strings cut at max_string_len")                                    \
    X(stacks_truncated, "stacks cut at max_frames")                                          \
    X(values_saturated, "sums saturated at the int64 range")
#define PPK_DEGRADATIONS(X)                                                                \
    X(strings_dropped, "new strings replaced by \"[pprofkit: memory limit]\"")               \
    X(labels_dropped, "labels left out (memory limit)")                                      \
    X(label_sets_dropped, "samples with all labels left out (memory limit)")                 \
    X(stacks_dropped, "samples given the \"[pprofkit: memory limit]\" stack")                \
    X(samples_overflowed, "samples added to the overflow sample (memory limit)")             \
    X(timestamps_dropped, "timestamped samples aggregated (memory limit)")                   \
    X(endpoints_dropped, "endpoints not recorded (memory limit)")

/* What a profile holds and what it had to repair. Counters cover the current window
 * except the memory figures, which cover the profile's life (peak) and now (bytes). */
typedef struct ppk_profile_stats {
    uint64_t samples_added;        /* successful ppk_profile_add calls */
    uint64_t samples_aggregated;   /* distinct (stack, labels) samples */
    uint64_t samples_timestamped;  /* samples kept one by one */
    uint64_t strings;              /* string table entries, "" included */
    uint64_t string_bytes;         /* their bytes */
    uint64_t functions;
    uint64_t mappings;
    uint64_t locations;
    uint64_t stacks;
    uint64_t labels;               /* distinct (key, value) labels */
    uint64_t label_sets;
    uint64_t endpoints;
    /* Repairs, counted by reason (G7). */
    uint64_t strings_utf8_repaired;
    uint64_t strings_truncated;
    uint64_t stacks_truncated;
    uint64_t values_saturated;
    /* Degradations at the memory limit, by reason (G4). */
    uint64_t strings_dropped;      /* new strings replaced by the placeholder */
    uint64_t labels_dropped;       /* labels left out of their sample */
    uint64_t label_sets_dropped;   /* samples whose labels were all left out */
    uint64_t stacks_dropped;       /* samples given the "[pprofkit: memory limit]" stack */
    uint64_t samples_overflowed;   /* samples whose values went to the overflow sample */
    uint64_t timestamps_dropped;   /* timestamped samples aggregated instead */
    uint64_t endpoints_dropped;    /* endpoints and endpoint counts not recorded */
    /* Memory held from the allocator for the window (within memory_limit, plus at most
     * one chunk): now and the largest ever; and the encoder's reusable buffer and other
     * scratch, which is not the window's and not in the limit. */
    uint64_t memory_bytes;
    uint64_t memory_peak_bytes;
    uint64_t memory_limit;
    uint64_t scratch_bytes;
} ppk_profile_stats;

/* Fills `st`. */
PPK_API void ppk_profile_stats_get(const ppk_profile *p, ppk_profile_stats *st);

/* ---------------------------------------------------------------------------------- */
/* 4. Concurrent recording                                                             */
/* ---------------------------------------------------------------------------------- */
/*
 * A ppk_recorder owns two windows: the active one, which flushes fill, and a spare.
 * Samples are built over several calls with a ppk_sample builder (one per thread,
 * reused), which copies every string it is given into its own scratch memory, so
 * nothing it holds points into a window. ppk_sample_flush() takes the recorder's lock
 * only to insert the finished sample into the active window. An export takes the same
 * lock only to swap the active window with the spare, then encodes the retired window
 * outside the lock, resets it and keeps it as the next spare. So every flushed sample is
 * in exactly one exported profile, and a flush never waits for encoding or I/O.
 *
 * Typical use:
 *   ppk_recorder_create(&cfg, &rec);   // cfg.out_dir set: files every export_period_ms
 *   ppk_recorder_start(rec);           // the background exporter
 *   per thread: ppk_sample_create(rec, &s); then per sample:
 *       ppk_sample_start(s); ppk_sample_push_frame(s, ...)...; ppk_sample_push_label_str(
 *       s, ...); ppk_sample_set_value(s, 0, v); ppk_sample_flush(s);
 *   ppk_sample_free(s); ppk_recorder_free(rec);  // exports the last window
 *
 * Fork: after fork() the child's recorders are usable and empty (what was recorded
 * before the fork is the parent's to export; the child's first window starts at the
 * fork), no lock is held, and a started exporter
 * thread is started again in the child by its next flush or export. The parent goes on
 * unaffected. A window the parent was exporting at the moment of the fork is left to
 * the parent: the child neither exports nor frees it (at most one window of memory per
 * shard).
 * The child allocates (through the configured allocator), so that allocator must be
 * usable after a fork of a multi-threaded process, as glibc's malloc is. The malloc of
 * GCC 12's AddressSanitizer is not: a child can deadlock in it (tests/test_fork.c shows
 * a locked allocator that is).
 */

typedef struct ppk_recorder ppk_recorder;
typedef struct ppk_sample ppk_sample;

/* An endpoint and the number of requests counted for it in a window. */
typedef struct ppk_endpoint_count {
    ppk_str endpoint;
    int64_t count;
} ppk_endpoint_count;

/* One exported window. */
typedef struct ppk_export {
    ppk_bytes data;          /* the encoded (compressed) profile */
    ppk_codec codec;
    int64_t start_ns;        /* the window: [start_ns, end_ns) */
    int64_t end_ns;
    uint64_t seq;            /* 1 for the recorder's first export, then 2, 3, ... */
    ppk_profile_stats stats; /* of the window, taken before it was reset */
    double encode_ms;        /* encoding and compression time */
    /* The window's endpoint counts (ppk_recorder_add_endpoint_count), in the order the
     * endpoints were first counted; owned by the export (copied, freed with it). When
     * there was no memory for them, none (and endpoints_dropped in the statistics). */
    const ppk_endpoint_count *endpoint_counts;
    size_t n_endpoint_counts;
} ppk_export;

/* Frees e->data and the endpoint counts, and zeroes *e. Accepts NULL. */
PPK_API void ppk_export_free(ppk_export *e);

/*
 * A destination for exported windows. write() is called by the exporting thread (the
 * background exporter, or the caller of ppk_recorder_export(r, NULL)), never with the
 * recorder's lock held, so a slow sink delays the next export but never a flush. It
 * must not keep `e` or its bytes after returning (copy them). It returns 0 or a negative
 * code; failures are counted in the statistics. destroy (may be NULL) is called once,
 * when the recorder is freed. A sink must not call back into its recorder (an export
 * from write() waits for itself forever), and must not fork() without exec.
 */
typedef struct ppk_sink {
    int (*write)(void *opaque, const ppk_export *e);
    void (*destroy)(void *opaque);
    void *opaque;
} ppk_sink;

/*
 * A file sink: each export is written to DIR/NAME.PID.SEQ.pb.gz (.pb.zst for zstd, .pb
 * for none; SEQ is the export's seq), first under a temporary name in DIR, then renamed,
 * so a reader never sees a partial file. An existing file is never replaced (another
 * recorder with the same DIR and NAME, or an earlier process with the same pid, as in
 * containers): the export takes the first free name of NAME.PID.SEQ-2.pb.gz, -3, ...
 * The file is synced before the rename and DIR after it, so that after a power loss a
 * profile's name never holds a partial file. DIR must be an existing directory this
 * process can write to (checked here: PPK_ESYS, errno ENOENT, ENOTDIR or EACCES); a
 * relative DIR is the one under the working directory now (the sink keeps it joined to
 * it: a later chdir does not move the files). The strings are copied.
 * @return 0, PPK_EINVAL, PPK_ENULL, PPK_ENOMEM, PPK_ESYS.
 */
PPK_API int ppk_sink_file(ppk_str dir, ppk_str name, ppk_sink *out);

typedef struct ppk_recorder_config {
    ppk_profile_config profile; /* sample types, period, limits, allocator (thread safe) */
    ppk_codec codec;            /* of exports; default gzip */
    int level;                  /* 0: the codec's default */
    int64_t export_period_ms;   /* background exporter period; default 60000 */
    /* When out_dir is not empty, a file sink (ppk_sink_file(out_dir, name), allocating
     * through profile.allocator) is added: out_dir must be a writable directory (else
     * PPK_ESYS). name defaults to "profile". */
    ppk_str out_dir;
    ppk_str name;
    /* A builder's scratch memory: it keeps builder_keep_bytes between samples (default
     * 64 KiB; a sample that needed more gives the excess back when it ends) and never
     * holds more than builder_max_bytes (default 1 MiB, at least 4 KiB): frames that do
     * not fit are counted in the "<N frames omitted>" frame, a label that does not fit
     * gets PPK_ENOMEM (while it grows, it also holds the buffer it replaces, a moment).
     * Besides, a builder holds an index of 24 bytes per profile max_frames and
     * max_labels (13,056 bytes with their defaults) and about 400 bytes of its own. */
    size_t builder_keep_bytes;
    size_t builder_max_bytes;
    /* Windows flushed into in parallel (1 to 64; 0 means 1). Each shard has its own lock
     * and its own two windows (so memory_limit applies to each); builders are spread
     * over the shards round robin when they are created, and an export encodes every
     * shard's window into one profile. With one shard, threads flushing at the same
     * time wait for each other's insert; set it to the number of threads that flush
     * concurrently and often. Default 1. */
    size_t shards;
    /* The function dictionary (ppk_recorder_intern_function): at most max_functions
     * entries (default 65,536; at most 16,777,215) holding at most max_function_bytes
     * (default 8 MiB: their strings plus 64 bytes each). A function no sample pushed
     * during function_ttl_exports exports in a row (default 4, at least 1) is evicted at
     * the export that ends that stretch. */
    size_t max_functions;
    size_t max_function_bytes;
    uint32_t function_ttl_exports;
    /* Endpoint registrations (ppk_recorder_set_endpoint) are the recorder's, kept across
     * windows: at most max_endpoints (default 16,384) holding at most max_endpoint_bytes
     * (default 1 MiB: the endpoints plus 32 bytes each); past them a registration is
     * dropped and counted (endpoints_dropped). One that no sample carried (by its
     * "local root span id") and that was not set again during endpoint_ttl_exports
     * exports in a row (default 4, at least 1) is evicted at the export that ends that
     * stretch. */
    size_t max_endpoints;
    size_t max_endpoint_bytes;
    uint32_t endpoint_ttl_exports;
} ppk_recorder_config;

/* Defaults, as documented above, and no sample types. */
PPK_API void ppk_recorder_config_init(ppk_recorder_config *cfg);

/*
 * Creates a recorder with an empty active window. Does not start a thread.
 * @return 0, PPK_EINVAL (see ppk_profile_create), PPK_ENULL, PPK_ENOMEM, PPK_ESYS.
 */
PPK_API int ppk_recorder_create(const ppk_recorder_config *cfg, ppk_recorder **out);

/*
 * Stops the background exporter if it runs (exporting the last window to the sinks),
 * then frees the recorder, its windows and its sinks. Builders of this recorder are not
 * freed: they must be freed by their owners, and any other call on them returns
 * PPK_ECLOSED. Must not run concurrently with calls on the recorder or its builders.
 * Accepts NULL. Blocks while the last export runs, then while its upload sinks shut down:
 * all at once, so that takes the longest of their shutdown_timeout_ms (and the ends of
 * the transfers it cancels), not their sum.
 */
PPK_API void ppk_recorder_free(ppk_recorder *r);

/* The most sinks a recorder takes. */
#define PPK_MAX_SINKS 16

/* Adds a sink (copied). Thread safe; takes effect from the next export.
 * @return 0, PPK_EINVAL (NULL recorder or sink, no write function), PPK_EFULL (the
 *         recorder has PPK_MAX_SINKS sinks). */
PPK_API int ppk_recorder_add_sink(ppk_recorder *r, const ppk_sink *sink);

/*
 * Exports now: swaps the windows (O(1) under the lock), encodes the retired window,
 * resets it. With `out`, the export is returned to the caller (ppk_export_free it) and
 * the sinks are not called; with out NULL, it is handed to every sink, and when the
 * recorder has no sink it is not encoded: its samples are dropped, counted in
 * samples_dropped_no_sink (the background exporter does the same: a caller that pulls
 * exports does not start it; see ppk_recorder_seal for the last window). Exports are
 * serialized: a second caller waits for the first. Thread safe; blocks for the encode
 * (and the sinks).
 * @return 0, PPK_EINVAL, PPK_ECLOSED; PPK_ENOMEM or PPK_ECOMPRESS when encoding failed
 * (the window's samples are then lost, and counted in samples_lost_export), or PPK_ENOMEM
 * when no fresh window could be made after a fork (the samples stay in the active
 * window for the next export).
 */
PPK_API int ppk_recorder_export(ppk_recorder *r, ppk_export *out);

/* Starts the background exporter thread: an export to the sinks every
 * export_period_ms. Starting a started recorder does nothing. The library's threads
 * (this one, the upload sinks') run with every signal blocked but those a fault raises:
 * a signal sent to the process reaches one of the program's threads.
 * @return 0, PPK_ESYS (thread creation failed), PPK_ECLOSED. */
PPK_API int ppk_recorder_start(ppk_recorder *r);

/* Stops the background exporter: it exports the last window, then the thread is joined.
 * Blocks for that export. Stopping a stopped recorder does nothing (nor waits). Thread
 * safe. A recorder without sinks drops its windows, counted (see ppk_recorder_export). */
PPK_API void ppk_recorder_stop(ppk_recorder *r);

/*
 * Seals the recorder: it ends recording, and only that. From now on ppk_sample_flush returns PPK_ECLOSED (the
 * sample is dropped and counted in samples_dropped_closed) and ppk_sample_create too,
 * while exports, the background exporter, statistics and sinks go on. Every sample
 * accepted before is then in the active window or already exported, so a caller that
 * pulls exports with ppk_recorder_export(r, &e) takes the last window after this call
 * and before ppk_recorder_free (which, for a recorder without sinks, drops what the
 * active window holds). Idempotent; thread safe; accepts NULL.
 */
PPK_API void ppk_recorder_seal(ppk_recorder *r);

/* Registers the endpoint of a local root span (see ppk_profile_set_endpoint) for this and
 * later windows, as long as samples carry it (max_endpoints, endpoint_ttl_exports); or
 * adds to the active window's count of an endpoint. Thread safe.
 * @return 0, PPK_EINVAL (span id 0, count < 0), PPK_ENULL, PPK_ECLOSED, PPK_ENOMEM. */
PPK_API int ppk_recorder_set_endpoint(ppk_recorder *r, uint64_t local_root_span_id,
                                      ppk_str endpoint);
PPK_API int ppk_recorder_add_endpoint_count(ppk_recorder *r, ppk_str endpoint,
                                            int64_t count);

typedef struct ppk_recorder_stats {
    uint64_t samples_flushed;      /* flushes accepted into a window */
    uint64_t samples_exported;     /* of those, in windows exported since */
    uint64_t windows_exported;
    uint64_t strings;              /* strings in the active window */
    uint64_t window_bytes;         /* memory of the active window now */
    uint64_t window_bytes_peak;    /* the largest any window has held */
    double export_ms_last;         /* encode + compress time of the last export */
    double export_ms_max;
    double export_ms_total;
    /* Repairs and degradations, by reason (see ppk_profile_stats), over every window
     * exported and the active one. */
    uint64_t strings_utf8_repaired;
    uint64_t strings_truncated;
    uint64_t stacks_truncated;
    uint64_t values_saturated;
    uint64_t strings_dropped;
    uint64_t labels_dropped;
    uint64_t label_sets_dropped;
    uint64_t stacks_dropped;
    uint64_t samples_overflowed;
    uint64_t timestamps_dropped;
    uint64_t endpoints_dropped;
    uint64_t samples_dropped_nomem;   /* flushes refused for lack of memory */
    uint64_t samples_dropped_closed;  /* flushes after the recorder closed */
    uint64_t samples_lost_export;     /* in windows whose encoding failed */
    uint64_t export_failures;         /* encodings that failed */
    uint64_t sink_failures;           /* sink writes that returned an error */
    uint64_t samples_lost_sink;       /* the samples of those windows, once per failed sink */
    uint64_t samples_dropped_no_sink; /* in windows exported to the sinks, with none */
    /* The function dictionary: entries and bytes now, evictions and refused interns
     * (PPK_EFULL) so far, and flushes refused with PPK_ESTALE (the sample is dropped). */
    uint64_t functions;
    uint64_t function_bytes;
    uint64_t functions_evicted;
    uint64_t functions_refused;
    uint64_t samples_dropped_stale;
    uint64_t endpoints; /* registrations kept now (endpoints_dropped: those refused too) */
} ppk_recorder_stats;

/* Fills `st`. Thread safe; the figures are each exact, taken under the lock. */
PPK_API void ppk_recorder_stats_get(ppk_recorder *r, ppk_recorder_stats *st);

/*
 * A sample builder, owned by one thread at a time (any thread, not necessarily the same
 * each time). Reusable: start, push, set, then flush or drop; again. Every string pushed
 * is copied (and repaired or cut like ppk_profile_add does) at push time into the
 * builder's scratch memory. Calls out of order return PPK_ESTATE; calls after the
 * recorder was freed, PPK_ECLOSED. A failed push leaves the sample as it was.
 * @return of create: 0, PPK_EINVAL, PPK_ENOMEM, PPK_ECLOSED.
 */
PPK_API int ppk_sample_create(ppk_recorder *r, ppk_sample **out);
/* Frees a builder (an unfinished sample is dropped). Accepts NULL. */
PPK_API void ppk_sample_free(ppk_sample *s);

/* Begins a sample: no frames, no labels, every value 0, no timestamp. PPK_ESTATE if a
 * sample is already begun. */
PPK_API int ppk_sample_start(ppk_sample *s);

/* Pushes the next frame, leaf first. Frames beyond max_frames are counted and replaced
 * by one "<N frames omitted>" frame at flush. The line comes before the address, as in
 * ppk_frame and in every push function. */
PPK_API int ppk_sample_push_frame(ppk_sample *s, ppk_str name, ppk_str filename,
                                  int64_t line, uint64_t address);
/* The same with every field of ppk_frame (system name, start line, mapping). */
PPK_API int ppk_sample_push_frame_ex(ppk_sample *s, const ppk_frame *f);

/* Counts n more frames, root side of those pushed, that the profiler did not push, in
 * the sample's "<N frames omitted>" frame, as frames pushed past max_frames are (with
 * max_frames frames pushed, the last of them is counted in it too, to make room). A
 * profiler that walks a deep stack pushes its first max_frames frames and counts the
 * rest instead of reading them: the sample is the one all its frames would make. Frames
 * pushed after it are counted too. n 0 changes nothing.
 * @return 0, PPK_EINVAL, PPK_ESTATE, PPK_ECLOSED. */
PPK_API int ppk_sample_omit_frames(ppk_sample *s, uint64_t n);

/*
 * The function dictionary: a profiler that meets the same functions sample after sample
 * (a code object, a method, a symbolized address) names each one once and then pushes
 * frames by id. A pushed id costs the same whatever the strings' length: the builder
 * stores 16 bytes (32 for a line outside 0..2^32-1 or an address), and the window
 * resolves the id to the function's strings only the first time the window sees the
 * frame.
 *
 * ppk_recorder_intern_function() copies the function (its strings repaired and cut as
 * ppk_profile_add does) into the recorder's dictionary, shared by its builders and
 * shards, and returns its id; interning the same function again returns the same id
 * while it lives. An id is never reused for another function: a function evicted (unused
 * for function_ttl_exports exports) or from another recorder (any live one; a freed
 * one's until 65,535 more recorders were created) is refused with PPK_ESTALE
 * by ppk_sample_push_frame_id(), or by ppk_sample_flush() (the sample is dropped and
 * counted in samples_dropped_stale) when eviction happened between that push and the
 * flush, and for the ids of ppk_sample_push_frames_id(), which the window checks when
 * it first meets each frame. On PPK_ESTALE intern the function again and use the new
 * id (after a refused flush: push the sample's frames one by one, which finds the
 * stale ones, and flush again).
 * The dictionary is bounded (max_functions, max_function_bytes): past either bound,
 * interning a new function returns PPK_EFULL (counted in functions_refused) and the
 * caller pushes that frame with its strings; entries come free as they are evicted.
 * Thread safe: intern from any thread; a push by id takes no lock.
 * Fork: the child keeps the dictionary; its ids stay valid there.
 */
typedef uint64_t ppk_function_id;

typedef struct ppk_function {
    ppk_str name;
    ppk_str system_name;
    ppk_str filename;
    int64_t start_line;
} ppk_function;

/* @return 0, PPK_EINVAL (NULL recorder, function or id), PPK_ENULL, PPK_EFULL,
 *         PPK_ENOMEM. On error *id is 0, which is never an id. */
PPK_API int ppk_recorder_intern_function(ppk_recorder *r, const ppk_function *f,
                                         ppk_function_id *id);

/* Pushes the next frame, leaf first, as the function `id` at `line` (and `address`).
 * @return 0, PPK_EINVAL, PPK_ESTATE, PPK_ECLOSED, PPK_ESTALE, PPK_ENOMEM. */
PPK_API int ppk_sample_push_frame_id(ppk_sample *s, ppk_function_id id, int64_t line);
PPK_API int ppk_sample_push_frame_id_addr(ppk_sample *s, ppk_function_id id,
                                          int64_t line, uint64_t address);

/* A frame by function id, for ppk_sample_push_frames_id(). */
typedef struct ppk_id_frame {
    ppk_function_id function;
    int64_t line;
} ppk_id_frame;

/* Pushes n frames, leaf first, as n calls of ppk_sample_push_frame_id() would (frames
 * past max_frames are cut the same way), with one check of the sample's state: what a
 * profiler that walked a whole stack into an array calls. The ids are not checked
 * here: the flush refuses the sample with PPK_ESTALE if one is stale (the window checks
 * an id, and marks its function used, when it first meets the frame, and compares
 * records after that). All or nothing: on error the sample is as it was.
 * @return 0, PPK_EINVAL, PPK_ENULL (frames NULL with n > 0), PPK_ESTATE, PPK_ECLOSED,
 *         PPK_ENOMEM. */
PPK_API int ppk_sample_push_frames_id(ppk_sample *s, const ppk_id_frame *frames, size_t n);

/* Pushes a label. PPK_EDUPLABEL if the key was pushed already in this sample,
 * PPK_ETOOMANY past max_labels, and the checks of ppk_profile_add. */
PPK_API int ppk_sample_push_label_str(ppk_sample *s, ppk_str key, ppk_str value);
PPK_API int ppk_sample_push_label_num(ppk_sample *s, ppk_str key, int64_t num,
                                      ppk_str unit);

/*
 * A prepared label: a label validated, fitted (repaired and cut to max_string_len) and
 * serialized once, for a profiler that pushes the same label sample after sample (a
 * thread's name, a task's name): pushing it costs a copy of its bytes, whatever its
 * length, where ppk_sample_push_label_str checks, copies and hashes the strings each
 * time. The sample is the one the strings would make.
 *
 * ppk_label_prepare() makes one for builders of recorders with s's max_string_len (it
 * reads that and s's allocator, whatever s's state); it holds a copy of the strings and
 * no reference to s or its recorder, so it may outlive both, but not the recorder's
 * allocator (profile.allocator), which allocated it and frees it. Pushing it into
 * several builders at once, from several threads, is safe: nothing changes it until
 * ppk_prepared_label_free(), which the caller must not call while a push of it runs.
 * A push needs only the record's own bytes in the builder: near builder_max_bytes it
 * can fit where a push by strings, which reserves room for their longest repair, does
 * not (PPK_ENOMEM).
 * @return 0, PPK_EINVAL (NULL s, l or out), the checks of ppk_sample_push_label_str
 *         (PPK_ENULL, PPK_EEMPTYKEY, PPK_ERESERVED, PPK_ESPANID), PPK_ENOMEM.
 *         On error *out is NULL.
 */
typedef struct ppk_prepared_label ppk_prepared_label;

PPK_API int ppk_label_prepare(const ppk_sample *s, const ppk_label *l,
                              ppk_prepared_label **out);
/* Accepts NULL. */
PPK_API void ppk_prepared_label_free(ppk_prepared_label *pl);

/* Pushes a prepared label, as pushing its label would (but for room, above).
 * @return 0, PPK_EINVAL (NULL s or pl, or pl prepared for another max_string_len),
 *         PPK_ESTATE, PPK_ECLOSED, PPK_ETOOMANY, PPK_EDUPLABEL, PPK_ENOMEM. */
PPK_API int ppk_sample_push_prepared_label(ppk_sample *s, const ppk_prepared_label *pl);

/* Sets value `idx` (the sample type's index), or the first n values (values not set are
 * 0, as in ppk_sample_data). PPK_EINVAL for an index out of range, PPK_EVALUES for n
 * above the number of sample types. */
PPK_API int ppk_sample_set_value(ppk_sample *s, size_t idx, int64_t value);
PPK_API int ppk_sample_set_values(ppk_sample *s, const int64_t *values, size_t n);

/* Makes the sample a timestamped one (see ppk_sample_data.timestamp_ns); 0 undoes it,
 * negative is PPK_EINVAL. */
PPK_API int ppk_sample_set_timestamp(ppk_sample *s, int64_t timestamp_ns);

/*
 * Inserts the sample into the recorder's active window (under the recorder's lock,
 * for the in-memory insert only) and ends it; the builder is then ready for the next
 * ppk_sample_start(). On PPK_ENOMEM or PPK_ECLOSED the sample is dropped and counted.
 * @return 0, PPK_ESTATE (no sample begun), PPK_ENOMEM, PPK_ECLOSED, PPK_ESTALE (a
 * function id pushed was evicted since; the sample is dropped and counted).
 */
PPK_API int ppk_sample_flush(ppk_sample *s);

/* Ends the sample without recording it. PPK_ESTATE if none was begun. */
PPK_API int ppk_sample_drop(ppk_sample *s);

/* ---------------------------------------------------------------------------------- */
/* 5. Uploads: Datadog (agent and agentless intake) and Pyroscope / Grafana            */
/* ---------------------------------------------------------------------------------- */
/*
 * Upload sinks send each export to a profiling backend over HTTP (libcurl). Their
 * write() never waits for the network: it copies the export (bytes, times, endpoint
 * counts) into a bounded queue and returns. One uploader thread per sink, started by the
 * first write, owns one curl handle and sends what is queued. (If the thread cannot be
 * created, the export stays queued and write() returns 0: each later write or
 * ppk_sink_upload_flush tries again, and destroy drops what is still queued, counted in
 * dropped_shutdown.) When the queue is full the oldest export is dropped. Every transfer
 * has a connect and a total timeout; a failed upload (network error, timeout, HTTP 408,
 * 429 or 5xx; for OTLP, section 7) is retried once after a backoff (retry_backoff_ms, or
 * the answer's Retry-After when that is longer, at most 60 s), then dropped; other HTTP
 * errors (e.g. 413) are dropped at once.
 * Everything dropped is counted, by reason, in ppk_upload_stats.
 *
 * libcurl: the first upload sink created calls curl_global_init(), which is not thread
 * safe. Create upload sinks before the process starts other threads that may use libcurl
 * (or call curl_global_init() yourself first). curl_global_cleanup() is never called.
 *
 * Fork: before fork() an in-flight transfer is aborted, its socket shut down (the prepare
 * handler waits for it to end, at most fork_timeout_ms; milliseconds once the socket is
 * connected). The parent then sends it again, as if nothing happened; a transfer aborted
 * by forks four times in a row is dropped (dropped_failed, fail_other). In the child the
 * sink is usable and empty: the parent's queued exports are the parent's to send; the
 * uploader thread starts again on the child's first write.
 *
 * Lifetime: the recorder destroys its sinks when it is freed. Destroying an upload sink
 * waits up to shutdown_timeout_ms for the queue to drain, then cancels what is left; a
 * recorder shuts all its upload sinks down at once (ppk_recorder_free).
 */

/* Queue, timeouts and memory of one upload sink. */
typedef struct ppk_upload_config {
    size_t queue_len;             /* exports waiting to be sent; default 2 */
    int64_t connect_timeout_ms;   /* per transfer; default 3000 */
    int64_t timeout_ms;           /* whole transfer; default 10000 */
    int64_t retry_backoff_ms;     /* before the single retry; default 1000 */
    int64_t shutdown_timeout_ms;  /* destroy waits this long to drain; default 2000 */
    int64_t fork_timeout_ms;      /* fork waits this long for an abort; default 2000 */
    ppk_allocator allocator;      /* thread safe; zeroed: malloc/free */
} ppk_upload_config;

/* Defaults, as documented above. */
PPK_API void ppk_upload_config_init(ppk_upload_config *cfg);

/* What an upload sink did. Counters cover its life (in a forked child, since the fork). */
typedef struct ppk_upload_stats {
    uint64_t queued;              /* exports handed to write(); once idle, queued equals
                                   * sent plus every dropped_* counter */
    uint64_t sent;                /* uploads the server accepted (HTTP 2xx) */
    uint64_t bytes_sent;          /* request bodies of those */
    uint64_t attempts;            /* transfers started (retries and fork restarts too) */
    uint64_t retries;             /* second attempts after a failure */
    uint64_t fork_restarts;       /* transfers aborted for a fork and sent again (at most
                                   * three times in a row, then dropped as failed) */
    /* Exports dropped, by reason; each export is counted once. */
    uint64_t dropped_queue_full;  /* the oldest, when a write found the queue full */
    uint64_t dropped_failed;      /* failed (after the retry, when one was allowed) */
    uint64_t dropped_shutdown;    /* queued or in flight when destroy gave up waiting */
    uint64_t dropped_invalid;     /* could not be sent (e.g. a codec the backend rejects) */
    uint64_t dropped_nomem;       /* no memory to queue or to build the request */
    /* Failed attempts, by reason. */
    uint64_t fail_connect;        /* connection refused, unreachable, DNS */
    uint64_t fail_timeout;        /* connect or total timeout */
    uint64_t fail_http_4xx;
    uint64_t fail_http_5xx;
    uint64_t fail_other;          /* other transport errors */
    /* OTLP: 2xx answers that said part of the data was rejected, and the profiles they
     * said were rejected. */
    uint64_t partial_successes;
    uint64_t rejected_profiles;
    int last_http_status;         /* of the last finished attempt; 0 if none */
    /* Memory: the queue now and at its fullest; bytes held by the sink (its queue,
     * request being sent included) now and at the peak. */
    uint64_t queue_len;
    uint64_t queue_peak;
    uint64_t memory_bytes;
    uint64_t memory_peak_bytes;
} ppk_upload_stats;

/*
 * Fills `st` with the statistics of an upload sink (one made by ppk_sink_datadog,
 * ppk_sink_pyroscope or ppk_sink_otlp). Thread safe. The sink must not have been destroyed (once added to
 * a recorder: before ppk_recorder_free).
 * @return 0, PPK_EINVAL (NULL, or not an upload sink).
 */
PPK_API int ppk_sink_upload_stats(const ppk_sink *sink, ppk_upload_stats *st);

/*
 * Waits until the sink's queue is empty and nothing is in flight, at most timeout_ms.
 * Starts the uploader thread if exports are queued and it is not running (its creation
 * failed before). Blocks; thread safe; for tests and orderly shutdown, never needed for
 * correctness.
 * @return 0 when idle, PPK_ETIMEDOUT, PPK_ESYS (exports are queued and the uploader
 * thread cannot be created; they stay queued), PPK_EINVAL.
 */
PPK_API int ppk_sink_upload_flush(const ppk_sink *sink, int64_t timeout_ms);

/*
 * Stops the sink as its destroy does (waits up to shutdown_timeout_ms for the queue to
 * drain, then cancels what is left, counted in dropped_shutdown, and joins the thread),
 * but keeps it allocated so that its statistics can still be read. Later writes are
 * refused (PPK_ECLOSED) and counted. Blocks; thread safe; destroy still frees the sink.
 * Calls that overlap (another shutdown, or destroy, e.g. from ppk_recorder_free) stop the
 * sink once: the first does it and the others wait until it is done. Destroy waits for
 * shutdowns in progress to return; a shutdown called once destroy has unlisted the sink
 * (or after it) does nothing and returns PPK_ECLOSED.
 * @return 0, PPK_EINVAL (not an upload sink), PPK_ECLOSED (destroyed).
 */
PPK_API int ppk_sink_upload_shutdown(const ppk_sink *sink);

/*
 * ppk_sink_upload_shutdown of n sinks at once: their drains run together, so this takes
 * the longest of their shutdown_timeout_ms, not their sum. Sinks that are not upload
 * sinks, or destroyed, are skipped.
 * @return 0, PPK_ENULL (sinks NULL and n > 0).
 */
PPK_API int ppk_sinks_upload_shutdown(const ppk_sink *sinks, size_t n);

/* ---- Datadog ------------------------------------------------------------------------ */
/*
 * Each export becomes one multipart/form-data POST: a part "event" (filename event.json,
 * application/json) with attachments ["profile.pprof"], tags_profiler, start and end
 * (RFC 3339, UTC, nanoseconds), family, version "4", endpoint_counts, internal and info;
 * then the part "profile.pprof" holding the export's compressed bytes. Headers:
 * DD-EVP-ORIGIN, DD-EVP-ORIGIN-VERSION, User-Agent, DD-API-KEY when agentless, and in a
 * container (an id in /proc/self/cgroup, read when the sink is created)
 * Datadog-Container-ID and Datadog-Entity-ID, by which the agent adds container tags.
 * tags_profiler holds service, env, version, host, runtime-id, language,
 * profiler_version, process_id and the user's tags.
 *
 * Agent (the default): POST agent_url + "/profiling/v1/input"; agent_url is
 * http://host:port, https://host:port or unix:///path/to/socket (the socket of the agent;
 * the request then says Host: localhost).
 * Agentless (agentless = 1, api_key required): POST
 * https://intake.profile.<site>/api/v2/profile (or intake_url) with DD-API-KEY.
 */
typedef struct ppk_datadog_config {
    ppk_str agent_url;        /* empty: http://<agent_host>:<agent_port> */
    ppk_str agent_host;       /* used when agent_url is empty; empty: localhost */
    int agent_port;           /* used when agent_url is empty; 0: 8126 */
    int agentless;            /* 1: send to the intake with api_key */
    ppk_str api_key;
    ppk_str site;             /* empty: datadoghq.com */
    ppk_str intake_url;       /* empty: https://intake.profile.<site>/api/v2/profile */
    ppk_str service;          /* empty: the program's name */
    ppk_str env;              /* empty: no env tag */
    ppk_str version;          /* empty: no version tag */
    ppk_str host;             /* empty: gethostname() */
    ppk_str runtime_id;       /* empty: a random UUID, new in each forked child */
    ppk_str tags;             /* DD_TAGS syntax: key:value, separated by commas or spaces */
    ppk_str family;           /* empty: "native"; e.g. "python", "ruby" */
    ppk_str language;         /* empty: the family */
    ppk_str profiler_name;    /* DD-EVP-ORIGIN; empty: "pprofkit" */
    ppk_str profiler_version; /* DD-EVP-ORIGIN-VERSION; empty: PPK_VERSION_STRING */
    ppk_upload_config upload;
} ppk_datadog_config;

/* Defaults (all strings empty) and ppk_upload_config_init. */
PPK_API void ppk_datadog_config_init(ppk_datadog_config *cfg);

/*
 * Reads the variables Datadog's tracers read into `cfg`, leaving fields alone whose
 * variable is unset or empty: DD_TRACE_AGENT_URL (which wins), else DD_AGENT_HOST and
 * DD_TRACE_AGENT_PORT; DD_SERVICE, DD_ENV, DD_VERSION, DD_TAGS, DD_API_KEY, DD_SITE,
 * DD_PROFILING_AGENTLESS (true/false/1/0). The strings point into the environment: create
 * the sink before the environment changes. Not thread safe with setenv().
 * @return 0, or PPK_EINVAL with a message naming the malformed variable in `err`
 *         (err may be NULL; the message is cut to err_len - 1 bytes).
 */
PPK_API int ppk_datadog_config_from_env(ppk_datadog_config *cfg, char *err, size_t err_len);

/*
 * Creates a Datadog upload sink (add it with ppk_recorder_add_sink). Strings are copied
 * and must be UTF-8 (they go into event.json). The export's codec should be gzip or zstd
 * (both accepted by the intake).
 * @return 0; PPK_ENULL (a string NULL with a non-zero length, even one the mode does not
 *         use) or PPK_EINVAL, with a message naming the bad field in `err`; PPK_ENOMEM.
 */
PPK_API int ppk_sink_datadog(const ppk_datadog_config *cfg, ppk_sink *out, char *err,
                             size_t err_len);

/* ---- Pyroscope / Grafana --------------------------------------------------------------- */
/*
 * Each export becomes POST <server_address>/ingest?name=<app>{tags}&from=<unix s>
 * &until=<unix s>&format=pprof&sampleRate=<Hz>&spyName=<name>, the body being the
 * export's bytes (gzip or uncompressed; the server does not read zstd, so zstd exports
 * are dropped and counted as invalid). Optional HTTP basic auth and X-Scope-OrgID.
 * Grafana Pyroscope refuses a whole profile with a '-' in a sample type or a
 * string-valued label whose key is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, '.' read
 * as '_'): the sink then sends the profile with those renamed, '_' for '-' in the types
 * ("wall-time" -> "wall_time", the period type too), '_' for each other byte of such a
 * key ("thread name" -> "thread_name", "9x" -> "_9x"), and a string label's value over
 * 2048 bytes (the server's default limit) cut there at a character's start; the rest is
 * unchanged. This costs
 * the uploader thread a decompression of each export, and a compression of those it
 * renames.
 */
typedef struct ppk_pyroscope_config {
    ppk_str server_address;   /* empty: http://localhost:4040 */
    ppk_str application_name; /* required (here or PYROSCOPE_APPLICATION_NAME);
                                 A-Z a-z 0-9 _ . - only, as the server takes */
    ppk_str tags;             /* key=value, separated by commas; keys [A-Za-z0-9_.], not
                                 starting with a digit */
    ppk_str spy_name;         /* empty: "pprofkit" */
    int64_t sample_rate;      /* samples per second; 0: 100 */
    ppk_str basic_auth_user;  /* HTTP basic auth (Grafana Cloud: the stack's user id);
                                 empty: none */
    ppk_str basic_auth_password;
    ppk_str auth_token;       /* "Authorization: Bearer <token>"; empty: none. Basic auth
                                 instead when there is a user and a password, or a user
                                 and no token */
    ppk_str tenant_id;        /* X-Scope-OrgID; empty: none */
    ppk_upload_config upload;
} ppk_pyroscope_config;

PPK_API void ppk_pyroscope_config_init(ppk_pyroscope_config *cfg);

/* Reads PYROSCOPE_SERVER_ADDRESS, PYROSCOPE_APPLICATION_NAME,
 * PYROSCOPE_BASIC_AUTH_USER, PYROSCOPE_BASIC_AUTH_PASSWORD, PYROSCOPE_AUTH_TOKEN and
 * PYROSCOPE_TENANT_ID (the names Pyroscope's own clients read) like
 * ppk_datadog_config_from_env reads its variables. */
PPK_API int ppk_pyroscope_config_from_env(ppk_pyroscope_config *cfg, char *err,
                                          size_t err_len);

/* Creates a Pyroscope upload sink. As ppk_sink_datadog. */
PPK_API int ppk_sink_pyroscope(const ppk_pyroscope_config *cfg, ppk_sink *out, char *err,
                               size_t err_len);

/* ---------------------------------------------------------------------------------- */
/* 6. Reading profiles                                                                 */
/* ---------------------------------------------------------------------------------- */
/*
 * ppk_pprof_read() decodes a whole pprof profile (profile.proto) from memory: the raw
 * protobuf, gzip (as `go tool pprof` and most producers write it; concatenated members
 * too) or zstd, told apart by their magic bytes. It is what the `pprofkit` command
 * (top, collapsed, diff) is built on, and it reads any producer's profiles, not only
 * pprofkit's.
 *
 * It is strict. Each of these is PPK_EFORMAT, with a message that names the field and
 * the byte offset (in the decompressed protobuf; in the compressed input for a
 * decompression error), e.g. "Label.str at byte 1234: string index 57 out of range
 * (string_table has 12 strings)":
 *   - a field that runs past the end of its message, a varint longer than 10 bytes or
 *     above 2^64, field number 0, wire types 3, 4, 6 and 7 (groups, reserved);
 *   - a known field with the wrong wire type (the repeated integers Sample.location_id,
 *     Sample.value and Profile.comment may be packed or not, as protobuf allows);
 *   - string_table[0] not "", a string index out of the table (negative included);
 *   - a mapping, location or function id that is 0 or appears twice; a Location's
 *     mapping_id, a Line's function_id or a Sample's location_id naming none (0 is
 *     "none" for mapping_id and function_id, never for location_id);
 *   - a sample whose number of values is not the number of sample types;
 *   - empty input, a truncated or corrupt gzip or zstd stream.
 * Unknown fields are skipped; a scalar field given twice keeps its last value (both as
 * protobuf says). Strings are given as stored, not checked for UTF-8.
 *
 * Memory is bounded before it is used: the decompressed protobuf may not pass
 * max_decoded_bytes (a "zip bomb" stops there: PPK_ETOOBIG), and the tables are counted
 * in a first pass over the protobuf, then allocated once at their exact size; their
 * size, the protobuf and the scratch of the decoding together may not pass max_memory
 * (PPK_ETOOBIG, before allocating). The tables take at most 40 bytes per byte of
 * protobuf: 3 to 5 on pprofkit's and Go's profiles.
 *
 * Thread safety: ppk_pprof_read may run on several threads at once; a ppk_pprof is
 * read-only and may be read from several threads. Not async-signal safe.
 */

/* The decoded elements. Their strings point into the ppk_pprof (valid until
 * ppk_pprof_free); a string index 0 (unset) gives "", string_table[0]. */
typedef struct ppk_pprof_mapping {
    uint64_t id;
    uint64_t memory_start;
    uint64_t memory_limit;
    uint64_t file_offset;
    ppk_str filename;
    ppk_str build_id;
    int has_functions, has_filenames, has_line_numbers, has_inline_frames;
} ppk_pprof_mapping;

typedef struct ppk_pprof_function {
    uint64_t id;
    ppk_str name;
    ppk_str system_name;
    ppk_str filename;
    int64_t start_line;
} ppk_pprof_function;

typedef struct ppk_pprof_line {
    const ppk_pprof_function *function;       /* NULL when function_id is 0 */
    int64_t line;
} ppk_pprof_line;

typedef struct ppk_pprof_location {
    uint64_t id;
    const ppk_pprof_mapping *mapping; /* NULL when mapping_id is 0 */
    uint64_t address;
    /* The innermost (inlined) function first, the function it was inlined into last;
     * none for an unsymbolized address. */
    const ppk_pprof_line *lines;
    size_t n_lines;
    int is_folded;
} ppk_pprof_location;

/* A label: a string one (str not empty) or a numeric one (num, num_unit). */
typedef struct ppk_pprof_label {
    ppk_str key;
    ppk_str str;
    int64_t num;
    ppk_str num_unit;
} ppk_pprof_label;

typedef struct ppk_pprof_sample {
    const ppk_pprof_location *const *locations; /* the leaf first */
    size_t n_locations;
    const int64_t *values; /* one per sample type, in their order */
    const ppk_pprof_label *labels;
    size_t n_labels;
} ppk_pprof_sample;

/* A decoded profile. Every array is in the order of the file; ids and string indices
 * are resolved to pointers (the ids stay in the elements). Read-only. */
typedef struct ppk_pprof {
    const ppk_value_type *sample_types;
    size_t n_sample_types;
    const ppk_pprof_sample *samples;
    size_t n_samples;
    const ppk_pprof_mapping *mappings;
    size_t n_mappings;
    const ppk_pprof_location *locations;
    size_t n_locations;
    const ppk_pprof_function *functions;
    size_t n_functions;
    const ppk_str *strings; /* string_table; strings[0] is "" */
    size_t n_strings;
    ppk_str drop_frames; /* regular expressions; "" when unset */
    ppk_str keep_frames;
    int64_t time_nanos;
    int64_t duration_nanos;
    ppk_value_type period_type;
    int64_t period;
    const ppk_str *comments;
    size_t n_comments;
    ppk_str default_sample_type; /* a sample type's name, or "" */
    ppk_codec codec;             /* how the input was compressed */
    size_t decoded_bytes;        /* the size of the protobuf */
} ppk_pprof;

/* Limits and allocator of ppk_pprof_read. Zeroed: the defaults below. */
typedef struct ppk_read_options {
    size_t max_decoded_bytes; /* the protobuf, decompressed; 0: 256 MiB */
    size_t max_memory;        /* everything the reader allocates; 0: 2 GiB */
    ppk_allocator allocator;  /* for the ppk_pprof and the scratch; zeroed: malloc/free */
} ppk_read_options;

/*
 * Decodes the `len` bytes at `data` (transient: nothing points into them afterwards)
 * into *out, to be freed with ppk_pprof_free(). `opt` may be NULL. On failure *out is
 * NULL, nothing is left allocated, and, when `err` is not NULL, a NUL-terminated
 * message (cut to err_len - 1 bytes) says what and where; 256 bytes hold any message.
 * @return 0; PPK_EFORMAT (malformed, see above); PPK_ETOOBIG (over max_decoded_bytes or
 *         max_memory); PPK_ENOMEM; PPK_EINVAL (out NULL, or an allocator with only one
 *         of alloc and free); PPK_ENULL (data NULL with len > 0).
 */
PPK_API int ppk_pprof_read(const void *data, size_t len, const ppk_read_options *opt,
                           ppk_pprof **out, char *err, size_t err_len);

/* Frees a profile that ppk_pprof_read returned. Accepts NULL. */
PPK_API void ppk_pprof_free(ppk_pprof *p);

/* ---------------------------------------------------------------------------------- */
/* 7. OpenTelemetry: OTLP profiles (experimental)                                      */
/* ---------------------------------------------------------------------------------- */
/*
 * EXPERIMENTAL: OpenTelemetry's profiles signal is in development and its schema still
 * changes between releases. pprofkit follows opentelemetry-proto 1.9.0
 * (opentelemetry.proto.profiles.v1development, collector/profiles/v1development); a
 * later schema may need a new pprofkit.
 *
 * ppk_otlp_encode() turns one decoded pprof profile (ppk_pprof_read) into one
 * ExportProfilesServiceRequest: one ResourceProfiles (the resource below), one
 * ScopeProfiles (scope "pprofkit"), and one Profile per sample type, in their order,
 * each with the pprof's time, duration, period and period type and a random profile_id.
 * The tables live once in the request's ProfilesDictionary, each with the zero value at
 * index 0 and no duplicates: strings, mappings, locations, functions (the pprof's, in
 * its order, equal ones merged; a location without address, mapping or lines is the zero
 * Location), stacks (each distinct list of locations, leaf first; a sample without
 * frames has stack 0), attributes (each distinct label: a string label as a string
 * value, a numeric one as an int value with its unit) and links (only the zero link).
 * A sample whose value is 0 for a sample type is left out of that type's Profile. A
 * sample with a numeric label "end_timestamp_ns" (ppk_sample_data.timestamp_ns) is a
 * timestamped one: the label becomes its timestamp. Samples with the same stack and
 * labels are combined into one OTLP Sample: their values summed (saturating) when they
 * have no timestamp, one value per timestamp when they do (an aggregate and timestamped
 * samples of the same stack and labels, as a window under its memory limit may hold,
 * stay two Samples: values and timestamps must pair up; an aggregate whose values sum to
 * 0 is left out). A label with an empty key, or whose key already appeared in the same
 * sample (a second "end_timestamp_ns" too), is dropped, counted in the
 * dropped_attributes_count of the Profiles its sample is in. The resource's fields that
 * are set come first, then telemetry.sdk.*, then `attributes` (a key written already
 * is skipped); service.name is "unknown_service" when neither sets it. Invalid
 * UTF-8 is repaired (U+FFFD); OTLP has no place for pprof's comments, drop_frames,
 * keep_frames, default sample type, mapping build ids or is_folded, which are left out.
 */
typedef struct ppk_otlp_resource {
    ppk_str service_name;    /* service.name; empty: attributes', else "unknown_service" */
    ppk_str service_version; /* service.version; empty: none */
    ppk_str environment;     /* deployment.environment.name; empty: none */
    ppk_str host_name;       /* host.name; empty: none */
    int64_t pid;             /* process.pid; 0: none */
    ppk_str sdk_language;    /* telemetry.sdk.language; empty: "cpp" */
    /* More resource attributes, as OTEL_RESOURCE_ATTRIBUTES writes them:
     * key=value,key=value with values percent-encoded (%2C for a comma). */
    ppk_str attributes;
} ppk_otlp_resource;

/*
 * Encodes `p` as an OTLP profiles request (uncompressed protobuf) into *out, allocated
 * with `a` (NULL: malloc/free; its scratch too); free it with ppk_bytes_free(). On
 * failure *out is zeroed and, when `err` is not NULL, a message says why.
 * @return 0; PPK_EINVAL (p, res or out NULL, a malformed res->attributes); PPK_ENULL (a
 *         string of res NULL with a length); PPK_ETOOBIG (a table over 2^31 - 1 entries,
 *         OTLP's index limit); PPK_ENOMEM.
 */
PPK_API int ppk_otlp_encode(const ppk_pprof *p, const ppk_otlp_resource *res,
                            const ppk_allocator *a, ppk_bytes *out, char *err, size_t err_len);

/*
 * The OTLP upload sink: each export is read back (ppk_pprof_read, on the uploader
 * thread, never on the exporting one), encoded with ppk_otlp_encode and sent as OTLP/HTTP
 * protobuf: POST <endpoint>/v1development/profiles (or profiles_endpoint as it is),
 * Content-Type application/x-protobuf, Content-Encoding gzip when `gzip` is set, the
 * configured headers and User-Agent pprofkit/<version>. The queue, timeouts, the single
 * retry, fork handling and statistics are those of every upload sink (section 5), with
 * OTLP's rules: only 429, 502, 503 and 504 are retried (and transport failures), with
 * the answer's Retry-After as for every upload sink; a 2xx whose
 * ExportProfilesServiceResponse carries a partial_success (rejected profiles or a
 * message) counts as sent and adds to partial_successes and rejected_profiles.
 * An export that cannot be read back or encoded is dropped as invalid.
 * The resource's empty fields are filled at creation: service_name with
 * "unknown_service:<program name>" (unless `attributes` has service.name), host_name
 * with gethostname(), pid with the process id at each upload (a forked child sends its
 * own).
 */
typedef struct ppk_otlp_config {
    ppk_str endpoint;          /* base URL; empty: http://localhost:4318 */
    ppk_str profiles_endpoint; /* the whole URL, used as it is (wins over endpoint) */
    ppk_str headers;           /* key=value,key=value, values percent-encoded */
    int gzip;                  /* 1: compress the body (Content-Encoding: gzip) */
    ppk_otlp_resource resource;
    ppk_upload_config upload;
} ppk_otlp_config;

/* Defaults (all strings empty, no gzip) and ppk_upload_config_init. */
PPK_API void ppk_otlp_config_init(ppk_otlp_config *cfg);

/*
 * Reads the OpenTelemetry SDK variables into `cfg` as ppk_datadog_config_from_env does:
 * OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT (the whole URL) and OTEL_EXPORTER_OTLP_ENDPOINT
 * (the base); OTEL_EXPORTER_OTLP_PROFILES_HEADERS, else OTEL_EXPORTER_OTLP_HEADERS;
 * OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION, else OTEL_EXPORTER_OTLP_COMPRESSION (gzip or
 * none); OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT, else OTEL_EXPORTER_OTLP_TIMEOUT
 * (milliseconds, upload.timeout_ms); OTEL_SERVICE_NAME; OTEL_RESOURCE_ATTRIBUTES.
 * @return 0, or PPK_EINVAL with a message naming the malformed variable.
 */
PPK_API int ppk_otlp_config_from_env(ppk_otlp_config *cfg, char *err, size_t err_len);

/* Creates an OTLP upload sink. As ppk_sink_datadog. */
PPK_API int ppk_sink_otlp(const ppk_otlp_config *cfg, ppk_sink *out, char *err,
                          size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* PPROFKIT_H */
