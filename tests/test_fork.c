/*
 * test_fork.c - fork() while threads record and an export runs (G6), and conservation in
 * the parent afterwards (G3).
 *
 * Case 1, export in flight: producer threads build samples continuously (sched_yield()
 * between calls, so some are always half-built), an export is blocked inside a sink, and
 * the forking thread itself is in the middle of a sample. In the child:
 *   - an immediate export returns (no lock or export left held) and holds 0 samples;
 *   - new builders work on two threads at once, and the forking thread's half-built
 *     sample can be finished; the next export holds exactly those samples, with their
 *     values, and nothing of the parent's;
 *   - the child exits with _exit(0) only if all of this held; the parent checks it.
 * The parent releases the sink and goes on; every sample it flushed (counted when flush
 * returned 0) is in exactly one of its exports, with its values.
 *
 * Case 2, background exporter: a recorder with a file sink and a 20 ms export period runs
 * while producers flush; after fork the child flushes its own samples and sees files named
 * with its own pid appear (its exporter thread was started again), holding exactly its
 * samples once it stops; the parent's files hold exactly the parent's samples.
 *
 * Case 3, fork during encoding: producers flush while a thread exports back to back
 * (most of its time in encoding and compressing, with no lock held); 40 forks land at
 * random points of that; each child's exports must work and hold exactly its samples
 * (the encoder's buffer an export was using is the parent's), and the parent's exports
 * hold every sample it flushed, once.
 *
 * The producers and the conservation check are tests/conserve.h's.
 *
 * Every case runs twice: with one shard, and with the recorder in three shards (the
 * producers' builders spread over them, every shard's lock taken at fork).
 *
 * Every wait is bounded (alarm() in the child, a deadline for waitpid in the parent), so a
 * deadlock fails the test instead of hanging it.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "conserve.h"
#include "pprof_read.h"
#include "pprofkit.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 5
#else
#define SLOW 1
#endif

#if defined(__SANITIZE_THREAD__)
/* The child of a multi-threaded parent starts threads: ThreadSanitizer allows it with
 * die_after_fork=0 (by default it dies then). In such a child it checks nothing: it
 * ignores every access and synchronization from the fork on. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "die_after_fork=0"; }
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FORK_LOCKED_MALLOC 1
/*
 * The malloc of GCC 12's AddressSanitizer and ThreadSanitizer runtimes is not
 * fork-safe: neither takes its allocator's locks across a fork (AddressSanitizer has no
 * fork handler; ThreadSanitizer's takes its thread registry's and report locks only).
 * A child deadlocks in a malloc or free that needs a lock another thread of the parent
 * held at the fork (gdb: SizeClassAllocator64::GetFromAllocator waiting on a size
 * class's region mutex, under either; under ThreadSanitizer also, in this test's case 3,
 * DenseSlabAlloc::Refill under MetaMap::AllocBlock spinning on the lock of the heap
 * blocks' metadata). glibc's malloc takes its locks across a fork; under a
 * sanitizer the recorders of this test get an allocator that does the same, and the
 * test's own threads that run across forks allocate under the same lock (keep_export),
 * so that no thread is inside malloc or free when a fork happens and the test proves
 * the library's fork handling, not the sanitizer's. A recorder makes every allocation
 * through its allocator.
 */
static pthread_mutex_t g_alloc_lock = PTHREAD_MUTEX_INITIALIZER;

static void *locked_alloc(void *opaque, size_t size) {
    (void)opaque;
    pthread_mutex_lock(&g_alloc_lock);
    void *p = malloc(size);
    pthread_mutex_unlock(&g_alloc_lock);
    return p;
}

static void locked_free(void *opaque, void *ptr, size_t size) {
    (void)opaque;
    (void)size;
    pthread_mutex_lock(&g_alloc_lock);
    free(ptr);
    pthread_mutex_unlock(&g_alloc_lock);
}

static void alloc_lock(void) { pthread_mutex_lock(&g_alloc_lock); }
static void alloc_unlock(void) { pthread_mutex_unlock(&g_alloc_lock); }
#endif

/* cv_add (it allocates) on a thread that may run while another forks. */
static void keep_export(cv_exports *b, const uint8_t *data, size_t len) {
#if defined(FORK_LOCKED_MALLOC)
    alloc_lock();
#endif
    cv_add(b, data, len);
#if defined(FORK_LOCKED_MALLOC)
    alloc_unlock();
#endif
}

#define PRODUCERS 3
#define MAX_PER_THREAD 200000

