/*
 * endpoints.h - a recorder's endpoint registrations (local root span id -> endpoint),
 * kept across windows.
 *
 * A span can outlive a window: its endpoint, registered once, must label its samples in
 * every window they fall in. So the recorder keeps the registrations here, not in a
 * window: at each export the retired windows are scanned for the span ids their samples
 * carry, those registrations are copied into the retired first window (where the
 * encoder looks them up for the samples of every shard), and after the encode a
 * registration that was neither set nor carried by a sample during ttl exports in a row
 * is evicted. Bounded by a count and
 * bytes (strings plus ENTRY_BYTES each): past them a new registration is dropped and
 * counted. One lock of its own, taken alone (or after the recorder's, at fork).
 *
 * Also: the copy of a window's endpoint counts that an export carries.
 */
#ifndef PPK_ENDPOINTS_H
#define PPK_ENDPOINTS_H

#include <pthread.h>

#include "alloc.h"
#include "pprofkit.h"
#include "utf8.h"

typedef struct ppk__ep ppk__ep;

typedef struct ppk__endpoints {
    pthread_mutex_t lock;
    ppk__mem mem;
    ppk__ep *slots; /* open addressing by span id (0: empty), at most half full */
    size_t cap, n, bytes;
    size_t max_n, max_bytes, max_len;
    uint32_t ttl;
    uint64_t epoch;   /* exports ended */
    uint64_t dropped; /* registrations refused by the bounds */
    ppk__fit_counts fit; /* of the endpoints kept: repaired, cut */
} ppk__endpoints;

/* max_len: the windows' max_string_len (an endpoint is kept fitted to it). 0 or PPK_ESYS. */
int ppk__endpoints_init(ppk__endpoints *eps, const ppk_allocator *a, size_t max_n,
                        size_t max_bytes, uint32_t ttl, size_t max_len);
void ppk__endpoints_destroy(ppk__endpoints *eps);
/* Registers (or replaces) span's endpoint. 0, or PPK_ENOMEM; past the bounds the
 * registration is dropped and counted, and 0 returned. */
int ppk__endpoints_set(ppk__endpoints *eps, uint64_t span, ppk_str endpoint);
/* Marks the registrations the samples of the retired windows ws[0..n) carry as used,
 * and, if `copy`, copies them into ws[0] (ppk_profile_set_endpoint), for the encode. The
 * caller alone holds the windows. */
void ppk__endpoints_to_windows(ppk__endpoints *eps, ppk_profile *const *ws, size_t n,
                               int copy);
/* After the export: evicts the registrations unused for ttl exports and begins the next
 * epoch. */
void ppk__endpoints_end_epoch(ppk__endpoints *eps);
/* Into the recorder's statistics: the registrations kept (endpoints), dropped so far
 * (added to endpoints_dropped), and the repairs and cuts of those kept (added). */
void ppk__endpoints_stats(ppk__endpoints *eps, ppk_recorder_stats *st);

/* Copies window w's endpoint counts into e (one block from `a`, freed by
 * ppk_export_free: the array, then the strings). Returns the counts dropped for want of
 * memory (then e has none). */
uint64_t ppk__endpoint_counts_copy(const ppk_profile *w, const ppk_allocator *a, ppk_export *e);

#endif
