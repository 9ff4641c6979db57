/*
 * pb.c - the protocol buffers writer: see pb.h.
 */
#include "pb.h"

void ppk__pb_init(ppk__pb *pb, ppk__mem *mem) {
    pb->mem = mem;
    pb->buf = NULL;
    pb->len = pb->cap = 0;
    pb->streaming = 0;
    ppk__cstream_init(&pb->cs, mem);
}

static void free_buf(ppk__pb *pb) {
    ppk__mem_free(pb->mem, pb->buf, pb->cap);
    pb->buf = NULL;
    pb->len = pb->cap = 0;
}

void ppk__pb_destroy(ppk__pb *pb) {
    free_buf(pb);
    ppk__cstream_destroy(&pb->cs);
    pb->streaming = 0;
}

int ppk__pb_reserve(ppk__pb *pb, size_t n) {
    if (n <= pb->cap - pb->len) {
        pb->limit = pb->len + n;
        return 0;
    }
    if (n > SIZE_MAX / 2 - pb->len) return PPK_ENOMEM;
    size_t cap = pb->cap ? pb->cap : 4096;
    while (cap < pb->len + n) cap *= 2;
    uint8_t *b = ppk__mem_resize(pb->mem, pb->buf, pb->cap, pb->len, cap, 1);
    if (!b) return PPK_ENOMEM;
    pb->buf = b;
    pb->cap = cap;
    pb->limit = pb->len + n;
    return 0;
}

void ppk__pb_shrink(ppk__pb *pb, size_t used) {
    size_t want = used < PPK_PB_BUF ? PPK_PB_BUF : 2 * used;
    if (pb->cap <= 2 * want) return;
    free_buf(pb);
    uint8_t *b = ppk__mem_alloc(pb->mem, want);
    if (!b) return;
    pb->buf = b;
    pb->cap = want;
}

void ppk__pb_end(ppk__pb *pb, size_t start) {
    size_t body = pb->len - start;
    if (body < 0x80) {
        pb->buf[start - 1] = (uint8_t)body;
        return;
    }
    /* The length needs k > 1 bytes: move the body k - 1 bytes forward. The room for
     * that was reserved with PPK_PB_NEST_MAX. */
    size_t k = ppk__pb_varint_size(body);
    PPK_PB_CHECK(pb, k - 1);
    memmove(pb->buf + start - 1 + k, pb->buf + start, body);
    pb->len = start - 1;
    ppk__pb_varint(pb, body);
    pb->len += body;
}

int ppk__pb_stream_begin(ppk__pb *pb, ppk_codec codec, int level) {
    pb->len = 0;
    pb->streaming = 0;
    int rc = ppk__cstream_begin(&pb->cs, codec, level);
    if (!rc) pb->streaming = 1;
    return rc;
}

int ppk__pb_room_slow(ppk__pb *pb, size_t n) {
    if (!pb->streaming) return ppk__pb_reserve(pb, n);
    if (pb->len && pb->cap >= PPK_PB_BUF) {
        int rc = ppk__cstream_write(&pb->cs, pb->buf, pb->len);
        if (rc) return rc;
        pb->len = 0;
        if (n <= pb->cap) return 0;
    }
    /* First use, or a field larger than the buffer: grow it. */
    size_t min = PPK_PB_BUF > pb->len ? PPK_PB_BUF - pb->len : 0;
    return ppk__pb_reserve(pb, n < min ? min : n);
}

void ppk__pb_stream_abort(ppk__pb *pb) {
    ppk__cstream_abort(&pb->cs);
    pb->streaming = 0;
    pb->len = 0;
}

int ppk__pb_stream_end(ppk__pb *pb, const ppk_allocator *a, ppk_bytes *out) {
    memset(out, 0, sizeof *out);
    int rc = ppk__cstream_write(&pb->cs, pb->buf, pb->len);
    if (rc) {
        ppk__pb_stream_abort(pb);
        return rc;
    }
    pb->len = 0;
    pb->streaming = 0;
    return ppk__cstream_end(&pb->cs, a, out);
}
