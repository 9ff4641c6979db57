/*
 * check.h - assertion macros for pprofkit's tests.
 *
 * They print both sides on failure and stay on under NDEBUG. A test file defines
 * `static void test_x(void)` functions and runs them with RUN(test_x) from main(), then
 * returns check_summary(). A failed check marks the test failed and continues, so one run
 * shows every failure.
 */
#ifndef PPK_TESTS_CHECK_H
#define PPK_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failures_;
static int check_tests_;
static int check_tests_failed_;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);       \
            check_failures_++;                                                             \
        }                                                                                  \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                 \
    do {                                                                                   \
        long long a_ = (long long)(a), b_ = (long long)(b);                                \
        if (a_ != b_) {                                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__,  \
                    #a, #b, a_, b_);                                                       \
            check_failures_++;                                                             \
        }                                                                                  \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                 \
    do {                                                                                   \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);     \
        if (a_ != b_) {                                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %llu != %llu\n", __FILE__, __LINE__,  \
                    #a, #b, a_, b_);                                                       \
            check_failures_++;                                                             \
        }                                                                                  \
    } while (0)

/* Compares `n` bytes at `a` and `b`; prints both in hex on mismatch. */
#define CHECK_MEM(a, b, n)                                                                 \
    do {                                                                                   \
        const unsigned char *a_ = (const unsigned char *)(a);                              \
        const unsigned char *b_ = (const unsigned char *)(b);                              \
        size_t n_ = (size_t)(n);                                                           \
        if (memcmp(a_, b_, n_) != 0) {                                                     \
            fprintf(stderr, "%s:%d: %s == %s failed over %zu bytes:\n  ", __FILE__,        \
                    __LINE__, #a, #b, n_);                                                 \
            for (size_t i_ = 0; i_ < n_; i_++) fprintf(stderr, "%02x ", a_[i_]);           \
            fprintf(stderr, "\n  ");                                                       \
            for (size_t i_ = 0; i_ < n_; i_++) fprintf(stderr, "%02x ", b_[i_]);           \
            fprintf(stderr, "\n");                                                         \
            check_failures_++;                                                             \
        }                                                                                  \
    } while (0)

/* Checks that the `len` bytes at `ptr` are the C string `s`. */
#define CHECK_STR(ptr, len, s)                                                             \
    do {                                                                                   \
        const char *p_ = (const char *)(ptr);                                              \
        size_t l_ = (size_t)(len);                                                         \
        const char *s_ = (s);                                                              \
        if (l_ != strlen(s_) || (l_ && memcmp(p_, s_, l_) != 0)) {                          \
            fprintf(stderr, "%s:%d: \"%.*s\" == \"%s\" failed\n", __FILE__, __LINE__,      \
                    (int)l_, p_ ? p_ : "", s_);                                            \
            check_failures_++;                                                             \
        }                                                                                  \
    } while (0)

#define RUN(fn)                                                                            \
    do {                                                                                   \
        int before_ = check_failures_;                                                     \
        check_tests_++;                                                                    \
        fn();                                                                              \
        if (check_failures_ != before_) {                                                  \
            check_tests_failed_++;                                                         \
            fprintf(stderr, "FAIL %s\n", #fn);                                             \
        } else {                                                                           \
            printf("ok   %s\n", #fn);                                                      \
        }                                                                                  \
    } while (0)

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_tests_ - check_tests_failed_, check_tests_failed_);
    return check_tests_failed_ ? 1 : 0;
}

#endif