/*
 * Threads that exist at a fork run on stacks of our own. glibc gives a child the cached
 * stacks of its parent's threads, so a thread created in the child would otherwise get
 * the same pthread_t as one of them, which ThreadSanitizer's registry (still holding the
 * parent's threads) refuses ("dup thread with used id"). The library's own exporter
 * thread has a default stack: under ThreadSanitizer, case 2, whose child restarts that
 * thread, is skipped (it runs in the normal and AddressSanitizer builds).
 */
#define STACK_SIZE (1u << 20)

typedef struct thread {
    pthread_t tid;
    void *stack;
} thread;

static int spawn(thread *th, void *(*fn)(void *), void *arg) {
    pthread_attr_t attr;
    th->stack = NULL;
    if (posix_memalign(&th->stack, 4096, STACK_SIZE) != 0) return -1;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, th->stack, STACK_SIZE);
    int rc = pthread_create(&th->tid, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(th->stack);
        th->stack = NULL;
    }
    return rc;
}

static void join(thread *th, void **ret) {
    pthread_join(th->tid, ret);
    free(th->stack);
    th->stack = NULL;
}

/* The exit status of a process whose alarm went off. It is none of the statuses a child
 * returns for a failed check (1 to 4), so the parent tells a hang from a failure. */
#define EXIT_TIMED_OUT 124

/* A deadlock fails the test with a message instead of hanging it (the child of a fork
 * inherits the handler and sets its own alarm). */
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_fork: timed out (a deadlock?)\n";
    ssize_t n = write(2, msg, sizeof msg - 1);
    (void)n;
    _exit(EXIT_TIMED_OUT);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The recorder's shards in the tests below: 1, then 3 (the "sharded" runs). */
static size_t g_shards = 1;

static void config(ppk_recorder_config *cfg, ppk_codec codec) {
    ppk_recorder_config_init(cfg);
    cfg->shards = g_shards;
    cfg->profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg->profile.sample_types[1] = (ppk_value_type){PPK_STR("weight"), PPK_STR("units")};
    cfg->profile.n_sample_types = 2;
    cfg->codec = codec;
#if defined(FORK_LOCKED_MALLOC)
    cfg->profile.allocator = (ppk_allocator){locked_alloc, locked_free, NULL};
#endif
}

/* ---------------------------------------------------------------------------------- */
/* producers and the conservation check                                               */

/* Producers (tests/conserve.h) on threads of our own stacks (spawn). */
static void start_producers(cv_producer *prod, thread *th, int n, ppk_recorder *r,
                            atomic_int *stop) {
    cv_prepare(prod, n, r, 2, MAX_PER_THREAD, stop, 1);
    for (int t = 0; t < n; t++) CHECK_EQ_INT(spawn(&th[t], cv_produce, &prod[t]), 0);
}

static long join_producers(cv_producer *prod, thread *th, int n) {
    for (int t = 0; t < n; t++) join(&th[t], NULL);
    return cv_accepted(prod, n);
}

/* The parent's exports `got` (all of them, in order) hold every sample its producers
 * flushed exactly once, and its statistics agree. */
static void check_parent(ppk_recorder *r, const cv_exports *got, const cv_producer *prod,
                         long accepted) {
    cv_result res;
    cv_check(got, prod, PRODUCERS, &(cv_opts){NULL, 1, 0}, &res);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_flushed, (uint64_t)accepted);
    CHECK_EQ_U64(st.samples_exported, st.samples_flushed);
    CHECK_EQ_U64(st.windows_exported, got->n);
}

/* Waits for `pid` until the deadline; kills it then. @return its status, or -1. */
static int wait_child(pid_t pid, double seconds) {
    double end = now_s() + seconds;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) return status;
        if (w < 0) return -1;
        if (now_s() > end) {
            fprintf(stderr, "child %ld still running after %.0f s: killed\n", (long)pid,
                    seconds);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        sleep_ms(5);
    }
}

static void check_child_status(int status) {
    CHECK(status != -1);
    if (status == -1) return;
    if (WIFSIGNALED(status)) fprintf(stderr, "child killed by signal %d\n", WTERMSIG(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_TIMED_OUT)
        fprintf(stderr, "child timed out: its alarm went off before it ended\n");
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
}

/* ---------------------------------------------------------------------------------- */
/* case 1: fork while an export is blocked in a sink                                   */

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int block;   /* the next write blocks until released */
    int blocked; /* a write is blocked now */
    int released;
    cv_exports *out;
} gate;

