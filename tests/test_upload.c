/*
 * test_upload.c - the Datadog and Pyroscope upload sinks against a local receiver.
 *
 * Each case starts tests/test_upload_receiver.py (Python's standard library) on
 * 127.0.0.1, an ephemeral port, or on a Unix socket. In the checking modes the receiver
 * verifies the method, path, headers, the multipart structure, every event.json field or
 * every Pyroscope query parameter, then decompresses the profile and decodes it with its
 * own protobuf reader, comparing the sample types and value totals with what this file
 * recorded; it exits 0 only if all of that held and exactly the expected number of
 * requests came. In the failure modes (refused, 500, 413, never answers, slow reader)
 * this file checks the sink's counters, that writes return while the network is stuck
 * (no transfer has finished when the writes are done), that the queue never holds more
 * than queue_len exports and that the sink's memory stays bounded. Shutdown and fork
 * cases check cancellation. pthread_create is wrapped at link time so that a case can
 * make the uploader thread's creation fail. Every wait is bounded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "pprofkit.h"
#include "receiver.h"
#include "upload.h"

#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "die_after_fork=0"; }
#endif

/* pthread_create, wrapped at link time (CMakeLists.txt: -Wl,--wrap=pthread_create, so the
 * library's calls come here too): it fails with EAGAIN, as under RLIMIT_NPROC, while
 * fail_threads is set. */
static atomic_int fail_threads;
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
    if (atomic_load(&fail_threads)) return EAGAIN;
    return __real_pthread_create(t, a, fn, arg);
}

/* ---- recording ------------------------------------------------------------------------ */

#define TOTAL_WALL 60 /* 10 + 20 + 30 */
#define TOTAL_COUNT 3
#define TYPES "[[\"wall-time\",\"nanoseconds\"],[\"samples\",\"count\"]]"
/* The same as the Pyroscope sink sends them: Grafana Pyroscope refuses a '-' in a sample
 * type (grafana/pyroscope pkg/validation/validate.go), the sink makes it '_'. */
#define PY_TYPES "[[\"wall_time\",\"nanoseconds\"],[\"samples\",\"count\"]]"

static ppk_recorder *make_recorder(void) {
    ppk_recorder_config c;
    ppk_recorder_config_init(&c);
    c.profile.sample_types[0] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    c.profile.sample_types[1] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    c.profile.n_sample_types = 2;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&c, &r), 0);
    return r;
}

/* Three samples: wall-time 10, 20, 30 and one count each. */
static void record(ppk_recorder *r) {
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("leaf"), PPK_STR("a.py"), i, 0), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("main"), PPK_STR("a.py"), 1, 0), 0);
        int64_t v[2] = {10 * i, 1};
        CHECK_EQ_INT(ppk_sample_set_values(s, v, 2), 0);
        CHECK_EQ_INT(ppk_sample_flush(s), 0);
    }
    ppk_sample_free(s);
}

/* A export that is not a profile, for the failure cases (no recorder involved). */
static ppk_export fake_export(uint8_t *buf, size_t n, uint64_t seq) {
    ppk_export e;
    memset(&e, 0, sizeof e);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 131 + seq);
    e.data.data = buf;
    e.data.len = n;
    e.codec = PPK_CODEC_GZIP;
    e.end_ns = ppk_now_ns();
    e.start_ns = e.end_ns - 1000000000;
    e.seq = seq;
    return e;
}

static void check_conserved(const ppk_upload_stats *s) {
    CHECK_EQ_U64(s->queued, s->sent + s->dropped_queue_full + s->dropped_failed +
                                s->dropped_shutdown + s->dropped_invalid + s->dropped_nomem);
}

static ppk_sink dd_sink_to(const char *url, ppk_datadog_config *c) {
    ppk_sink s;
    char err[256] = "";
    c->agent_url = ppk_cstr(url);
    int rc = ppk_sink_datadog(c, &s, err, sizeof err);
    if (rc) fprintf(stderr, "ppk_sink_datadog: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    return s;
}

/* Records, exports through `sink`, waits for the upload, frees the recorder. */
static void export_once(ppk_sink sink, int with_endpoints) {
    ppk_recorder *r = make_recorder();
    if (!r) return;
    record(r);
    if (with_endpoints) {
        CHECK_EQ_INT(ppk_recorder_add_endpoint_count(r, PPK_STR("GET /users"), 2), 0);
        CHECK_EQ_INT(ppk_recorder_add_endpoint_count(r, PPK_STR("POST \"x\""), 1), 0);
        CHECK_EQ_INT(ppk_recorder_add_endpoint_count(r, PPK_STR("GET /users"), 1), 0);
    }
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&sink, 20000), 0);
    ppk_upload_stats st;
    CHECK_EQ_INT(ppk_sink_upload_stats(&sink, &st), 0);
    CHECK_EQ_U64(st.sent, 1);
    CHECK_EQ_U64(st.attempts, 1);
    CHECK_EQ_U64(st.queued, 1);
    CHECK(st.bytes_sent > 100);
    CHECK_EQ_INT(st.last_http_status, 200);
    check_conserved(&st);
    ppk_recorder_free(r); /* destroys the sink */
}

/* ---- the checked uploads --------------------------------------------------------------- */

static void test_datadog_agent_tcp(void) {
    rx x;
    const char *expect =
        "{\"path\":\"/profiling/v1/input\",\"origin\":\"pprofkit\",\"origin_version\":\"" PPK_VERSION_STRING
        "\",\"family\":\"python\",\"endpoint_counts\":{\"GET /users\":3,\"POST \\\"x\\\"\":1},"
        "\"tags\":{\"service\":\"svc\",\"env\":\"prod\",\"version\":\"1.2\",\"language\":\"python\","
        "\"profiler_version\":\"" PPK_VERSION_STRING "\",\"team\":\"core\",\"k2\":\"v2\",\"solo\":[null]},"
        "\"sample_types\":" TYPES ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", x.port);
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.service = PPK_STR("svc");
    c.env = PPK_STR("prod");
    c.version = PPK_STR("1.2");
    c.family = PPK_STR("python");
    c.tags = PPK_STR("team:core  k2:v2,solo");
    export_once(dd_sink_to(url, &c), 1);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    CHECK_EQ_INT(x.got, 1);
}

static void test_datadog_agent_unix(void) {
    char dir[] = "/tmp/ppk-upload-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128], url[160];
    snprintf(path, sizeof path, "%s/apm.socket", dir);
    snprintf(url, sizeof url, "unix://%s", path);
    rx x;
    const char *expect =
        "{\"path\":\"/profiling/v1/input\",\"origin\":\"pprofkit\",\"origin_version\":\"" PPK_VERSION_STRING
        "\",\"family\":\"native\",\"endpoint_counts\":null,\"tags\":{\"service\":\"unix-svc\","
        "\"language\":\"native\"},\"absent_tags\":[\"env\",\"version\"],"
        "\"sample_types\":" TYPES ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, path), 0);
    if (x.pid) {
        ppk_datadog_config c;
        ppk_datadog_config_init(&c);
        c.service = PPK_STR("unix-svc");
        export_once(dd_sink_to(url, &c), 0);
        CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    }
    unlink(path);
    rmdir(dir);
}

static void test_datadog_agentless(void) {
    rx x;
    const char *expect =
        "{\"path\":\"/api/v2/profile\",\"api_key\":\"0123abcdEF\",\"origin\":\"my-profiler\","
        "\"origin_version\":\"9.9.9\",\"family\":\"ruby\",\"endpoint_counts\":null,"
        "\"tags\":{\"service\":\"agentless\",\"profiler_version\":\"9.9.9\",\"language\":\"ruby\"},"
        "\"sample_types\":" TYPES ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, NULL), 0);
    if (!x.pid) return;
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/v2/profile", x.port);
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.agentless = 1;
    c.api_key = PPK_STR("0123abcdEF");
    c.intake_url = ppk_cstr(url);
    c.service = PPK_STR("agentless");
    c.family = PPK_STR("ruby");
    c.profiler_name = PPK_STR("my-profiler");
    c.profiler_version = PPK_STR("9.9.9");
    ppk_sink s;
    char err[256];
    CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), 0);
    export_once(s, 0);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
}

/* A runtime id given by the user with a quote and a backslash: event.json stays JSON (the
 * receiver parses it) and carries the id unchanged. */
