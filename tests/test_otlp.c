/*
 * test_otlp.c - the OTLP encoder's errors and the OTLP upload sink against a receiver.
 *
 * The uploads go to tests/test_upload_receiver.py in its "otlp" mode, which checks the
 * HTTP details (path, Content-Type, Content-Encoding, headers, User-Agent) and decodes
 * every request with Google's protobuf runtime against tests/otlp/profiles.proto
 * (check_otlp.py: every table's index 0, every reference in range, no duplicates, the
 * resource), and saves each body. The recorder also writes every export to a file sink,
 * so that check_otlp.py then compares each saved request with the pprof of the same
 * export, sample type by sample type (conservation); after fork() the child's request
 * carries the child's process.pid. The failure cases check the sink's counters: OTLP's
 * retry rules, Retry-After, partial success, refused connections, a server that never
 * answers, exports that are not profiles. The encoder's own cases: bad arguments and every
 * allocation failing in turn (nothing leaks, the error is PPK_ENOMEM).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "pprofkit.h"
#include "receiver.h"
#include "test_alloc.h"

/* ---- recording ----------------------------------------------------------------------- */

/* A recorder with wall-time, cpu-time and a count, its exports also written (gzip) to
 * `dir` when it is not NULL. */
static ppk_recorder *make_recorder(const char *dir) {
    ppk_recorder_config c;
    ppk_recorder_config_init(&c);
    c.profile.sample_types[0] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    c.profile.sample_types[1] = (ppk_value_type){PPK_STR("cpu-time"), PPK_STR("nanoseconds")};
    c.profile.sample_types[2] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    c.profile.n_sample_types = 3;
    c.profile.period_type = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    c.profile.period = 10000000;
    if (dir) c.out_dir = ppk_cstr(dir);
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&c, &r), 0);
    return r;
}

/* One window's samples, varied by `round`: stacks shared by several label sets, a sample
 * without frames, numeric labels with units, a zero cpu-time, timestamped samples (two on
 * the same stack and labels, one with a zero value), a label value with invalid UTF-8. */
static void record(ppk_recorder *r, int round) {
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    if (!s) return;
    for (int i = 0; i < 40; i++) {
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        if (i % 7) {
            ppk_str a = PPK_STR("a.py");
            CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("leaf"), a, 10 + i % 3, 0), 0);
            ppk_str mid = PPK_STR("mid"), b = PPK_STR("b.py");
            if (i % 2) CHECK_EQ_INT(ppk_sample_push_frame(s, mid, b, 5, 0), 0);
            CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("main"), a, 1, 0), 0);
        }
        char task[32];
        snprintf(task, sizeof task, "Task-%d", (i + round) % 5);
        ppk_str key = PPK_STR("thread name");
        CHECK_EQ_INT(ppk_sample_push_label_str(s, key, PPK_STR("MainThread")), 0);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("task name"), ppk_cstr(task)), 0);
        key = PPK_STR("thread id");
        CHECK_EQ_INT(ppk_sample_push_label_num(s, key, 100 + i % 3, PPK_STR("")), 0);
        if (i % 5 == 0)
            CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("bytes"), 4096, PPK_STR("bytes")), 0);
        if (i == 13)
            CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("odd"), PPK_STR("x\xff\xfey")), 0);
        int64_t v[3] = {1000 * (i + 1), i % 4 ? 300 * i : 0, 1};
        CHECK_EQ_INT(ppk_sample_set_values(s, v, 3), 0);
        if (i >= 30) CHECK_EQ_INT(ppk_sample_set_timestamp(s, ppk_now_ns() + i), 0);
        CHECK_EQ_INT(ppk_sample_flush(s), 0);
    }
    ppk_sample_free(s);
}

/* Runs tests/check_otlp.py on the requests saved in `dir` (req-*.bin) and the pprof files
 * there (*.pb.gz): 0 when every request is well formed and holds its export's values. */