static int gate_write(void *opaque, const ppk_export *e) {
    gate *g = opaque;
    keep_export(g->out, e->data.data, e->data.len);
    pthread_mutex_lock(&g->mu);
    if (g->block) {
        g->block = 0;
        g->blocked = 1;
        pthread_cond_broadcast(&g->cv);
        while (!g->released) pthread_cond_wait(&g->cv, &g->mu);
        g->blocked = 0;
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static void *export_to_sinks(void *arg) {
    int rc = ppk_recorder_export((ppk_recorder *)arg, NULL);
    return (void *)(intptr_t)rc;
}

typedef struct child_flusher {
    ppk_recorder *r;
    int t;
    int n;
    int ok;
} child_flusher;

static void *child_flush(void *arg) {
    child_flusher *c = arg;
    ppk_sample *s = NULL;
    if (ppk_sample_create(c->r, &s) != 0) return NULL;
    for (int i = 0; i < c->n; i++) {
        char task[32];
        snprintf(task, sizeof task, "child-%d-%d", c->t, i);
        int rc = ppk_sample_start(s);
        if (!rc) rc = ppk_sample_push_frame(s, PPK_STR("child_fn"), PPK_STR("c.py"), i, 0);
        if (!rc) rc = ppk_sample_push_label_str(s, PPK_STR("task name"), ppk_cstr(task));
        if (!rc) rc = ppk_sample_set_value(s, 0, 1);
        if (!rc) rc = ppk_sample_set_value(s, 1, 1000 + i);
        if (!rc) rc = ppk_sample_flush(s);
        c->ok += rc == 0;
    }
    ppk_sample_free(s);
    return NULL;
}

/* In the child of case 1. Returns the exit status. */
static int child_case1(ppk_recorder *r, ppk_sample *half, int64_t before_fork) {
    alarm(30 * SLOW);
    int before = check_failures_;
    int64_t entered = ppk_now_ns();
    sleep_ms(5);

    /* Usable and empty: nothing of the parent's, and no wait for its export. Its
     * window starts at the fork (not when the child first used the recorder). */
    ppk_export e;
    memset(&e, 0, sizeof e);
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    CHECK(e.start_ns >= before_fork && e.start_ns <= entered);
    pr_profile pp;
    if (pr_parse(e.data.data, e.data.len, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 0);
        pr_free(&pp);
    } else {
        CHECK(0);
    }
    ppk_export_free(&e);

    /* Two threads flush at once; the half-built sample of the forking thread ends. */
    child_flusher c[2] = {{r, 0, 300, 0}, {r, 1, 300, 0}};
    thread tid[2];
    for (int i = 0; i < 2; i++) CHECK_EQ_INT(spawn(&tid[i], child_flush, &c[i]), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(half, PPK_STR("main"), PPK_STR("m.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_set_value(half, 1, 7), 0);
    CHECK_EQ_INT(ppk_sample_flush(half), 0);
    for (int i = 0; i < 2; i++) join(&tid[i], NULL);
    CHECK_EQ_INT(c[0].ok + c[1].ok, 600);

    memset(&e, 0, sizeof e);
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    if (pr_parse(e.data.data, e.data.len, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 601);
        int64_t sum = 0;
        long child = 0, forked = 0, other = 0;
        for (size_t j = 0; j < pp.nsamples; j++) {
            pr_str task = pr_label_str(&pp, &pp.samples[j], "task name");
            sum += pp.samples[j].val[1];
            if (task.ptr && task.len > 6 && !memcmp(task.ptr, "child-", 6))
                child++;
            else if (pr_streq(task, "forking"))
                forked++;
            else
                other++;
        }
        CHECK_EQ_INT(child, 600);
        CHECK_EQ_INT(forked, 1);
        CHECK_EQ_INT(other, 0);
        CHECK_EQ_INT(sum, 2 * (300 * 1000 + 299 * 300 / 2) + 7);
        pr_free(&pp);
    } else {
        CHECK(0);
    }
    CHECK_EQ_U64(e.stats.samples_added, 601);
    ppk_export_free(&e);
    /* The sinks (the parent's gate, whose lock may be copied held) are not called:
     * no ppk_recorder_free here. */
    return check_failures_ == before ? 0 : 1;
}

static void test_fork_during_export(void) {
    cv_exports got;
    cv_exports_init(&got);
    gate g;
    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    g.out = &got;

    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    ppk_sink sink = {gate_write, NULL, &g};
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);

    atomic_int stop;
    atomic_init(&stop, 0);
    cv_producer prod[PRODUCERS];
    thread th[PRODUCERS];
    start_producers(prod, th, PRODUCERS, r, &stop);
    sleep_ms(30);

    /* An export that blocks in the sink. */
    g.block = 1;
    thread exp_tid;
    CHECK_EQ_INT(spawn(&exp_tid, export_to_sinks, r), 0);
    pthread_mutex_lock(&g.mu);
    while (!g.blocked) pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    sleep_ms(10);

    /* This thread is mid-sample too. */
    ppk_sample *half = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &half), 0);
    CHECK_EQ_INT(ppk_sample_start(half), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(half, PPK_STR("forking_leaf"), PPK_STR("m.py"), 9, 0), 0);
    CHECK_EQ_INT(ppk_sample_push_label_str(half, PPK_STR("task name"), PPK_STR("forking")), 0);
    CHECK_EQ_INT(ppk_sample_set_value(half, 0, 1), 0);

    fflush(NULL);
    int64_t before_fork = ppk_now_ns();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(child_case1(r, half, before_fork));

    /* The parent: its recording went on meanwhile; let it run a little more. */
    sleep_ms(20);
    pthread_mutex_lock(&g.mu);
    g.released = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    void *rc = NULL;
    join(&exp_tid, &rc);
    CHECK_EQ_INT((intptr_t)rc, 0);
    check_child_status(wait_child(pid, 60.0 * SLOW));

    /* The parent's half-built sample is its own: dropped here. */
    CHECK_EQ_INT(ppk_sample_drop(half), 0);
    ppk_sample_free(half);
    for (int i = 0; i < 3; i++) {
        sleep_ms(10);
        CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    }
    atomic_store(&stop, 1);
    long accepted = join_producers(prod, th, PRODUCERS);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);

    check_parent(r, &got, prod, accepted);
    printf("  parent: %ld samples in %zu exports, conserved across the fork\n", accepted, got.n);

    ppk_recorder_free(r);
    cv_free(prod, PRODUCERS);
    cv_exports_free(&got);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
}

/* ---------------------------------------------------------------------------------- */
/* case 2: fork while the background exporter runs                                    */

/* Reads every DIR/NAME.PID.*.pb.gz file into `b`. @return how many. */
static int read_files(const char *dir, const char *name, long pid, cv_exports *b) {
    char prefix[128];
    int np = snprintf(prefix, sizeof prefix, "%s.%ld.", name, pid);
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, (size_t)np) != 0) continue;
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".pb.gz") != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
        size_t got = fread(buf, 1, (size_t)len, f);
        fclose(f);
        if (got == (size_t)len) cv_add(b, buf, (size_t)len);
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