static void test_datadog_runtime_id_escaped(void) {
    rx x;
    const char *expect =
        "{\"path\":\"/profiling/v1/input\",\"origin\":\"pprofkit\",\"origin_version\":\"" PPK_VERSION_STRING
        "\",\"family\":\"native\",\"endpoint_counts\":null,\"tags\":{\"service\":\"rid\"},"
        "\"runtime_id\":\"rt\\\"id\\\\1\",\"sample_types\":" TYPES ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.service = PPK_STR("rid");
    c.runtime_id = PPK_STR("rt\"id\\1");
    export_once(dd_sink_to(url, &c), 0);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    CHECK_EQ_INT(x.got, 1);
}

/* The container id, found as the Datadog tracers find it in /proc/self/cgroup
 * (DataDog/libdatadog, entity_id): the agent reads Datadog-Container-ID (and
 * Datadog-Entity-ID "ci-<id>") to tag what comes from a container. */
static void test_datadog_container_id_parse(void) {
    static const struct {
        const char *text, *id;
    } cases[] = {
        {"12:pids:/\n13:name=systemd:/docker/"
         "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860\n",
         "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860"},
        {"1:name=systemd:/system.slice/"
         "docker-cde7c2bab394630a42d73dc610b9c57415dced996106665d427f6d0566594411.scope\n",
         "cde7c2bab394630a42d73dc610b9c57415dced996106665d427f6d0566594411"},
        {"1:name=systemd:/kubepods/besteffort/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/"
         "3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1\n",
         "3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1"},
        {"1:name=systemd:/ecs/8cd79a803caf4d2aa945152e934a5c00/"
         "8cd79a803caf4d2aa945152e934a5c00-1053176469",
         "8cd79a803caf4d2aa945152e934a5c00-1053176469"},
        {"2:cpu:/x/34dc0b5e-626f-2c5c-4c51-70e34b10e765 \n",
         "34dc0b5e-626f-2c5c-4c51-70e34b10e765"},
        {"4:memory:/process_api/3eeae2f665ca36426b11723c6c983843\n0::/\n", ""},
        {"0::/user.slice/user-0.slice/session-1.scope\n", ""},
        {"not a cgroup line "
         "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860\n", ""},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char id[80] = "x";
        size_t n = ppk__dd_container_id(cases[i].text, id, sizeof id);
        if (strcmp(id, cases[i].id)) fprintf(stderr, "case %zu: \"%s\"\n", i, id);
        CHECK_EQ_INT(strcmp(id, cases[i].id), 0);
        CHECK_EQ_U64(n, strlen(cases[i].id));
    }
    char small[64];
    CHECK_EQ_U64(ppk__dd_container_id(cases[0].text, small, sizeof small), 0);
}

/* A sink created in a container (a cgroup file naming one) sends the two headers. */
static void test_datadog_container_headers(void) {
    char path[] = "/tmp/ppk-cgroup-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    static const char text[] = "0::/system.slice/docker-"
                               "cde7c2bab394630a42d73dc610b9c57415dced996106665d427f6d0566594411"
                               ".scope\n";
    CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    rx x;
    const char *expect =
        "{\"path\":\"/profiling/v1/input\",\"origin\":\"pprofkit\",\"origin_version\":\"" PPK_VERSION_STRING
        "\",\"family\":\"native\",\"endpoint_counts\":null,\"tags\":{\"service\":\"ctr\"},"
        "\"container_id\":\"cde7c2bab394630a42d73dc610b9c57415dced996106665d427f6d0566594411\","
        "\"sample_types\":" TYPES ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, NULL), 0);
    if (x.pid) {
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
        ppk_datadog_config c;
        ppk_datadog_config_init(&c);
        c.service = PPK_STR("ctr");
        ppk__dd_cgroup_path = path;
        ppk_sink s = dd_sink_to(url, &c);
        ppk__dd_cgroup_path = "/proc/self/cgroup";
        export_once(s, 0);
        CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
        CHECK_EQ_INT(x.got, 1);
    }
    unlink(path);
}

static void test_pyroscope(void) {
    rx x;
    const char *expect = "{\"name\":\"my.app{env=test,region=eu-1}\",\"sample_rate\":\"100\","
                         "\"spy_name\":\"pprofkit\",\"basic_auth\":\"user:p@ss:w\","
                         "\"tenant\":\"tenant-1\",\"sample_types\":" PY_TYPES
                         ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "pyroscope", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", x.port);
    ppk_pyroscope_config c;
    ppk_pyroscope_config_init(&c);
    c.server_address = ppk_cstr(url);
    c.application_name = PPK_STR("my.app");
    c.tags = PPK_STR("env=test,,region=eu-1");
    c.basic_auth_user = PPK_STR("user");
    c.basic_auth_password = PPK_STR("p@ss:w");
    c.tenant_id = PPK_STR("tenant-1");
    ppk_sink s;
    char err[256] = "";
    CHECK_EQ_INT(ppk_sink_pyroscope(&c, &s, err, sizeof err), 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    export_once(s, 1);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
}

/* Credentials from the environment, as Pyroscope's own clients read them, one
 * Authorization header each time: 0, a bearer token with the tenant; 1, a user and a
 * password beside the token (basic auth wins); 2, a user without a password beside the
 * token (the token); 3, a user alone (basic auth, an empty password). */
static void test_pyroscope_env_credentials(void) {
    static const char *auth[] = {"\"bearer\":\"tok.en-1\",\"tenant\":\"team-a\"",
                                 "\"basic_auth\":\"123456:glc_secret\"",
                                 "\"bearer\":\"tok.en-1\"", "\"basic_auth\":\"123456:\""};
    for (int k = 0; k < 4; k++) {
        rx x;
        char expect[512];
        snprintf(expect, sizeof expect,
                 "{\"name\":\"envapp{}\",\"sample_rate\":\"100\",\"spy_name\":\"pprofkit\","
                 "%s,\"sample_types\":" PY_TYPES ",\"totals\":[60,3],\"count\":1}",
                 auth[k]);
        CHECK_EQ_INT(rx_start(&x, "pyroscope", expect, NULL), 0);
        if (!x.pid) return;
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
        setenv("PYROSCOPE_SERVER_ADDRESS", url, 1);
        setenv("PYROSCOPE_APPLICATION_NAME", "envapp", 1);
        if (k < 3) setenv("PYROSCOPE_AUTH_TOKEN", "tok.en-1", 1);
        if (k == 0) setenv("PYROSCOPE_TENANT_ID", "team-a", 1);
        if (k) setenv("PYROSCOPE_BASIC_AUTH_USER", "123456", 1);
        if (k == 1) setenv("PYROSCOPE_BASIC_AUTH_PASSWORD", "glc_secret", 1);
        ppk_pyroscope_config c;
        ppk_pyroscope_config_init(&c);
        char err[256] = "";
        CHECK_EQ_INT(ppk_pyroscope_config_from_env(&c, err, sizeof err), 0);
        ppk_sink s;
        CHECK_EQ_INT(ppk_sink_pyroscope(&c, &s, err, sizeof err), 0);
        if (err[0]) fprintf(stderr, "%s\n", err);
        static const char *vars[] = {"PYROSCOPE_SERVER_ADDRESS", "PYROSCOPE_APPLICATION_NAME",
                                     "PYROSCOPE_AUTH_TOKEN", "PYROSCOPE_BASIC_AUTH_USER",
                                     "PYROSCOPE_BASIC_AUTH_PASSWORD", "PYROSCOPE_TENANT_ID"};
        for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
        export_once(s, 1);
        CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    }
}

/* An export whose end is INT64_MAX ns, handed straight to write(): `until` is its ceiling
 * in seconds, 9223372037, computed without overflow (UBSan). */
static void test_pyroscope_until_far_future(void) {
    rx x;
    const char *expect = "{\"name\":\"app{}\",\"sample_rate\":\"100\",\"spy_name\":\"pprofkit\","
                         "\"until\":\"9223372037\",\"sample_types\":" PY_TYPES
                         ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "pyroscope", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_pyroscope_config c;
    ppk_pyroscope_config_init(&c);
    c.server_address = ppk_cstr(url);
    c.application_name = PPK_STR("app");
    ppk_sink s;
    CHECK_EQ_INT(ppk_sink_pyroscope(&c, &s, NULL, 0), 0);
    ppk_recorder *r = make_recorder();
    if (!r) return;
    record(r);
    ppk_export e;
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    e.end_ns = INT64_MAX;
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.sent, 1);
    ppk_export_free(&e);
    ppk_recorder_free(r);
    s.destroy(s.opaque);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
}

