/*
 * api.c - small public helpers: error messages, C strings, returned bytes, the clock.
 */
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "pprofkit.h"

const char *ppk_strerror(int code) {
    switch (code) {
#define PPK_ERROR_CASE_(name, value, msg)                                                  \
    case value:                                                                            \
        return msg;
        PPK_ERROR_LIST(PPK_ERROR_CASE_)
#undef PPK_ERROR_CASE_
    }
    return "unknown error";
}

ppk_str ppk_cstr(const char *s) {
    ppk_str r = {s, s ? strlen(s) : 0};
    return r;
}

void ppk_bytes_free(ppk_bytes *b) {
    if (!b) return;
    if (b->data) ppk__bytes_release(b->data);
    memset(b, 0, sizeof *b);
}

int64_t ppk_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