static int child_case2(ppk_recorder *r, const char *dir) {
    alarm(30 * SLOW);
    int before = check_failures_;
    long me = (long)getpid();
    child_flusher c = {r, 0, 200, 0};
    child_flush(&c);
    CHECK_EQ_INT(c.ok, 200);
    /* The exporter thread runs again in the child: a file of ours appears. */
    cv_exports b;
    cv_exports_init(&b);
    double end = now_s() + 10.0 * SLOW;
    int n = 0;
    while ((n = read_files(dir, "fk", me, &b)) == 0 && now_s() < end) sleep_ms(10);
    CHECK(n > 0);
    if (n == 0) fprintf(stderr, "child: no file fk.%ld.* appeared in %s\n", me, dir);
    cv_exports_free(&b);
    cv_exports_init(&b);
    ppk_recorder_stop(r);
    /* Once stopped, its files hold exactly the child's samples. */
    n = read_files(dir, "fk", me, &b);
    long total = 0, foreign = 0;
    int64_t sum = 0;
    for (size_t i = 0; i < b.n; i++) {
        pr_profile pp;
        if (pr_parse(b.data[i], b.len[i], &pp) != 0) {
            CHECK(0);
            continue;
        }
        for (size_t j = 0; j < pp.nsamples; j++) {
            pr_str task = pr_label_str(&pp, &pp.samples[j], "task name");
            if (!task.ptr || task.len < 6 || memcmp(task.ptr, "child-", 6)) foreign++;
            total++;
            sum += pp.samples[j].val[1];
        }
        pr_free(&pp);
    }
    CHECK_EQ_INT(total, 200);
    CHECK_EQ_INT(foreign, 0);
    CHECK_EQ_INT(sum, 200 * 1000 + 199 * 200 / 2);
    cv_exports_free(&b);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_flushed - st.samples_exported, 0);
    /* Freeing works in the child (the parent's builders are not its to free). */
    ppk_recorder_free(r);
    return check_failures_ == before ? 0 : 1;
}