/* Labels as a Python profiler sets them ("thread name": a string with a space), and keys
 * that Grafana Pyroscope refuses for other reasons: Pyroscope makes every string-valued
 * label a series label, and refuses the whole profile for one whose key is not a label
 * name ([a-zA-Z_][a-zA-Z0-9_]*, '.' read as '_'), and for a sample type with a '-'. The
 * sink renames those keys (every byte but [A-Za-z0-9_.] '_', a '_' before a leading
 * digit) and the sample and period types' '-' into '_', nothing else: a key the server
 * takes ("span.kind"), values, numeric labels (not series labels) and totals arrive
 * unchanged. */
static void test_pyroscope_label_names(void) {
    /* A value of 2049 bytes ('a', 2046 'x', an e-acute): the server takes 2048 at most (its
     * default max_label_value_length); the sink cuts it before the character that
     * crosses the limit, to 2047 bytes. */
    char long_value[2050], cut[2048];
    memset(long_value, 'x', 2047);
    long_value[0] = 'a';
    memcpy(long_value + 2047, "\xc3\xa9", 3);
    memcpy(cut, long_value, 2047);
    cut[2047] = 0;
    char expect[4096];
    snprintf(expect, sizeof expect,
             "{\"name\":\"app{}\",\"sample_rate\":\"100\",\"spy_name\":\"pprofkit\","
             "\"sample_types\":" PY_TYPES ",\"totals\":[60,3],"
             "\"period_type\":[\"wall_time\",\"nanoseconds\"],"
             "\"labels\":[[\"thread_name\",\"MainThread\"],[\"_9lives\",\"cat\"],"
             "[\"ok_key\",\"v-1\"],[\"span.kind\",\"server\"],[\"caf__\",\"\xc3\xa9\"],"
             "[\"long\",\"%s\"]],\"num_labels\":[\"thread id\"],\"count\":1}",
             cut);
    rx x;
    CHECK_EQ_INT(rx_start(&x, "pyroscope", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_pyroscope_config c;
    ppk_pyroscope_config_init(&c);
    c.server_address = ppk_cstr(url);
    c.application_name = PPK_STR("app");
    ppk_sink s;
    CHECK_EQ_INT(ppk_sink_pyroscope(&c, &s, NULL, 0), 0);

    ppk_recorder_config rc;
    ppk_recorder_config_init(&rc);
    rc.profile.sample_types[0] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    rc.profile.sample_types[1] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    rc.profile.n_sample_types = 2;
    rc.profile.period_type = rc.profile.sample_types[0];
    rc.profile.period = 10000000;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&rc, &r), 0);
    if (!r) return;
    ppk_sample *smp = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &smp), 0);
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(ppk_sample_start(smp), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(smp, PPK_STR("leaf"), PPK_STR("a.py"), i, 0), 0);
        CHECK_EQ_INT(ppk_sample_push_label_str(smp, PPK_STR("thread name"), PPK_STR("MainThread")),
                     0);
        CHECK_EQ_INT(ppk_sample_push_label_num(smp, PPK_STR("thread id"), 42, (ppk_str){0}), 0);
        if (i == 1) {
            CHECK_EQ_INT(ppk_sample_push_label_str(smp, PPK_STR("9lives"), PPK_STR("cat")), 0);
            CHECK_EQ_INT(ppk_sample_push_label_str(smp, PPK_STR("ok_key"), PPK_STR("v-1")), 0);
            CHECK_EQ_INT(ppk_sample_push_label_str(smp, PPK_STR("long"), ppk_cstr(long_value)), 0);
        } else {
            CHECK_EQ_INT(ppk_sample_push_label_str(smp, PPK_STR("span.kind"), PPK_STR("server")),
                         0);
            CHECK_EQ_INT(
                ppk_sample_push_label_str(smp, PPK_STR("caf\xc3\xa9"), PPK_STR("\xc3\xa9")), 0);
        }
        int64_t v[2] = {10 * i, 1};
        CHECK_EQ_INT(ppk_sample_set_values(smp, v, 2), 0);
        CHECK_EQ_INT(ppk_sample_flush(smp), 0);
    }
    ppk_sample_free(smp);
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &s), 0);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    ppk_upload_stats st;
    CHECK_EQ_INT(ppk_sink_upload_stats(&s, &st), 0);
    CHECK_EQ_U64(st.sent, 1);
    CHECK_EQ_U64(st.dropped_invalid, 0);
    ppk_recorder_free(r);
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    CHECK_EQ_INT(x.got, 1);
}

/* ---- configuration ------------------------------------------------------------------- */

static const char *dd_vars[] = {"DD_TRACE_AGENT_URL", "DD_AGENT_HOST", "DD_TRACE_AGENT_PORT",
                                "DD_SERVICE", "DD_ENV", "DD_VERSION", "DD_TAGS", "DD_API_KEY",
                                "DD_SITE", "DD_PROFILING_AGENTLESS",
                                "PYROSCOPE_SERVER_ADDRESS", "PYROSCOPE_APPLICATION_NAME",
                                "PYROSCOPE_BASIC_AUTH_USER", "PYROSCOPE_BASIC_AUTH_PASSWORD",
                                "PYROSCOPE_AUTH_TOKEN", "PYROSCOPE_TENANT_ID"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof dd_vars / sizeof *dd_vars; i++) unsetenv(dd_vars[i]);
}

/* Sets one variable, expects from_env to fail with a message naming it. */
static void bad_env(const char *var, const char *value) {
    clear_env();
    setenv(var, value, 1);
    char err[256] = "";
    int rc;
    if (!strncmp(var, "PYROSCOPE", 9)) {
        ppk_pyroscope_config c;
        ppk_pyroscope_config_init(&c);
        rc = ppk_pyroscope_config_from_env(&c, err, sizeof err);
    } else {
        ppk_datadog_config c;
        ppk_datadog_config_init(&c);
        rc = ppk_datadog_config_from_env(&c, err, sizeof err);
    }
    CHECK_EQ_INT(rc, PPK_EINVAL);
    if (!strstr(err, var)) {
        fprintf(stderr, "message for %s=%s does not name it: \"%s\"\n", var, value, err);
        CHECK(0);
    }
}

