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

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);        \
            check_failures_++;                                                              \
        }                                                                                   \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                  \
    do {                                                                                    \
        long long chk_a_ = (long long)(a), chk_b_ = (long long)(b);                         \
        if (chk_a_ != chk_b_) {                                                             \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__,   \
                    #a, #b, chk_a_, chk_b_);                                                \
            check_failures_++;                                                              \
        }                                                                                   \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                  \
    do {                                                                                    \
        unsigned long long chk_a_ = (unsigned long long)(a), chk_b_ = (unsigned long long)(b); \
        if (chk_a_ != chk_b_) {                                                             \
            fprintf(stderr, "%s:%d: %s == %s failed: %llu != %llu\n", __FILE__, __LINE__,   \
                    #a, #b, chk_a_, chk_b_);                                                \
            check_failures_++;                                                              \
        }                                                                                   \
    } while (0)

/* Compares `n` bytes at `a` and `b`; prints both in hex on mismatch. */
#define CHECK_MEM(a, b, n)                                                                  \
    do {                                                                                    \
        const unsigned char *chk_a_ = (const unsigned char *)(a);                           \
        const unsigned char *chk_b_ = (const unsigned char *)(b);                           \
        size_t chk_n_ = (size_t)(n);                                                        \
        if (memcmp(chk_a_, chk_b_, chk_n_) != 0) {                                          \
            fprintf(stderr, "%s:%d: %s == %s failed over %zu bytes:\n  ", __FILE__,         \
                    __LINE__, #a, #b, chk_n_);                                              \
            for (size_t chk_i_ = 0; chk_i_ < chk_n_; chk_i_++) fprintf(stderr, "%02x ", chk_a_[chk_i_]); \
            fprintf(stderr, "\n  ");                                                        \
            for (size_t chk_i_ = 0; chk_i_ < chk_n_; chk_i_++) fprintf(stderr, "%02x ", chk_b_[chk_i_]); \
            fprintf(stderr, "\n");                                                          \
            check_failures_++;                                                              \
        }                                                                                   \
    } while (0)

/* Checks that the `len` bytes at `ptr` are the C string `s`. */
#define CHECK_STR(ptr, len, s)                                                              \
    do {                                                                                    \
        const char *chk_p_ = (const char *)(ptr);                                           \
        size_t chk_l_ = (size_t)(len);                                                      \
        const char *chk_s_ = (s);                                                           \
        if (chk_l_ != strlen(chk_s_) || (chk_l_ && memcmp(chk_p_, chk_s_, chk_l_) != 0)) {  \
            fprintf(stderr, "%s:%d: \"%.*s\" == \"%s\" failed\n", __FILE__, __LINE__,       \
                    (int)chk_l_, chk_p_ ? chk_p_ : "", chk_s_);                             \
            check_failures_++;                                                              \
        }                                                                                   \
    } while (0)

#define RUN(fn)                                                                             \
    do {                                                                                    \
        int chk_before_ = check_failures_;                                                  \
        check_tests_++;                                                                     \
        fn();                                                                               \
        if (check_failures_ != chk_before_) {                                               \
            check_tests_failed_++;                                                          \
            fprintf(stderr, "FAIL %s\n", #fn);                                              \
        } else {                                                                            \
            printf("ok   %s\n", #fn);                                                       \
        }                                                                                   \
    } while (0)

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_tests_ - check_tests_failed_, check_tests_failed_);
    return check_tests_failed_ ? 1 : 0;
}

#endif