/* A recorder writing gzip files named `name` into a new directory made from the
 * template `dir`, exporting every period_ms (NULL on failure, counted). */
static ppk_recorder *file_recorder(char *dir, int64_t period_ms, ppk_str name) {
    CHECK(mkdtemp(dir) != NULL);
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_GZIP);
    cfg.export_period_ms = period_ms;
    cfg.out_dir = ppk_cstr(dir);
    cfg.name = name;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    return r;
}

static void test_fork_background_exporter(void) {
#if defined(__SANITIZE_THREAD__)
    printf("  SKIP under ThreadSanitizer: its runtime cannot start a thread on a reused "
           "stack in the child of a multi-threaded fork\n");
    return;
#endif
    char dir[] = "/tmp/ppk-fork.XXXXXX";
    ppk_recorder *r = file_recorder(dir, 20, PPK_STR("fk"));
    if (!r) return;
    CHECK_EQ_INT(ppk_recorder_start(r), 0);
    atomic_int stop;
    atomic_init(&stop, 0);
    cv_producer prod[PRODUCERS];
    thread th[PRODUCERS];
    start_producers(prod, th, 2, r, &stop);
    sleep_ms(70); /* a few exports */

    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(child_case2(r, dir));

    sleep_ms(100);
    check_child_status(wait_child(pid, 60.0 * SLOW));
    atomic_store(&stop, 1);
    long accepted = join_producers(prod, th, 2);
    ppk_recorder_stop(r);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);

    cv_exports b;
    cv_exports_init(&b);
    int n = read_files(dir, "fk", (long)getpid(), &b);
    CHECK(n >= 3);
    CHECK_EQ_U64((uint64_t)n, st.windows_exported);
    cv_result res;
    cv_check(&b, prod, 2, &(cv_opts){NULL, 0, 0}, &res); /* files in directory order */
    CHECK_EQ_U64(st.samples_flushed, (uint64_t)accepted);
    CHECK_EQ_U64(st.samples_exported, st.samples_flushed);
    CHECK_EQ_U64(st.sink_failures, 0);
    printf("  parent: %ld samples in %d files; the child's exporter wrote its own files\n",
           accepted, n);
    cv_exports_free(&b);
    ppk_recorder_free(r);
    cv_free(prod, 2);
    /* No temporary file left by either process. */
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char path[4096];
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            if (de->d_name[0] == '.' || !strstr(de->d_name, ".pb.gz"))
                CHECK(!"a temporary or unexpected file is left");
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            remove(path);
        }
        closedir(d);
        rmdir(dir);
    }
}

/* ---------------------------------------------------------------------------------- */
/* case 3: fork while an export encodes                                                */

typedef struct looper {
    thread th;
    ppk_recorder *r;
    atomic_int *stop;
    cv_exports *got;
    long failures;
} looper;

/* Exports to the caller, over and over (most of the time is spent encoding), each kept. */
static void *export_loop(void *arg) {
    looper *l = arg;
    while (!atomic_load(l->stop)) {
        ppk_export e;
        if (ppk_recorder_export(l->r, &e) == 0)
            keep_export(l->got, e.data.data, e.data.len);
        else
            l->failures++;
        ppk_export_free(&e);
    }
    return NULL;
}

/* In the child: exports work, and hold exactly what the child flushed. Returns 0, or
 * what failed: 1 the first export, 2 a new builder, 3 the export after the child's
 * flushes, 4 a sample count. */
static int child_case3(ppk_recorder *r) {
    alarm(10 * SLOW);
    ppk_export e;
    if (ppk_recorder_export(r, &e) != 0) return 1;
    int bad = e.stats.samples_added != 0;
    ppk_export_free(&e);
    ppk_sample *s = NULL;
    if (ppk_sample_create(r, &s) != 0) return 2;
    for (int i = 0; i < 3; i++) {
        bad |= ppk_sample_start(s) != 0;
        bad |= ppk_sample_push_frame(s, PPK_STR("child"), PPK_STR("c.py"), 1, 0) != 0;
        bad |= ppk_sample_set_value(s, 0, 1) != 0;
        bad |= ppk_sample_flush(s) != 0;
    }
    if (ppk_recorder_export(r, &e) != 0) return 3;
    bad |= e.stats.samples_added != 3;
    ppk_export_free(&e);
    ppk_sample_free(s);
    return bad ? 4 : 0;
}