static void test_env_config(void) {
    bad_env("DD_TRACE_AGENT_PORT", "80a");
    bad_env("DD_TRACE_AGENT_PORT", "70000");
    bad_env("DD_TRACE_AGENT_URL", "ftp://agent:8126");
    bad_env("DD_TRACE_AGENT_URL", "unix://relative/path");
    bad_env("DD_AGENT_HOST", "agent/x");
    bad_env("DD_TAGS", "a:1,:novalue");
    bad_env("DD_SERVICE", "bad\nservice");
    bad_env("DD_ENV", "a,b");
    bad_env("DD_API_KEY", "key with spaces");
    bad_env("DD_SITE", "datadoghq.com/x");
    bad_env("DD_PROFILING_AGENTLESS", "maybe");
    bad_env("PYROSCOPE_SERVER_ADDRESS", "localhost:4040");
    bad_env("PYROSCOPE_BASIC_AUTH_USER", "user:name");
    bad_env("PYROSCOPE_BASIC_AUTH_PASSWORD", "pass\r\nX-Injected: 1");
    bad_env("PYROSCOPE_AUTH_TOKEN", "token\nX-Injected: 1");
    bad_env("PYROSCOPE_TENANT_ID", "tenant\x7f");
    bad_env("PYROSCOPE_TENANT_ID", "team/a");
    bad_env("PYROSCOPE_TENANT_ID", "..");
    char long_tenant[152];
    memset(long_tenant, 'a', sizeof long_tenant - 1);
    long_tenant[sizeof long_tenant - 1] = 0;
    bad_env("PYROSCOPE_TENANT_ID", long_tenant); /* 151 bytes */
    /* A credential in the wrong field is not shown in the message. */
    clear_env();
    setenv("PYROSCOPE_BASIC_AUTH_USER", "123:glc_secret", 1);
    {
        ppk_pyroscope_config pc;
        ppk_pyroscope_config_init(&pc);
        char msg[256] = "";
        CHECK_EQ_INT(ppk_pyroscope_config_from_env(&pc, msg, sizeof msg), PPK_EINVAL);
        CHECK(strstr(msg, "PYROSCOPE_BASIC_AUTH_USER") && !strstr(msg, "glc_secret"));
        long_tenant[150] = 0; /* 150 bytes: taken */
        clear_env();
        setenv("PYROSCOPE_TENANT_ID", long_tenant, 1);
        CHECK_EQ_INT(ppk_pyroscope_config_from_env(&pc, msg, sizeof msg), 0);
        CHECK_EQ_U64(pc.tenant_id.len, 150);
    }
    bad_env("PYROSCOPE_APPLICATION_NAME", "app{x}");

    /* Host and port. */
    clear_env();
    setenv("DD_AGENT_HOST", "agent.local", 1);
    setenv("DD_TRACE_AGENT_PORT", "18126", 1);
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    char err[256] = "";
    CHECK_EQ_INT(ppk_datadog_config_from_env(&c, err, sizeof err), 0);
    CHECK_STR(c.agent_host.ptr, c.agent_host.len, "agent.local");
    CHECK_EQ_INT(c.agent_port, 18126);
    CHECK_EQ_INT(c.agent_url.len, 0);

    /* Errors in code name the field. */
    ppk_datadog_config_init(&c);
    c.agentless = 1;
    ppk_sink s;
    CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "api_key") != NULL);
    ppk_pyroscope_config pc;
    ppk_pyroscope_config_init(&pc);
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "application_name") != NULL);
    pc.application_name = PPK_STR("app");
    pc.tags = PPK_STR("novalue");
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "tags") != NULL);
    /* What Grafana Pyroscope refuses: an application name outside [A-Za-z0-9_.-]
     * (pkg/og/flameql/flameql.go), a tag key that is not a label name once '.' is '_'
     * (pkg/validation/validate.go). */
    static const char *bad_apps[] = {"my app", "app/x", "caf\xc3\xa9", "a:b", "a+b"};
    pc.tags = PPK_STR("");
    for (size_t i = 0; i < sizeof bad_apps / sizeof *bad_apps; i++) {
        pc.application_name = ppk_cstr(bad_apps[i]);
        CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), PPK_EINVAL);
        CHECK(strstr(err, "application_name") != NULL);
    }
    pc.application_name = PPK_STR("my-app.v2_x");
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), 0);
    s.destroy(s.opaque);
    static const char *bad_tags[] = {"1st=a", "k=v,9=x", "0.5=x"};
    for (size_t i = 0; i < sizeof bad_tags / sizeof *bad_tags; i++) {
        pc.tags = ppk_cstr(bad_tags[i]);
        CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), PPK_EINVAL);
        CHECK(strstr(err, "tags") != NULL);
    }
    pc.tags = PPK_STR("_x=1,service.version=2,.y=3");
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), 0);
    s.destroy(s.opaque);
    pc.tags = PPK_STR("");
    pc.tenant_id = PPK_STR("team a");
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "tenant_id") != NULL);
    pc.tenant_id = PPK_STR("team-a_(1)");
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), 0);
    s.destroy(s.opaque);
    pc.tenant_id = PPK_STR("");
    ppk_datadog_config_init(&c);
    c.upload.queue_len = 0;
    CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "queue_len") != NULL);
    CHECK_EQ_INT(ppk_sink_upload_stats(&s, &(ppk_upload_stats){0}), PPK_EINVAL);

    /* The environment drives a real upload: URL, service, env, version, DD_TAGS. */
    rx x;
    const char *expect =
        "{\"path\":\"/profiling/v1/input\",\"origin\":\"pprofkit\",\"origin_version\":\"" PPK_VERSION_STRING
        "\",\"family\":\"native\",\"endpoint_counts\":null,\"tags\":{\"service\":\"envsvc\","
        "\"env\":\"staging\",\"version\":\"3\",\"a\":\"1\",\"b\":\"2\",\"c\":\"x:y\"},"
        "\"sample_types\":" TYPES ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, NULL), 0);
    if (x.pid) {
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
        clear_env();
        setenv("DD_TRACE_AGENT_URL", url, 1);
        setenv("DD_AGENT_HOST", "ignored-when-url-is-set", 1);
        setenv("DD_SERVICE", "envsvc", 1);
        setenv("DD_ENV", "staging", 1);
        setenv("DD_VERSION", "3", 1);
        setenv("DD_TAGS", "a:1, b:2 c:x:y", 1);
        ppk_datadog_config_init(&c);
        CHECK_EQ_INT(ppk_datadog_config_from_env(&c, err, sizeof err), 0);
        CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), 0);
        export_once(s, 0);
        CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    }
    clear_env();
}

/* Every string of both configs, NULL with a length, in each mode: PPK_ENULL naming the
 * field, never a crash (tags, api_key, site and agent_host were read through NULL). */
static void test_null_strings(void) {
    static const struct {
        const char *name;
        size_t off;
    } dd[] = {
        {"agent_url", offsetof(ppk_datadog_config, agent_url)},
        {"agent_host", offsetof(ppk_datadog_config, agent_host)},
        {"api_key", offsetof(ppk_datadog_config, api_key)},
        {"site", offsetof(ppk_datadog_config, site)},
        {"intake_url", offsetof(ppk_datadog_config, intake_url)},
        {"service", offsetof(ppk_datadog_config, service)},
        {"env", offsetof(ppk_datadog_config, env)},
        {"version", offsetof(ppk_datadog_config, version)},
        {"host", offsetof(ppk_datadog_config, host)},
        {"runtime_id", offsetof(ppk_datadog_config, runtime_id)},
        {"tags", offsetof(ppk_datadog_config, tags)},
        {"family", offsetof(ppk_datadog_config, family)},
        {"language", offsetof(ppk_datadog_config, language)},
        {"profiler_name", offsetof(ppk_datadog_config, profiler_name)},
        {"profiler_version", offsetof(ppk_datadog_config, profiler_version)},
    }, py[] = {
        {"server_address", offsetof(ppk_pyroscope_config, server_address)},
        {"application_name", offsetof(ppk_pyroscope_config, application_name)},
        {"tags", offsetof(ppk_pyroscope_config, tags)},
        {"spy_name", offsetof(ppk_pyroscope_config, spy_name)},
        {"basic_auth_user", offsetof(ppk_pyroscope_config, basic_auth_user)},
        {"basic_auth_password", offsetof(ppk_pyroscope_config, basic_auth_password)},
        {"tenant_id", offsetof(ppk_pyroscope_config, tenant_id)},
    };
    char err[256], want[64];
    ppk_sink s;
    for (size_t i = 0; i < sizeof dd / sizeof *dd; i++) {
        for (int agentless = 0; agentless <= 1; agentless++) {
            ppk_datadog_config c;
            ppk_datadog_config_init(&c);
            c.agentless = agentless;
            c.api_key = PPK_STR("0123abcd"); /* agentless needs one */
            *(ppk_str *)((char *)&c + dd[i].off) = (ppk_str){NULL, 3};
            snprintf(want, sizeof want, "%s: NULL with a length", dd[i].name);
            strcpy(err, "");
            CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), PPK_ENULL);
            if (!strstr(err, want)) {
                fprintf(stderr, "datadog %s (agentless %d): \"%s\"\n", dd[i].name, agentless, err);
                CHECK(0);
            }
        }
    }
    for (size_t i = 0; i < sizeof py / sizeof *py; i++) {
        ppk_pyroscope_config c;
        ppk_pyroscope_config_init(&c);
        c.application_name = PPK_STR("app");
        c.basic_auth_user = PPK_STR("user");
        *(ppk_str *)((char *)&c + py[i].off) = (ppk_str){NULL, 3};
        snprintf(want, sizeof want, "%s: NULL with a length", py[i].name);
        strcpy(err, "");
        CHECK_EQ_INT(ppk_sink_pyroscope(&c, &s, err, sizeof err), PPK_ENULL);
        if (!strstr(err, want)) {
            fprintf(stderr, "pyroscope %s: \"%s\"\n", py[i].name, err);
            CHECK(0);
        }
    }
}

/* Strings that go into event.json, headers or URLs must be UTF-8: an invalid byte is
 * refused at creation, naming the field (a strict JSON reader rejects the event). */
