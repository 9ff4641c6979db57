/*
 * receiver.h - tests/test_upload_receiver.py as a child process, for the upload tests.
 *
 * rx_start() spawns the receiver (python3, next to this file) in a mode with its JSON
 * expectations and reads its first line: "PORT n" (TCP on 127.0.0.1) or "READY" (a Unix
 * socket). The receiver then prints "GOT i" per request read; rx_wait_got() counts them
 * and rx_finish() waits for its exit status (0: every check held). Every wait is bounded.
 * Header-only (static functions): each test program includes it once.
 */
#ifndef PPK_TEST_RECEIVER_H
#define PPK_TEST_RECEIVER_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

extern char **environ;

typedef struct rx {
    pid_t pid;
    int fd;
    int port;
    int got;
    char buf[8192];
    size_t len;
} rx;

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Reads one line within the deadline into line; 0 or -1. */
static int rx_line(rx *x, char *line, size_t n, int64_t deadline) {
    for (;;) {
        char *nl = memchr(x->buf, '\n', x->len);
        if (nl) {
            size_t k = (size_t)(nl - x->buf);
            snprintf(line, n, "%.*s", (int)k, x->buf);
            memmove(x->buf, nl + 1, x->len - k - 1);
            x->len -= k + 1;
            return 0;
        }
        int64_t left = deadline - now_ms();
        struct pollfd p = {x->fd, POLLIN, 0};
        if (poll(&p, 1, left > 0 ? (int)left : 0) <= 0) {
            if (left <= 0) return -1;
            continue;
        }
        ssize_t r = read(x->fd, x->buf + x->len, sizeof x->buf - 1 - x->len);
        if (r <= 0) return -1;
        x->len += (size_t)r;
    }
}

static int rx_start(rx *x, const char *mode, const char *expect, const char *unix_path) {
    memset(x, 0, sizeof *x);
    char script[1024];
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    snprintf(slash ? slash + 1 : script, sizeof script - (size_t)(slash ? slash + 1 - script : 0),
             "test_upload_receiver.py");
    int p[2];
    if (pipe(p)) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    /* Debian's python3 has python3-protobuf (tools/deps.sh), which the otlp mode uses. */
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    char *argv[] = {(char *)py, script, (char *)mode, (char *)expect, (char *)unix_path, NULL};
    int rc = posix_spawnp(&x->pid, py, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    x->fd = p[0];
    if (rc) return -1;
    char line[256];
    if (rx_line(x, line, sizeof line, now_ms() + 15000)) return -1;
    if (sscanf(line, "PORT %d", &x->port) == 1 || strcmp(line, "READY") == 0) return 0;
    return -1;
}

/* Waits until the receiver has read n requests; returns how many it has read. */
static int rx_wait_got(rx *x, int n, int64_t ms) {
    int64_t deadline = now_ms() + ms;
    char line[256];
    while (x->got < n && rx_line(x, line, sizeof line, deadline) == 0) {
        int k;
        /* Concurrent requests may print their lines out of order. */
        if (sscanf(line, "GOT %d", &k) == 1 && k > x->got) x->got = k;
    }
    return x->got;
}

/* Waits for the receiver to exit (SIGTERM first when `stop`); its exit status or -1. */
static int rx_finish(rx *x, int stop, int64_t ms) {
    if (stop) kill(x->pid, SIGTERM);
    int64_t deadline = now_ms() + ms;
    int st = 0;
    for (;;) {
        pid_t w = waitpid(x->pid, &st, WNOHANG);
        if (w == x->pid) break;
        if (now_ms() > deadline) {
            kill(x->pid, SIGKILL);
            waitpid(x->pid, &st, 0);
            close(x->fd);
            return -1;
        }
        usleep(20000);
    }
    rx_wait_got(x, 1 << 30, 0); /* count the GOT lines still in the pipe */
    close(x->fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A receiver that reads requests and never answers, and its URL. -1 if it did not
 * start (the failure is counted). */
static int hang_server(rx *x, char url[64]) {
    CHECK_EQ_INT(rx_start(x, "hang", "{}", NULL), 0);
    if (!x->pid) return -1;
    snprintf(url, 64, "http://127.0.0.1:%d", x->port);
    return 0;
}

#endif