/* Forks land at random points of exports that run back to back (encoding, shrinking
 * the encoder's buffer, compressing): each child's exports must work. */
static void test_fork_during_encode(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_GZIP);
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    atomic_int stop;
    atomic_init(&stop, 0);
    cv_producer prod[PRODUCERS];
    thread th[PRODUCERS];
    start_producers(prod, th, PRODUCERS, r, &stop);
    cv_exports got;
    cv_exports_init(&got);
    looper l;
    memset(&l, 0, sizeof l);
    l.r = r;
    l.stop = &stop;
    l.got = &got;
    CHECK_EQ_INT(spawn(&l.th, export_loop, &l), 0);
    int forks = 0;
    for (; forks < 40; forks++) {
        sleep_ms(2 + forks % 5);
        pid_t pid = fork();
        if (pid == 0) _exit(child_case3(r));
        CHECK(pid > 0);
        if (pid < 0) break;
        check_child_status(wait_child(pid, 20.0 * SLOW));
    }
    atomic_store(&stop, 1);
    join(&l.th, NULL);
    long accepted = join_producers(prod, th, PRODUCERS);
    CHECK(got.n > 0);
    CHECK_EQ_INT(l.failures, 0);
    /* The parent's samples, across 40 forks in the middle of its exports: each in
     * exactly one export. */
    ppk_export e;
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    cv_add(&got, e.data.data, e.data.len);
    ppk_export_free(&e);
    check_parent(r, &got, prod, accepted);
    printf("  %d forks during %zu exports; the parent's %ld samples conserved\n", forks, got.n,
           accepted);
    cv_free(prod, PRODUCERS);
    cv_exports_free(&got);
    ppk_recorder_free(r);
}

static void test_fork_during_export_sharded(void) {
    g_shards = 3;
    test_fork_during_export();
    g_shards = 1;
}

static void test_fork_background_exporter_sharded(void) {
    g_shards = 3;
    test_fork_background_exporter();
    g_shards = 1;
}

static void test_fork_during_encode_sharded(void) {
    g_shards = 3;
    test_fork_during_encode();
    g_shards = 1;
}

/* Case 4: a thread starts and stops the background exporter over and over while the
 * main thread forks; each child frees the recorder at once. A child forked between a
 * start and the new exporter thread's first step must give back all the recorder's
 * memory (ppk_recorder_free checks that in a build with assertions). */
static void *start_stop(void *arg) {
    void **a = arg;
    ppk_recorder *r = a[0];
    atomic_int *stop = a[1];
    while (!atomic_load(stop)) {
        CHECK_EQ_INT(ppk_recorder_start(r), 0);
        ppk_recorder_stop(r);
    }
    return NULL;
}

static void test_fork_while_the_exporter_starts(void) {
#if defined(__SANITIZE_THREAD__)
    printf("  SKIP under ThreadSanitizer (see test_fork_background_exporter)\n");
    return;
#endif
    char dir[] = "/tmp/ppk-fork.XXXXXX";
    ppk_recorder *r = file_recorder(dir, 1000, PPK_STR("st"));
    if (!r) return;
    atomic_int stop;
    atomic_init(&stop, 0);
    void *arg[2] = {r, &stop};
    thread th;
    CHECK_EQ_INT(spawn(&th, start_stop, arg), 0);
    int forks = 0;
    for (; forks < 200; forks++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid < 0) break;
        if (pid == 0) {
            ppk_recorder_free(r);
            _exit(0);
        }
        check_child_status(wait_child(pid, 20.0 * SLOW));
    }
    atomic_store(&stop, 1);
    join(&th, NULL);
    ppk_recorder_free(r);
    pr_rm_dir(dir);
    printf("  %d children freed their recorder\n", forks);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(120 * SLOW);
#if defined(FORK_LOCKED_MALLOC)
    pthread_atfork(alloc_lock, alloc_unlock, alloc_unlock);
#endif
    RUN(test_fork_during_export);
    RUN(test_fork_background_exporter);
    RUN(test_fork_during_export_sharded);
    RUN(test_fork_background_exporter_sharded);
    RUN(test_fork_during_encode);
    RUN(test_fork_during_encode_sharded);
    RUN(test_fork_while_the_exporter_starts);
    return check_summary();
}