static void test_invalid_utf8_refused(void) {
    static const struct {
        const char *name;
        size_t off;
        const char *bad;
    } dd[] = {
        {"service", offsetof(ppk_datadog_config, service), "svc\xff"},
        {"env", offsetof(ppk_datadog_config, env), "\xc3"},
        {"version", offsetof(ppk_datadog_config, version), "1.\xed\xa0\x80"}, /* surrogate */
        {"host", offsetof(ppk_datadog_config, host), "h\xc0\xaf"},            /* overlong */
        {"tags", offsetof(ppk_datadog_config, tags), "team:\xfe"},
        {"family", offsetof(ppk_datadog_config, family), "py\x80"},
        {"profiler_version", offsetof(ppk_datadog_config, profiler_version), "\xf8\x88"},
    };
    char err[256], want[64];
    ppk_sink s;
    for (size_t i = 0; i < sizeof dd / sizeof *dd; i++) {
        ppk_datadog_config c;
        ppk_datadog_config_init(&c);
        c.service = PPK_STR("svc");
        *(ppk_str *)((char *)&c + dd[i].off) = ppk_cstr(dd[i].bad);
        snprintf(want, sizeof want, "%s: not valid UTF-8", dd[i].name);
        strcpy(err, "");
        CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), PPK_EINVAL);
        if (!strstr(err, want)) {
            fprintf(stderr, "datadog %s: \"%s\"\n", dd[i].name, err);
            CHECK(0);
        }
    }
    /* The default service is the process name, which the kernel cuts at 15 bytes, maybe
     * inside a character: that must not make a default configuration invalid. */
    static const char cyrillic16[] = "\xd0\xb1\xd0\xb1\xd0\xb1\xd0\xb1"
                                     "\xd0\xb1\xd0\xb1\xd0\xb1\xd0\xb1";
    char name[32] = "";
    prctl(PR_GET_NAME, name);
    CHECK_EQ_INT(prctl(PR_SET_NAME, cyrillic16), 0);
    ppk_datadog_config dflt;
    ppk_datadog_config_init(&dflt);
    strcpy(err, "");
    CHECK_EQ_INT(ppk_sink_datadog(&dflt, &s, err, sizeof err), 0);
    if (err[0]) fprintf(stderr, "default config: %s\n", err);
    if (s.destroy) s.destroy(s.opaque);
    prctl(PR_SET_NAME, name);
    /* Valid UTF-8 beyond ASCII is taken. */
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.service = PPK_STR("caf\xc3\xa9-\xe2\x82\xac");
    c.tags = PPK_STR("team:\xf0\x9f\x90\x8d");
    CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), 0);
    if (s.destroy) s.destroy(s.opaque);
}

/* One rule per value wherever it is given: a port is 1..65535 in agent_port, in the
 * environment and in a URL (libcurl's parser reads URLs); an allocator needs both alloc
 * and free, in every config that takes one. */
static void *only_alloc(void *opaque, size_t n) {
    (void)opaque;
    return malloc(n);
}

static void test_one_rule_per_value(void) {
    bad_env("DD_TRACE_AGENT_URL", "http://agent:99999");
    bad_env("DD_TRACE_AGENT_URL", "http://agent:0");
    bad_env("PYROSCOPE_SERVER_ADDRESS", "http://localhost:99999");
    clear_env();
    ppk_sink s;
    char err[256] = "";
    static const struct {
        const char *url;
        int port, rc;
    } dd[] = {
        {"http://agent:99999", 0, PPK_EINVAL}, {"https://agent:65536/", 0, PPK_EINVAL},
        {"http://agent:0", 0, PPK_EINVAL},     {"http://agent:x1", 0, PPK_EINVAL},
        {NULL, 70000, PPK_EINVAL},             {NULL, -1, PPK_EINVAL},
        {"http://agent:65535", 0, 0},          {"http://[::1]:1/", 0, 0},
        {NULL, 65535, 0},                      {NULL, 0, 0},
    };
    for (size_t i = 0; i < sizeof dd / sizeof *dd; i++) {
        ppk_datadog_config c;
        ppk_datadog_config_init(&c);
        if (dd[i].url) c.agent_url = ppk_cstr(dd[i].url);
        c.agent_port = dd[i].port;
        int rc = ppk_sink_datadog(&c, &s, err, sizeof err);
        if (rc != dd[i].rc) fprintf(stderr, "case %zu: %d, \"%s\"\n", i, rc, err);
        CHECK_EQ_INT(rc, dd[i].rc);
        if (rc == 0) s.destroy(s.opaque);
        else CHECK(strstr(err, dd[i].url ? "agent_url" : "agent_port") != NULL);
    }
    ppk_pyroscope_config pc;
    ppk_pyroscope_config_init(&pc);
    pc.application_name = PPK_STR("app");
    pc.server_address = PPK_STR("http://localhost:99999");
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "server_address") != NULL);

    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.upload.allocator.alloc = only_alloc;
    CHECK_EQ_INT(ppk_sink_datadog(&c, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "allocator") != NULL);
    pc.server_address = PPK_STR("http://localhost:4040");
    pc.upload.allocator.alloc = only_alloc;
    CHECK_EQ_INT(ppk_sink_pyroscope(&pc, &s, err, sizeof err), PPK_EINVAL);
    CHECK(strstr(err, "allocator") != NULL);
    ppk_profile_config prc;
    ppk_profile_config_init(&prc);
    prc.allocator.alloc = only_alloc;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&prc, &p), PPK_EINVAL);
}

/* ---- failures ----------------------------------------------------------------------------- */

static ppk_datadog_config fast_cfg(void) {
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.service = PPK_STR("fail");
    c.upload.connect_timeout_ms = 1000;
    c.upload.timeout_ms = 1000;
    c.upload.retry_backoff_ms = 50;
    c.upload.shutdown_timeout_ms = 200;
    return c;
}

/* A bound socket that does not listen (it refuses connections) and its URL in url[64];
 * the socket, to close. */
static int refusing(char *url) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ_INT(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t al = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &al);
    snprintf(url, 64, "http://127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

static void test_connection_refused(void) {
    char url[64];
    int fd = refusing(url);
    ppk_datadog_config c = fast_cfg();
    ppk_sink s = dd_sink_to(url, &c);
    uint8_t buf[256];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.attempts, 2);
    CHECK_EQ_U64(st.fail_connect, 2);
    CHECK_EQ_U64(st.retries, 1);
    CHECK_EQ_U64(st.dropped_failed, 1);
    CHECK_EQ_U64(st.sent, 0);
    check_conserved(&st);
    s.destroy(s.opaque);
    close(fd);
}

/* The library's threads (the background exporter, an uploader) block signals: a
 * program that blocks SIGUSR1 in its threads and waits for it with sigtimedwait gets
 * it, while a library thread started before the program blocked it would take it (and
 * die of it: the default action ends the process). */
static void test_library_threads_block_signals(void) {
    ppk_recorder *r = make_recorder();
    CHECK_EQ_INT(ppk_recorder_start(r), 0); /* the exporter thread */
    char url[64];
    int fd = refusing(url);
    ppk_datadog_config c = fast_cfg();
    ppk_sink s = dd_sink_to(url, &c);
    uint8_t buf[64];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0); /* the uploader thread */
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    CHECK_EQ_INT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    CHECK_EQ_INT(kill(getpid(), SIGUSR1), 0);
    struct timespec wait = {5, 0};
    CHECK_EQ_INT(sigtimedwait(&usr1, NULL, &wait), SIGUSR1);
    CHECK_EQ_INT(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL), 0);
    s.destroy(s.opaque);
    close(fd);
    ppk_recorder_free(r);
}

/* The uploader thread cannot be created: the window waits in the sink's queue, so the
 * recorder counts no failure and no lost sample; a flush reports the failure and leaves
 * it queued; once threads can be made, a flush starts the thread and the window is sent,
 * once. A window still waiting at shutdown is counted as dropped_shutdown. */