static int check_saved(const char *dir, int n_requests) {
    char script[1024];
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    if (slash) *slash = 0;
    size_t cap = 1 << 16, len = 0;
    char *cmd = malloc(cap);
    if (!cmd) return -1;
    len += (size_t)snprintf(cmd, cap, "%s %s/check_otlp.py",
                            access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3",
                            script);
    int reqs = 0;
    /* The pprof files first (each after --pprof), then the requests. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass) len += (size_t)snprintf(cmd + len, cap - len, " --");
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d)) && len < cap - 600;) {
            int want = pass ? !strncmp(e->d_name, "req-", 4) : strstr(e->d_name, ".pb.gz") != NULL;
            reqs += pass && want;
            if (want)
                len += (size_t)snprintf(cmd + len, cap - len, " %s%s/%s", pass ? "" : "--pprof ",
                                        dir, e->d_name);
        }
        if (d) closedir(d);
    }
    CHECK_EQ_INT(reqs, n_requests);
    int st = system(cmd);
    free(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void rm_tree(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

static ppk_sink otlp_sink(const ppk_otlp_config *c) {
    ppk_sink s;
    memset(&s, 0, sizeof s);
    char err[256] = "";
    int rc = ppk_sink_otlp(c, &s, err, sizeof err);
    if (rc) fprintf(stderr, "ppk_sink_otlp: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    return s;
}

static ppk_upload_stats stats_of(const ppk_sink *s) {
    ppk_upload_stats st;
    memset(&st, 0, sizeof st);
    CHECK_EQ_INT(ppk_sink_upload_stats(s, &st), 0);
    CHECK_EQ_U64(st.queued, st.sent + st.dropped_queue_full + st.dropped_failed +
                                st.dropped_shutdown + st.dropped_invalid + st.dropped_nomem);
    return st;
}

/* Three exports through a recorder with a file sink and `sink`; checks the uploads. */
static void export_three(ppk_sink sink, const char *dir) {
    ppk_recorder *r = make_recorder(dir);
    if (!r) return;
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
    for (int round = 0; round < 3; round++) {
        record(r, round);
        CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
        /* One at a time: three in a row could find the queue (2) full. */
        CHECK_EQ_INT(ppk_sink_upload_flush(&sink, 30000), 0);
    }
    ppk_upload_stats st = stats_of(&sink);
    CHECK_EQ_U64(st.sent, 3);
    CHECK_EQ_U64(st.attempts, 3);
    CHECK_EQ_U64(st.partial_successes, 0);
    CHECK_EQ_INT(st.last_http_status, 200);
    ppk_recorder_free(r);
}

/* One export (round `round` of record()) through an OTLP sink made from c; the sink's
 * statistics once it is idle. When x is given, *gap_ms gets the time between the
 * receiver's first two requests (-1 if there were fewer). */
static ppk_upload_stats export_one(const ppk_otlp_config *c, int round, rx *x, int64_t *gap_ms) {
    ppk_upload_stats st;
    memset(&st, 0, sizeof st);
    ppk_sink s = otlp_sink(c);
    ppk_recorder *r = make_recorder(NULL);
    if (!r) return st;
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &s), 0);
    record(r, round);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    int64_t t0 = 0;
    if (x && rx_wait_got(x, 1, 20000) == 1) t0 = now_ms();
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    if (x) *gap_ms = rx_wait_got(x, 2, 0) == 2 ? now_ms() - t0 : -1;
    st = stats_of(&s);
    ppk_recorder_free(r);
    return st;
}

/* ---- the checked uploads ------------------------------------------------------------- */