static void test_thread_create_fails(void) {
    rx x;
    const char *expect =
        "{\"path\":\"/profiling/v1/input\",\"origin\":\"pprofkit\",\"origin_version\":\"" PPK_VERSION_STRING
        "\",\"family\":\"native\",\"endpoint_counts\":null,\"tags\":{\"service\":\"nothread\"},"
        "\"sample_types\":" TYPES ",\"totals\":[60,3],\"count\":1}";
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.service = PPK_STR("nothread");
    ppk_sink s = dd_sink_to(url, &c);
    ppk_recorder *r = make_recorder();
    record(r);
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &s), 0);

    atomic_store(&fail_threads, 1);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    ppk_recorder_stats rs;
    ppk_recorder_stats_get(r, &rs);
    CHECK_EQ_U64(rs.samples_exported, 3);
    CHECK_EQ_U64(rs.sink_failures, 0);
    CHECK_EQ_U64(rs.samples_lost_sink, 0);
    ppk_upload_stats st;
    CHECK_EQ_INT(ppk_sink_upload_stats(&s, &st), 0);
    CHECK_EQ_U64(st.queued, 1);
    CHECK_EQ_U64(st.queue_len, 1);
    CHECK_EQ_U64(st.attempts, 0);
    errno = 0;
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), PPK_ESYS);
    CHECK_EQ_INT(errno, EAGAIN);
    CHECK_EQ_INT(ppk_sink_upload_stats(&s, &st), 0);
    CHECK_EQ_U64(st.queue_len, 1);

    atomic_store(&fail_threads, 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    CHECK_EQ_INT(ppk_sink_upload_stats(&s, &st), 0);
    CHECK_EQ_U64(st.queued, 1);
    CHECK_EQ_U64(st.sent, 1);
    CHECK_EQ_U64(st.attempts, 1);
    CHECK_EQ_U64(st.queue_len, 0);
    check_conserved(&st);
    ppk_recorder_stats_get(r, &rs);
    CHECK_EQ_U64(rs.sink_failures, 0);
    CHECK_EQ_U64(rs.samples_lost_sink, 0);
    ppk_recorder_free(r); /* destroys the sink */
    CHECK_EQ_INT(rx_finish(&x, 0, 20000), 0);
    CHECK_EQ_INT(x.got, 1);

    /* Shut down while the thread still cannot be made: the waiting export is dropped. */
    int fd = refusing(url);
    ppk_datadog_config c2 = fast_cfg();
    ppk_sink s2 = dd_sink_to(url, &c2);
    uint8_t buf[64];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    atomic_store(&fail_threads, 1);
    CHECK_EQ_INT(s2.write(s2.opaque, &e), 0);
    CHECK_EQ_INT(ppk_sink_upload_shutdown(&s2), 0);
    atomic_store(&fail_threads, 0);
    CHECK_EQ_INT(ppk_sink_upload_stats(&s2, &st), 0);
    CHECK_EQ_U64(st.queued, 1);
    CHECK_EQ_U64(st.dropped_shutdown, 1);
    CHECK_EQ_U64(st.attempts, 0);
    CHECK_EQ_U64(st.queue_len, 0);
    check_conserved(&st);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s2, 1000), 0);
    s2.destroy(s2.opaque);
    close(fd);
}

/* A server answering `status` to everything: attempts and retries as expected. */
static void status_case(int status, int expect_attempts) {
    rx x;
    char expect[64];
    snprintf(expect, sizeof expect, "{\"status\":%d}", status);
    CHECK_EQ_INT(rx_start(&x, "status", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_datadog_config c = fast_cfg();
    ppk_sink s = dd_sink_to(url, &c);
    uint8_t buf[256];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 20000), 0);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.attempts, expect_attempts);
    CHECK_EQ_U64(st.retries, expect_attempts - 1);
    CHECK_EQ_U64(status >= 500 ? st.fail_http_5xx : st.fail_http_4xx, expect_attempts);
    CHECK_EQ_U64(st.dropped_failed, 1);
    CHECK_EQ_U64(st.sent, 0);
    CHECK_EQ_INT(st.last_http_status, status);
    check_conserved(&st);
    s.destroy(s.opaque);
    usleep(200000); /* an unexpected extra request would show up here */
    rx_finish(&x, 1, 10000);
    CHECK_EQ_INT(x.got, expect_attempts);
}

static void test_http_500_retried_once(void) { status_case(500, 2); }
static void test_http_413_not_retried(void) { status_case(413, 1); }

/* A server that never answers: writes return at once; transfers time out, counted. */
static void test_never_answers(void) {
    rx x;
    char url[64];
    if (hang_server(&x, url)) return;
    ppk_datadog_config c = fast_cfg();
    c.upload.timeout_ms = 1500;
    ppk_sink s = dd_sink_to(url, &c);
    uint8_t buf[512];
    for (uint64_t i = 1; i <= 5; i++) {
        ppk_export e = fake_export(buf, sizeof buf, i);
        CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    }
    /* Had a write waited for the network, a transfer would have ended by now. */
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.queued, 5);
    CHECK_EQ_U64(st.fail_timeout, 0);
    CHECK_EQ_U64(st.sent + st.dropped_failed, 0);
    CHECK(st.queue_peak <= 2);
    CHECK(st.dropped_queue_full == 2 || st.dropped_queue_full == 3);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 30000), 0);
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.sent, 0);
    CHECK_EQ_U64(st.fail_timeout, st.attempts);
    CHECK_EQ_U64(st.attempts, 2 * (5 - st.dropped_queue_full));
    CHECK_EQ_U64(st.dropped_failed, 5 - st.dropped_queue_full);
    check_conserved(&st);
    s.destroy(s.opaque);
    rx_finish(&x, 1, 10000);
}

/* A server that reads the request 64 bytes per 100 ms: the total timeout ends it. */
static void test_slow_reader(void) {
    rx x;
    CHECK_EQ_INT(rx_start(&x, "slowread", "{}", NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_datadog_config c = fast_cfg();
    ppk_sink s = dd_sink_to(url, &c);
    static uint8_t buf[4096];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    CHECK_EQ_INT(rx_wait_got(&x, 0, 0), 0);
    for (uint64_t i = 2; i <= 4; i++) { /* while it is stuck: not blocked, bounded */
        e = fake_export(buf, sizeof buf, i);
        CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    }
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK(st.queue_peak <= 2);
    CHECK_EQ_U64(st.fail_timeout, 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 60000), 0);
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.sent, 0);
    CHECK(st.fail_timeout >= 2);
    CHECK_EQ_U64(st.fail_timeout, st.attempts);
    check_conserved(&st);
    s.destroy(s.opaque);
    rx_finish(&x, 1, 10000);
}

/* Many large exports while the server hangs: memory stays within the queue's bound. */
static void test_memory_bounded(void) {
    rx x;
    char url[64];
    if (hang_server(&x, url)) return;
    ppk_datadog_config c = fast_cfg();
    c.upload.timeout_ms = 20000;
    ppk_sink s = dd_sink_to(url, &c);
    enum { N = 64 * 1024 };
    static uint8_t buf[N];
    for (uint64_t i = 1; i <= 20; i++) {
        ppk_export e = fake_export(buf, N, i);
        CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    }
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.queue_peak, 2);
    CHECK(st.queue_len <= 2);
    CHECK(st.dropped_queue_full >= 17);
    /* Two queued, one in flight (its copy and its request body): far below 20 exports. */
    CHECK(st.memory_peak_bytes < 5 * (N + 16384));
    CHECK_EQ_INT(ppk_sink_upload_shutdown(&s), 0);
    ppk_sink_upload_stats(&s, &st);
    CHECK(st.dropped_shutdown >= 1);
    CHECK_EQ_U64(st.queue_len, 0);
    check_conserved(&st);
    s.destroy(s.opaque);
    rx_finish(&x, 1, 10000);
}

/* Shutdown with an upload in flight to a server that never answers: bounded, counted. */
static void test_shutdown_cancels(void) {
    rx x;
    char url[64];
    if (hang_server(&x, url)) return;
    ppk_datadog_config c = fast_cfg();
    c.upload.timeout_ms = 60000;
    ppk_sink s = dd_sink_to(url, &c);
    uint8_t buf[256];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    CHECK_EQ_INT(rx_wait_got(&x, 1, 15000), 1);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 100), PPK_ETIMEDOUT); /* it is in flight */
    e = fake_export(buf, sizeof buf, 2);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    int64_t t0 = now_ms();
    CHECK_EQ_INT(ppk_sink_upload_shutdown(&s), 0);
    /* Far below the 60 s transfer timeout: the transfer was cancelled. */
    CHECK(now_ms() - t0 < 10000);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.dropped_shutdown, 2);
    CHECK_EQ_U64(st.sent, 0);
    CHECK_EQ_INT(s.write(s.opaque, &e), PPK_ECLOSED);
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.dropped_shutdown, 3);
    check_conserved(&st);
    s.destroy(s.opaque);
    rx_finish(&x, 1, 10000);
}

/* ppk_recorder_free with three upload sinks whose transfers hang on a server that never
 * answers: the sinks are shut down together, so freeing the recorder takes one
 * shutdown_timeout_ms (and the cancelled transfers' ends), not one per sink. */
static void test_free_shuts_sinks_down_together(void) {
    rx x;
    char url[64];
    if (hang_server(&x, url)) return;
    ppk_datadog_config c = fast_cfg();
    c.upload.timeout_ms = 60000;
    c.upload.shutdown_timeout_ms = 1500;
    ppk_recorder *r = make_recorder();
    if (!r) return;
    ppk_sink sinks[3];
    for (int i = 0; i < 3; i++) {
        sinks[i] = dd_sink_to(url, &c);
        CHECK_EQ_INT(ppk_recorder_add_sink(r, &sinks[i]), 0);
    }
    record(r);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    /* Each sink's transfer is in flight; if not, what became of each. */
    int got = rx_wait_got(&x, 3, 15000);
    CHECK_EQ_INT(got, 3);
    if (got < 3)
        for (int i = 0; i < 3; i++) {
            ppk_upload_stats st;
            ppk_sink_upload_stats(&sinks[i], &st);
            fprintf(stderr,
                    "  sink %d: queued %llu attempts %llu retries %llu fail_connect %llu "
                    "fail_timeout %llu fail_other %llu dropped_failed %llu\n",
                    i, (unsigned long long)st.queued, (unsigned long long)st.attempts,
                    (unsigned long long)st.retries, (unsigned long long)st.fail_connect,
                    (unsigned long long)st.fail_timeout, (unsigned long long)st.fail_other,
                    (unsigned long long)st.dropped_failed);
        }
    int64_t t0 = now_ms();
    ppk_recorder_free(r);
    int64_t took = now_ms() - t0;
    /* The drains waited their 1.5 s; one after another they would take 4.5 s. */
    CHECK(took >= 1400);
    CHECK(took < 3000);
    fprintf(stderr, "  recorder_free with 3 hung sinks: %lld ms\n", (long long)took);
    rx_finish(&x, 1, 10000);
}

/* Bounds test_shutdown_concurrent: a deadlock fails the run instead of hanging it. */
static volatile pid_t watchdog_rx_pid;

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_upload: timed out (shutdowns deadlocked?)\n";
    ssize_t n = write(2, msg, sizeof msg - 1);
    (void)n;
    if (watchdog_rx_pid > 0) kill(watchdog_rx_pid, SIGKILL);
    _exit(1);
}

static ppk_sink shut_sink;

static void *shutdown_thread(void *arg) {
    (void)arg;
    return (void *)(intptr_t)ppk_sink_upload_shutdown(&shut_sink);
}

/* Makes shut_sink with an upload stuck in flight (request `nth` to a server that never
 * answers), starts a thread in ppk_sink_upload_shutdown and returns once the shutdown has
 * begun (a write is refused). That thread then waits out shutdown_timeout_ms (1 s), the
 * window in which the caller's own calls overlap it. */
static int begin_stuck_shutdown(rx *x, int nth, pthread_t *t) {
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x->port);
    ppk_datadog_config c = fast_cfg();
    c.upload.timeout_ms = 60000;
    c.upload.shutdown_timeout_ms = 1000;
    shut_sink = dd_sink_to(url, &c);
    uint8_t buf[256];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    CHECK_EQ_INT(shut_sink.write(shut_sink.opaque, &e), 0);
    CHECK_EQ_INT(rx_wait_got(x, nth, 15000), nth);
    if (pthread_create(t, NULL, shutdown_thread, NULL)) return -1;
    for (uint64_t seq = 2;; seq++) {
        e = fake_export(buf, sizeof buf, seq);
        int rc = shut_sink.write(shut_sink.opaque, &e);
        if (rc == PPK_ECLOSED) return 0;
        CHECK_EQ_INT(rc, 0);
        usleep(1000);
    }
}

/* Shutdown is thread safe: overlapping shutdowns, and a shutdown overlapping destroy, stop
 * the sink once (one join of the uploader thread) and all return; none hangs. */
static void test_shutdown_concurrent(void) {
    rx x;
    CHECK_EQ_INT(rx_start(&x, "hang", "{}", NULL), 0);
    if (!x.pid) return;
    watchdog_rx_pid = x.pid;
    signal(SIGALRM, on_alarm);
    alarm(60);

    /* Three shutdowns at once. */
    pthread_t t1, t2;
    void *r1 = NULL, *r2 = NULL;
    CHECK_EQ_INT(begin_stuck_shutdown(&x, 1, &t1), 0);
    CHECK_EQ_INT(pthread_create(&t2, NULL, shutdown_thread, NULL), 0);
    CHECK_EQ_INT(ppk_sink_upload_shutdown(&shut_sink), 0);
    CHECK_EQ_INT(pthread_join(t1, &r1), 0);
    CHECK_EQ_INT(pthread_join(t2, &r2), 0);
    CHECK_EQ_INT((intptr_t)r1, 0);
    CHECK_EQ_INT((intptr_t)r2, 0);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&shut_sink, &st);
    CHECK_EQ_U64(st.sent, 0);
    CHECK_EQ_U64(st.queue_len, 0);
    CHECK(st.dropped_shutdown >= 2); /* the stuck upload and the refused write */
    check_conserved(&st);
    shut_sink.destroy(shut_sink.opaque);

    /* A shutdown overlapping destroy (as with ppk_recorder_free). */
    CHECK_EQ_INT(begin_stuck_shutdown(&x, 2, &t1), 0);
    shut_sink.destroy(shut_sink.opaque);
    CHECK_EQ_INT(pthread_join(t1, &r1), 0);
    CHECK_EQ_INT((intptr_t)r1, 0);
    /* A shutdown that comes after destroy finds the sink gone and touches nothing (it
     * read freed memory before: ASan). */
    CHECK_EQ_INT(ppk_sink_upload_shutdown(&shut_sink), PPK_ECLOSED);

    alarm(0);
    signal(SIGALRM, SIG_DFL);
    watchdog_rx_pid = 0;
    rx_finish(&x, 1, 10000);
}

static void test_pyroscope_refuses_zstd(void) {
    ppk_pyroscope_config c;
    ppk_pyroscope_config_init(&c);
    c.server_address = PPK_STR("http://127.0.0.1:9");
    c.application_name = PPK_STR("app");
    ppk_sink s;
    CHECK_EQ_INT(ppk_sink_pyroscope(&c, &s, NULL, 0), 0);
    uint8_t buf[64];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    e.codec = PPK_CODEC_ZSTD;
    CHECK_EQ_INT(s.write(s.opaque, &e), PPK_EINVAL);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.dropped_invalid, 1);
    CHECK_EQ_U64(st.attempts, 0);
    check_conserved(&st);
    s.destroy(s.opaque);
}

/* ---- fork ---------------------------------------------------------------------------------- */

/* An upload is in flight (the server holds its answer 5 s) when the process forks: it is
 * aborted before fork and sent again by the parent; the child sends its own export with
 * its own thread. The receiver sees three valid requests from two processes. */
#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer's runtime refuses a thread started in the child of a multi-threaded
 * fork on the stack glibc hands back from a parent's thread ("dup thread with used id"),
 * as test_fork.c explains: under it the child only checks that it starts empty, and does
 * not start its uploader. The parent's half (abort before fork, send again) still runs. */
#define CHILD_UPLOADS 0
#define FORK_EXPECT_TAIL "\"count\":2,\"delay_first\":5,\"distinct_pids\":1}"
#else
#define CHILD_UPLOADS 1
#define FORK_EXPECT_TAIL "\"count\":3,\"delay_first\":5,\"distinct_pids\":2}"
#endif