static void test_upload_gzip_headers_env(void) {
    char dir[] = "/tmp/ppk-otlp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char expect[1024];
    snprintf(expect, sizeof expect,
             "{\"gzip\":true,\"headers\":{\"x-api-key\":\"a b,c\",\"tenant\":\"t1\"},"
             "\"service_name\":\"checkout\",\"service_version\":\"1.2.3\","
             "\"environment\":\"prod\",\"sdk_language\":\"python\",\"host_name\":\"box-1\","
             "\"pid\":%d,\"attributes\":{\"team\":\"pay,ments\",\"region\":\"eu\"},"
             "\"save_dir\":\"%s\",\"count\":3}",
             (int)getpid(), dir);
    rx x;
    CHECK_EQ_INT(rx_start(&x, "otlp", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", x.port);
    /* From the environment: the base endpoint, the headers, compression, the service. */
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url, 1);
    setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%20b%2Cc , tenant = t1", 1);
    setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", 1);
    setenv("OTEL_SERVICE_NAME", "checkout", 1);
    setenv("OTEL_RESOURCE_ATTRIBUTES", "team=pay%2Cments,region=eu", 1);
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    char err[256] = "";
    CHECK_EQ_INT(ppk_otlp_config_from_env(&c, err, sizeof err), 0);
    c.resource.service_version = PPK_STR("1.2.3");
    c.resource.environment = PPK_STR("prod");
    c.resource.sdk_language = PPK_STR("python");
    c.resource.host_name = PPK_STR("box-1");
    export_three(otlp_sink(&c), dir);
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_HEADERS");
    unsetenv("OTEL_EXPORTER_OTLP_COMPRESSION");
    unsetenv("OTEL_SERVICE_NAME");
    unsetenv("OTEL_RESOURCE_ATTRIBUTES");
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    CHECK_EQ_INT(check_saved(dir, 3), 0);
    rm_tree(dir);
}

/* profiles_endpoint is used as it is; no gzip; defaults for the resource. */
static void test_upload_plain_profiles_endpoint(void) {
    char dir[] = "/tmp/ppk-otlp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char expect[512], host[256] = "";
    gethostname(host, sizeof host);
    snprintf(expect, sizeof expect,
             "{\"gzip\":false,\"path\":\"/custom/profiles\",\"service_name\":"
             "\"unknown_service:test_otlp\",\"sdk_language\":\"cpp\",\"host_name\":\"%s\","
             "\"save_dir\":\"%s\",\"count\":3}",
             host, dir);
    rx x;
    CHECK_EQ_INT(rx_start(&x, "otlp", expect, NULL), 0);
    if (!x.pid) return;
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/custom/profiles", x.port);
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    c.profiles_endpoint = ppk_cstr(url);
    c.endpoint = PPK_STR("http://127.0.0.1:1"); /* profiles_endpoint wins */
    export_three(otlp_sink(&c), dir);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    CHECK_EQ_INT(check_saved(dir, 3), 0);
    rm_tree(dir);
}

/* A partial success whose message is longer than the part of the answer the sink keeps
 * (64 KiB) still counts; service.name given as a resource attribute wins over the
 * default. */
static void test_partial_success_counted(void) {
    enum { MSG = 70000 };
    char *expect = malloc(MSG + 256);
    if (!expect) return;
    int k = snprintf(expect, 256, "{\"service_name\":\"attr-svc\",\"count\":1,"
                                  "\"partial\":{\"rejected\":2,\"message\":\"");
    memset(expect + k, 'm', MSG);
    snprintf(expect + k + MSG, 256, "\"}}");
    rx x;
    CHECK_EQ_INT(rx_start(&x, "otlp", expect, NULL), 0);
    free(expect);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    c.endpoint = ppk_cstr(url);
    c.resource.attributes = PPK_STR("service.name=attr-svc");
    ppk_upload_stats st = export_one(&c, 0, NULL, NULL);
    CHECK_EQ_U64(st.sent, 1);
    CHECK_EQ_U64(st.partial_successes, 1);
    CHECK_EQ_U64(st.rejected_profiles, 2);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
}

/* Exit status of check_otlp.py on one request with --expect {"pid": pid}. */
static int check_pid(const char *req, long pid) {
    char cmd[1024], script[512];
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    if (slash) *slash = 0;
    snprintf(cmd, sizeof cmd, "%s %s/check_otlp.py --expect '{\"pid\": %ld}' %s > /dev/null 2>&1",
             access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3", script, pid,
             req);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A sink made before fork() works in the child, which sends its own export with its own
 * process.pid; the parent's says the parent's. */
static void test_fork_child_pid(void) {
    char dir[] = "/tmp/ppk-otlp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char expect[256];
    snprintf(expect, sizeof expect, "{\"save_dir\":\"%s\",\"count\":2}", dir);
    rx x;
    CHECK_EQ_INT(rx_start(&x, "otlp", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    c.endpoint = ppk_cstr(url);
    ppk_sink s = otlp_sink(&c);
    ppk_recorder *r = make_recorder(NULL);
    if (!r) return;
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &s), 0);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        record(r, 1);
        int ok = ppk_recorder_export(r, NULL) == 0 && ppk_sink_upload_flush(&s, 20000) == 0;
        ppk_upload_stats st;
        ok = ok && ppk_sink_upload_stats(&s, &st) == 0 && st.sent == 1;
        _exit(ok ? 0 : 1);
    }
    CHECK(child > 0);
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    record(r, 0);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    CHECK_EQ_U64(stats_of(&s).sent, 1);
    ppk_recorder_free(r);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/req-1.bin", dir);
    snprintf(b, sizeof b, "%s/req-2.bin", dir);
    /* The child's export went first. */
    CHECK_EQ_INT(check_pid(a, (long)child), 0);
    CHECK_EQ_INT(check_pid(b, (long)getpid()), 0);
    CHECK(check_pid(a, (long)getpid()) != 0);
    rm_tree(dir);
}

/* ---- failures ------------------------------------------------------------------------ */

/* The receiver answers every request with `status` (and Retry-After when given); one
 * export; returns the sink's statistics and the ms between the first two requests. */
static ppk_upload_stats status_run(int status, const char *retry_after, int64_t *gap_ms) {
    char expect[128];
    snprintf(expect, sizeof expect, "{\"status\":%d%s%s%s}", status,
             retry_after ? ",\"retry_after\":\"" : "", retry_after ? retry_after : "",
             retry_after ? "\"" : "");
    ppk_upload_stats st;
    memset(&st, 0, sizeof st);
    rx x;
    CHECK_EQ_INT(rx_start(&x, "status", expect, NULL), 0);
    if (!x.pid) return st;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    c.endpoint = ppk_cstr(url);
    c.upload.retry_backoff_ms = 50;
    st = export_one(&c, 0, &x, gap_ms);
    CHECK_EQ_INT(rx_finish(&x, 1, 20000), 0);
    return st;
}

static void test_retry_rules(void) {
    /* Retried: 429, 502, 503, 504. Not: 400, 413, 500 (OTLP: the same request fails
     * again). */
    int retried[] = {429, 502, 503, 504}, not_retried[] = {400, 413, 500};
    for (size_t i = 0; i < sizeof retried / sizeof *retried; i++) {
        int64_t gap;
        ppk_upload_stats st = status_run(retried[i], NULL, &gap);
        CHECK_EQ_U64(st.attempts, 2);
        CHECK_EQ_U64(st.retries, 1);
        CHECK_EQ_U64(st.dropped_failed, 1);
        CHECK_EQ_INT(st.last_http_status, retried[i]);
    }
    for (size_t i = 0; i < sizeof not_retried / sizeof *not_retried; i++) {
        int64_t gap;
        ppk_upload_stats st = status_run(not_retried[i], NULL, &gap);
        CHECK_EQ_U64(st.attempts, 1);
        CHECK_EQ_U64(st.retries, 0);
        CHECK_EQ_U64(st.dropped_failed, 1);
    }
}

/* A 503 with Retry-After: 2 waits at least two seconds (the backoff is 50 ms), a
 * Retry-After beyond the cap does not hang the sink's shutdown. */
static void test_retry_after(void) {
    int64_t gap = 0;
    ppk_upload_stats st = status_run(503, "2", &gap);
    CHECK_EQ_U64(st.attempts, 2);
    CHECK(gap >= 1900);
    if (gap < 1900)
        fprintf(stderr, "  retry came %lld ms after the first attempt\n", (long long)gap);
}

static void test_connection_refused_and_invalid(void) {
    /* A port nobody listens on: a connect failure, retried once. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK_EQ_INT(bind(fd, (struct sockaddr *)&a, al), 0);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    c.endpoint = ppk_cstr(url);
    c.upload.retry_backoff_ms = 10;
    ppk_sink s = otlp_sink(&c);
    /* A real export, then one whose bytes are not a profile: dropped as invalid before
     * any transfer. */
    ppk_recorder *r = make_recorder(NULL);
    if (!r) return;
    record(r, 1);
    ppk_export e;
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    uint8_t junk[64];
    memset(junk, 0xee, sizeof junk);
    ppk_export bad = e;
    bad.data.data = junk;
    bad.data.len = sizeof junk;
    CHECK_EQ_INT(s.write(s.opaque, &bad), 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    ppk_upload_stats st = stats_of(&s);
    CHECK_EQ_U64(st.queued, 2);
    CHECK_EQ_U64(st.fail_connect, 2);
    CHECK_EQ_U64(st.attempts, 2);
    CHECK_EQ_U64(st.dropped_failed, 1);
    CHECK_EQ_U64(st.dropped_invalid, 1);
    ppk_export_free(&e);
    ppk_recorder_free(r);
    s.destroy(s.opaque);
}

/* A server that never answers: the transfer times out, writes never wait. */
static void test_never_answers(void) {
    rx x;
    char url[64];
    if (hang_server(&x, url)) return;
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    c.endpoint = ppk_cstr(url);
    c.upload.timeout_ms = 300;
    c.upload.retry_backoff_ms = 10;
    ppk_upload_stats st = export_one(&c, 2, NULL, NULL);
    CHECK_EQ_U64(st.fail_timeout, 2);
    CHECK_EQ_U64(st.dropped_failed, 1);
    CHECK_EQ_INT(rx_finish(&x, 1, 20000), 0);
}

/* ---- configuration ------------------------------------------------------------------- */

static void bad_config(ppk_otlp_config c, int want, const char *needle) {
    ppk_sink s;
    char err[256] = "";
    CHECK_EQ_INT(ppk_sink_otlp(&c, &s, err, sizeof err), want);
    if (needle && !strstr(err, needle)) {
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", err, needle);
        CHECK(0);
    }
}

static void bad_env(const char *var, const char *value) {
    setenv(var, value, 1);
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    char err[256] = "";
    CHECK_EQ_INT(ppk_otlp_config_from_env(&c, err, sizeof err), PPK_EINVAL);
    if (!strstr(err, var)) {
        fprintf(stderr, "  message \"%s\" does not name %s\n", err, var);
        CHECK(0);
    }
    unsetenv(var);
}

static void test_config_errors(void) {
    ppk_otlp_config c;
    ppk_otlp_config_init(&c);
    ppk_otlp_config b = c;
    b.endpoint = PPK_STR("ftp://collector:4318");
    bad_config(b, PPK_EINVAL, "endpoint");
    b = c;
    b.endpoint = PPK_STR("http://:99999");
    bad_config(b, PPK_EINVAL, "endpoint");
    b = c;
    b.headers = PPK_STR("novalue");
    bad_config(b, PPK_EINVAL, "headers");
    b = c;
    b.headers = PPK_STR("k=a%0D%0AInjected: 1");
    bad_config(b, PPK_EINVAL, "headers: item 1 (key \"k\")");
    /* The message never shows a value (a header's may be a secret). */
    char err[256] = "";
    b.headers = PPK_STR("Authorization=Bearer%20secret%0A");
    CHECK_EQ_INT(ppk_sink_otlp(&b, &(ppk_sink){0}, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "Authorization") != NULL && strstr(err, "secret") == NULL);
    b.headers = PPK_STR("a=1,Bearer secret");
    CHECK_EQ_INT(ppk_sink_otlp(&b, &(ppk_sink){0}, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "item 2 is not") != NULL && strstr(err, "secret") == NULL);
    b = c;
    b.headers = PPK_STR("=v");
    bad_config(b, PPK_EINVAL, "headers");
    b = c;
    b.headers = PPK_STR("a:b=v");
    bad_config(b, PPK_EINVAL, "\"a:b\" is not a header name");
    b = c;
    b.resource.attributes = PPK_STR("k=%zz");
    bad_config(b, PPK_EINVAL, "resource.attributes");
    b = c;
    b.resource.attributes = PPK_STR("k=%ff");
    bad_config(b, PPK_EINVAL, "resource.attributes");
    b = c;
    b.gzip = 2;
    bad_config(b, PPK_EINVAL, "gzip");
    b = c;
    b.resource.service_name = (ppk_str){NULL, 3};
    bad_config(b, PPK_ENULL, NULL);
    CHECK_EQ_INT(ppk_sink_otlp(&c, NULL, NULL, 0), PPK_EINVAL);
    CHECK_EQ_INT(ppk_sink_otlp(NULL, &(ppk_sink){0}, NULL, 0), PPK_EINVAL);

    bad_env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1");
    bad_env("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://host:0/v1development/profiles");
    bad_env("OTEL_EXPORTER_OTLP_HEADERS", "a");
    bad_env("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "a=%0A");
    bad_env("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd");
    bad_env("OTEL_EXPORTER_OTLP_TIMEOUT", "10s");
    bad_env("OTEL_RESOURCE_ATTRIBUTES", "k");

    /* The profiles-specific variables win over the general ones. */
    setenv("OTEL_EXPORTER_OTLP_HEADERS", "a=1", 1);
    setenv("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "b=2", 1);
    setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", 1);
    setenv("OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION", "none", 1);
    setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1234", 1);
    ppk_otlp_config e;
    ppk_otlp_config_init(&e);
    e.gzip = 1;
    CHECK_EQ_INT(ppk_otlp_config_from_env(&e, NULL, 0), 0);
    CHECK_STR(e.headers.ptr, e.headers.len, "b=2");
    CHECK_EQ_INT(e.gzip, 0);
    CHECK_EQ_INT((int)e.upload.timeout_ms, 1234);
    unsetenv("OTEL_EXPORTER_OTLP_HEADERS");
    unsetenv("OTEL_EXPORTER_OTLP_PROFILES_HEADERS");
    unsetenv("OTEL_EXPORTER_OTLP_COMPRESSION");
    unsetenv("OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION");
    unsetenv("OTEL_EXPORTER_OTLP_TIMEOUT");
}

/* ---- the encoder's errors ------------------------------------------------------------ */

static ppk_pprof *one_export(void) {
    ppk_recorder *r = make_recorder(NULL);
    if (!r) return NULL;
    record(r, 0);
    ppk_export e;
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    ppk_pprof *p = NULL;
    CHECK_EQ_INT(ppk_pprof_read(e.data.data, e.data.len, NULL, &p, NULL, 0), 0);
    ppk_export_free(&e);
    ppk_recorder_free(r);
    return p;
}

static void test_encode_errors(void) {
    ppk_pprof *p = one_export();
    if (!p) return;
    ppk_otlp_resource res;
    memset(&res, 0, sizeof res);
    ppk_bytes out = {(uint8_t *)1, 7};
    CHECK_EQ_INT(ppk_otlp_encode(NULL, &res, NULL, &out, NULL, 0), PPK_EINVAL);
    CHECK(out.data == NULL && out.len == 0);
    CHECK_EQ_INT(ppk_otlp_encode(p, NULL, NULL, &out, NULL, 0), PPK_EINVAL);
    CHECK_EQ_INT(ppk_otlp_encode(p, &res, NULL, NULL, NULL, 0), PPK_EINVAL);
    res.host_name = (ppk_str){NULL, 1};
    CHECK_EQ_INT(ppk_otlp_encode(p, &res, NULL, &out, NULL, 0), PPK_ENULL);
    res.host_name = PPK_STR("");
    res.attributes = PPK_STR("a=1,,b");
    char err[256] = "";
    CHECK_EQ_INT(ppk_otlp_encode(p, &res, NULL, &out, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "resource attributes: item 2 is not key=value") != NULL);
    res.attributes = PPK_STR("a=1");
    ppk_allocator half = {test_alloc_alloc, NULL, NULL};
    CHECK_EQ_INT(ppk_otlp_encode(p, &res, &half, &out, NULL, 0), PPK_EINVAL);

    /* Every allocation failing in turn: PPK_ENOMEM, nothing held; then success. */
    ppk_bytes ok = {0};
    CHECK_EQ_INT(ppk_otlp_encode(p, &res, NULL, &ok, NULL, 0), 0);
    int succeeded = 0;
    for (long k = 1; k < 10000 && !succeeded; k++) {
        test_alloc t = {0};
        t.fail_at = k;
        ppk_allocator a = test_allocator(&t);
        ppk_bytes b = {0};
        int rc = ppk_otlp_encode(p, &res, &a, &b, NULL, 0);
        if (rc == 0) {
            succeeded = 1;
            CHECK_EQ_U64(t.failures, 0);
            /* Same size as with malloc (the profile ids differ, not their length). */
            CHECK_EQ_U64(b.len, ok.len);
            ppk_bytes_free(&b);
        } else {
            CHECK_EQ_INT(rc, PPK_ENOMEM);
            CHECK(b.data == NULL);
        }
        CHECK_EQ_U64((uint64_t)t.outstanding, 0);
    }
    CHECK(succeeded);
    ppk_bytes_free(&ok);
    ppk_pprof_free(p);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    RUN(test_encode_errors);
    RUN(test_config_errors);
    RUN(test_upload_gzip_headers_env);
    RUN(test_upload_plain_profiles_endpoint);
    RUN(test_partial_success_counted);
    RUN(test_fork_child_pid);
    RUN(test_retry_rules);
    RUN(test_retry_after);
    RUN(test_connection_refused_and_invalid);
    RUN(test_never_answers);
    return check_summary();
}