static void test_fork_in_flight(void) {
    rx x;
    const char *expect =
        "{\"path\":\"/profiling/v1/input\",\"origin\":\"pprofkit\",\"origin_version\":\"" PPK_VERSION_STRING
        "\",\"family\":\"native\",\"endpoint_counts\":null,\"tags\":{\"service\":\"forky\"},"
        "\"sample_types\":" TYPES ",\"totals\":[60,3]," FORK_EXPECT_TAIL;
    CHECK_EQ_INT(rx_start(&x, "datadog", expect, NULL), 0);
    if (!x.pid) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_datadog_config c;
    ppk_datadog_config_init(&c);
    c.service = PPK_STR("forky");
    c.upload.fork_timeout_ms = 4000;
    c.upload.timeout_ms = 20000;
    ppk_sink s = dd_sink_to(url, &c);
    ppk_recorder *r = make_recorder();
    if (!r) return;
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &s), 0);
    record(r);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    CHECK_EQ_INT(rx_wait_got(&x, 1, 15000), 1); /* the server holds it now */

    pid_t child = fork();
    if (child == 0) {
        alarm(30);
        close(x.fd);
        int ok = 1;
        ppk_upload_stats st;
        ppk_sink_upload_stats(&s, &st);
        ok &= st.queued == 0 && st.queue_len == 0; /* the parent's work stayed there */
        if (!CHILD_UPLOADS) _exit(ok ? 0 : 1);
        record(r);
        ok &= ppk_recorder_export(r, NULL) == 0;
        ok &= ppk_sink_upload_flush(&s, 20000) == 0;
        ppk_sink_upload_stats(&s, &st);
        ok &= st.sent == 1 && st.attempts == 1;
        if (!ok)
            fprintf(stderr, "child: queued %llu sent %llu attempts %llu\n",
                    (unsigned long long)st.queued, (unsigned long long)st.sent,
                    (unsigned long long)st.attempts);
        ppk_recorder_free(r);
        _exit(ok ? 0 : 1);
    }
    CHECK(child > 0);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 30000), 0);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.sent, 1);
    CHECK_EQ_U64(st.fork_restarts, 1);
    CHECK_EQ_U64(st.attempts, 2);
    CHECK_EQ_U64(st.retries, 0);
    check_conserved(&st);
    int status = -1;
    int64_t deadline = now_ms() + 40000;
    while (waitpid(child, &status, WNOHANG) == 0 && now_ms() < deadline) usleep(20000);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ppk_recorder_free(r);
    CHECK_EQ_INT(rx_finish(&x, 0, 30000), 0);
}

/* A fork while an upload is in flight to a server that never answers: the uploader's
 * fork handler waits for the transfer to abort. Flushes must go on meanwhile (G5): no
 * recorder lock may be held while that handler waits, whichever of the sink and the
 * recorder was made first. Run in a child process of its own, before anything else of
 * the library in that process: there the sink is made first (the order the header
 * recommends), so its fork handlers are the first registered. */
static atomic_int g_flushing;
static atomic_long g_flushes;

static void *flush_loop(void *arg) {
    ppk_sample *s = NULL;
    if (ppk_sample_create(arg, &s)) return NULL;
    while (atomic_load(&g_flushing)) {
        if (ppk_sample_start(s) == 0 &&
            ppk_sample_push_frame(s, PPK_STR("f"), PPK_STR("f.py"), 1, 0) == 0 &&
            ppk_sample_flush(s) == 0)
            atomic_fetch_add(&g_flushes, 1);
    }
    ppk_sample_free(s);
    return NULL;
}

static int fork_during_upload(void) {
    rx x;
    if (rx_start(&x, "hang", "{}", NULL) || !x.pid) return 1;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", x.port);
    ppk_datadog_config c = fast_cfg();
    c.upload.timeout_ms = 20000;
    c.upload.fork_timeout_ms = 5000;
    ppk_sink s = dd_sink_to(url, &c);
    ppk_recorder *r = make_recorder();
    if (!r || ppk_recorder_add_sink(r, &s)) return 1;
    atomic_store(&g_flushing, 1);
    pthread_t t;
    pthread_create(&t, NULL, flush_loop, r);
    usleep(20000);
    /* A fork with nothing in flight: fork() itself, during which the recorder's handler
     * holds its locks (G6), slow under ThreadSanitizer. */
    int64_t p0 = now_ms();
    pid_t plain = fork();
    if (plain == 0) _exit(0);
    int64_t plain_ms = now_ms() - p0;
    waitpid(plain, NULL, 0);
    record(r);
    ppk_recorder_export(r, NULL);
    if (rx_wait_got(&x, 1, 15000) != 1) return 1; /* in flight: the server holds it */
    long before = atomic_load(&g_flushes);
    int64_t t0 = now_ms();
    pid_t child = fork();
    if (child == 0) _exit(0);
    int64_t fork_ms = now_ms() - t0;
    long during = atomic_load(&g_flushes) - before;
    atomic_store(&g_flushing, 0);
    pthread_join(t, NULL);
    waitpid(child, NULL, 0);
    printf("fork with an upload in flight: %lld ms (without: %lld ms), %ld flushes "
           "meanwhile\n", (long long)fork_ms, (long long)plain_ms, during);
    fflush(stdout);
    ppk_recorder_free(r);
    rx_finish(&x, 1, 10000);
    /* The fork waits for the abort: ~1 ms when the transfer's socket is shut down (then
     * there is nothing to tell), up to the progress callback's interval when it is not
     * (a transfer still resolving or connecting). In a slow one, a flusher left to run
     * makes thousands of flushes (tens on a loaded machine, under ThreadSanitizer);
     * one blocked by a recorder lock makes none, or the few it finished before the
     * recorder's handler took its locks. The time fork() itself takes (plain_ms) is no
     * wait for the upload. */
    if (fork_ms < plain_ms + 20) return 0; /* too quick to tell: nothing to check */
    return during >= 10 ? 0 : 2;
}

/* A process that forks again and again while an upload is in flight: each fork aborts
 * the transfer at once (its socket shut down) and the parent sends it again, but not
 * forever: the fourth abort in a row drops it, counted as failed (pprofkit.h). */
static void test_forks_do_not_restart_forever(void) {
    rx x;
    char url[64];
    if (hang_server(&x, url)) return;
    ppk_datadog_config c = fast_cfg();
    c.upload.timeout_ms = 30000;
    c.upload.fork_timeout_ms = 10000;
    ppk_sink s = dd_sink_to(url, &c);
    uint8_t buf[256];
    ppk_export e = fake_export(buf, sizeof buf, 1);
    CHECK_EQ_INT(s.write(s.opaque, &e), 0);
    int64_t slowest = 0;
    for (int i = 1; i <= 4; i++) {
        CHECK_EQ_INT(rx_wait_got(&x, i, 15000), i); /* attempt i is in flight */
        int64_t t0 = now_ms();
        pid_t child = fork();
        if (child == 0) _exit(0);
        int64_t took = now_ms() - t0;
        if (took > slowest) slowest = took;
        CHECK(child > 0);
        waitpid(child, NULL, 0);
    }
    /* Far below the transfer's 30 s and the fork timeout's 10 s: not waited for. */
    CHECK(slowest < 2000);
    CHECK_EQ_INT(ppk_sink_upload_flush(&s, 10000), 0);
    ppk_upload_stats st;
    ppk_sink_upload_stats(&s, &st);
    CHECK_EQ_U64(st.attempts, 4);
    CHECK_EQ_U64(st.fork_restarts, 3);
    CHECK_EQ_U64(st.dropped_failed, 1);
    CHECK_EQ_U64(st.sent, 0);
    check_conserved(&st);
    fprintf(stderr, "  4 forks with an upload in flight: the slowest took %lld ms\n",
            (long long)slowest);
    s.destroy(s.opaque);
    rx_finish(&x, 1, 10000);
}

static void test_fork_does_not_stall_flushes(void) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        _exit(fork_during_upload());
    }
    int status = -1;
    CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WEXITSTATUS(status), 0);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    RUN(test_fork_does_not_stall_flushes); /* first: see its comment */
    RUN(test_datadog_agent_tcp);
    RUN(test_datadog_agent_unix);
    RUN(test_datadog_agentless);
    RUN(test_datadog_runtime_id_escaped);
    RUN(test_datadog_container_id_parse);
    RUN(test_datadog_container_headers);
    RUN(test_pyroscope);
    RUN(test_pyroscope_env_credentials);
    RUN(test_pyroscope_until_far_future);
    RUN(test_pyroscope_label_names);
    RUN(test_env_config);
    RUN(test_null_strings);
    RUN(test_invalid_utf8_refused);
    RUN(test_connection_refused);
    RUN(test_library_threads_block_signals);
    RUN(test_thread_create_fails);
    RUN(test_http_500_retried_once);
    RUN(test_http_413_not_retried);
    RUN(test_one_rule_per_value);
    RUN(test_never_answers);
    RUN(test_free_shuts_sinks_down_together);
    RUN(test_slow_reader);
    RUN(test_memory_bounded);
    RUN(test_shutdown_cancels);
    RUN(test_shutdown_concurrent);
    RUN(test_pyroscope_refuses_zstd);
    RUN(test_fork_in_flight);
    RUN(test_forks_do_not_restart_forever);
    return check_summary();
}
