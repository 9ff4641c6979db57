/*
 * sink_datadog.c - the Datadog upload sink: agent (/profiling/v1/input, over TCP or the
 * agent's Unix socket) or agentless intake (/api/v2/profile with DD-API-KEY).
 *
 * The wire format, built here and sent by upload.c: a multipart/form-data body with the
 * part "event" (filename event.json, Content-Type application/json) and the part
 * "profile.pprof" (same filename, application/octet-stream) holding the export's
 * compressed bytes. event.json lists the attachment ("profile.pprof"), the tags as one
 * comma-separated string (tags_profiler), start and end in RFC 3339 UTC with nanoseconds,
 * family, version "4", endpoint_counts (an object endpoint -> count, or null), internal
 * and info. Every request carries DD-EVP-ORIGIN, DD-EVP-ORIGIN-VERSION and User-Agent,
 * and in a container (an id in /proc/self/cgroup, found as DataDog/libdatadog's entity_id
 * finds it) Datadog-Container-ID and Datadog-Entity-ID "ci-<id>": the agent tags what
 * comes from a container by them.
 *
 * The configuration is checked and copied at creation into a dd_ctx that only the
 * uploader thread reads afterwards, except that endpoint counts are read from the
 * export's window by prepare(), on the exporting thread, and the runtime id is replaced
 * in a forked child (the child is single-threaded then). Messages for bad values name the
 * field or, for ppk_datadog_config_from_env, the environment variable.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "upload.h"
#include "utf8.h"

typedef struct dd_ctx {
    ppk__mem mem;
    char *url;       /* the request URL */
    char *unix_path; /* NULL: TCP */
    char *tags;      /* service:..,env:..,...: everything but runtime-id and process_id */
    char *family;
    char *profiler_version;
    char runtime_id[37];
    int runtime_id_auto;
} dd_ctx;

/* ---- checks shared by the config and the environment -------------------------------- */

static int is_space(char c) { return c == ' ' || c == ','; }

/* DD_TAGS syntax: key:value items separated by commas and/or spaces; a key alone is a
 * tag without value. Refused: an empty key (":v") and control characters. */
static int check_tags(ppk_str s, const char *what, char *err, size_t err_len) {
    size_t i = 0;
    while (i < s.len) {
        while (i < s.len && is_space(s.ptr[i])) i++;
        size_t b = i;
        while (i < s.len && !is_space(s.ptr[i])) i++;
        if (i == b) break;
        for (size_t k = b; k < i; k++)
            if ((unsigned char)s.ptr[k] < 0x20 || s.ptr[k] == 0x7f || s.ptr[k] == '"')
                return ppk__upload_err(err, err_len, "%s: bad character in tag \"%.*s\"", what,
                                       (int)(i - b), s.ptr + b);
        if (s.ptr[b] == ':')
            return ppk__upload_err(err, err_len, "%s: tag \"%.*s\" has an empty key", what,
                                   (int)(i - b), s.ptr + b);
    }
    return 0;
}

/* http(s)://host[:port][/] or unix:///abs/path. On success fills url (+ path) in m. */
static int agent_url(ppk__mem *m, ppk_str s, const char *what, char **url, char **unix_path,
                     char *err, size_t err_len) {
    char *c;
    int rc = ppk__upload_str(m, s, what, " \"?#", &c, err, err_len);
    if (rc) return rc;
    size_t alloc = s.len + 1, n = s.len;
    while (n && c[n - 1] == '/' && strncmp(c, "unix://", 7) != 0) c[--n] = 0;
    rc = 0;
    if (strncmp(c, "unix://", 7) == 0) {
        const char *p = c + 7;
        if (p[0] != '/' || !p[1])
            rc = ppk__upload_err(err, err_len, "%s: \"%s\": unix:// needs an absolute path", what, c);
        else if (!(*unix_path = ppk__mem_alloc(m, strlen(p) + 1)))
            rc = PPK_ENOMEM;
        else
            memcpy(*unix_path, p, strlen(p) + 1);
        if (!rc) {
            static const char u[] = "http://localhost/profiling/v1/input";
            if (!(*url = ppk__mem_alloc(m, sizeof u))) rc = PPK_ENOMEM;
            else memcpy(*url, u, sizeof u);
        }
    } else if (strncmp(c, "http://", 7) == 0 || strncmp(c, "https://", 8) == 0) {
        const char *host = c + (c[4] == 's' ? 8 : 7);
        if (!*host || *host == '/' || *host == ':') {
            rc = ppk__upload_err(err, err_len, "%s: \"%s\" has no host", what, c);
        } else if (!(rc = ppk__upload_check_url(c, what, err, err_len))) {
            static const char sfx[] = "/profiling/v1/input";
            if (!(*url = ppk__mem_alloc(m, n + sizeof sfx))) {
                rc = PPK_ENOMEM;
            } else {
                memcpy(*url, c, n);
                memcpy(*url + n, sfx, sizeof sfx);
            }
        }
    } else {
        rc = ppk__upload_err(err, err_len,
                             "%s: \"%s\" is not an http://, https:// or unix:// URL", what, c);
    }
    ppk__mem_free(m, c, alloc);
    return rc;
}

static int check_chars(ppk_str s, const char *what, const char *allowed_extra, char *err,
                       size_t err_len) {
    for (size_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 (c && strchr(allowed_extra, c));
        if (!ok)
            return ppk__upload_err(err, err_len, "%s: character %d at byte %zu is not allowed",
                                   what, (unsigned char)c, i);
    }
    return 0;
}

/* ---- the container -------------------------------------------------------------------- */

const char *ppk__dd_cgroup_path = "/proc/self/cgroup";

static int is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* Where a container id ending at p[n] starts in p (-1: none): 64 hex digits; a UUID
 * 8-4-4-4-12 with '-' or '_'; an ECS task id, 32 hex digits '-' decimal digits. The
 * leftmost of those that fits, as a regular expression finds it. */
static long id_start(const char *p, size_t n) {
    long best = -1;
    if (n >= 64 && is_hex(p + n - 64, 64)) best = (long)(n - 64);
    if (n >= 36) {
        const char *u = p + n - 36;
        int ok = 1;
        for (int i = 0; i < 36 && ok; i++)
            ok = (i == 8 || i == 13 || i == 18 || i == 23) ? (u[i] == '-' || u[i] == '_')
                                                           : is_hex(u + i, 1);
        if (ok && (best < 0 || (long)(n - 36) < best)) best = (long)(n - 36);
    }
    size_t d = 0;
    while (d < n && p[n - 1 - d] >= '0' && p[n - 1 - d] <= '9') d++;
    if (d && n >= d + 33 && p[n - 1 - d] == '-' && is_hex(p + n - d - 33, 32) &&
        (best < 0 || (long)(n - d - 33) < best))
        best = (long)(n - d - 33);
    return best;
}

size_t ppk__dd_container_id(const char *text, char *out, size_t out_len) {
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        /* hierarchy-id:controllers:path */
        const char *c = line;
        while (c < end && *c >= '0' && *c <= '9') c++;
        const char *colon = NULL;
        if (c > line && c < end && *c == ':') colon = memchr(c + 1, ':', (size_t)(end - c - 1));
        if (colon && colon + 1 < end) {
            const char *path = colon + 1;
            size_t n = (size_t)(end - path);
            while (n && path[n - 1] == ' ') n--;
            if (n >= 6 && !memcmp(path + n - 6, ".scope", 6)) n -= 6;
            long at = id_start(path, n);
            if (at >= 0 && n - (size_t)at < out_len) {
                memcpy(out, path + at, n - (size_t)at);
                out[n - (size_t)at] = 0;
                return n - (size_t)at;
            }
        }
        line = *end ? end + 1 : end;
    }
    if (out_len) out[0] = 0;
    return 0;
}

/* The process's container id from ppk__dd_cgroup_path into out (out_len >= 80), or "". */
static void container_id(char *out, size_t out_len) {
    char text[8192];
    out[0] = 0;
    FILE *f = fopen(ppk__dd_cgroup_path, "re");
    if (!f) return;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    ppk__dd_container_id(text, out, out_len);
}

/* ---- the environment ------------------------------------------------------------------ */

void ppk_datadog_config_init(ppk_datadog_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    ppk_upload_config_init(&cfg->upload);
}

static int parse_bool(const char *v, int *out) {
    if (!strcasecmp(v, "true") || !strcmp(v, "1")) *out = 1;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0")) *out = 0;
    else return -1;
    return 0;
}

int ppk_datadog_config_from_env(ppk_datadog_config *cfg, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!cfg) return PPK_EINVAL;
    ppk_datadog_config c = *cfg;
    ppk__mem m;
    ppk__mem_init(&m, &cfg->upload.allocator);
    const char *v;
    int rc;
    if ((v = ppk__upload_getenv("DD_TRACE_AGENT_URL"))) {
        char *url = NULL, *path = NULL;
        rc = agent_url(&m, ppk_cstr(v), "DD_TRACE_AGENT_URL", &url, &path, err, err_len);
        if (url) ppk__mem_free(&m, url, strlen(url) + 1);
        if (path) ppk__mem_free(&m, path, strlen(path) + 1);
        if (rc) return rc;
        c.agent_url = ppk_cstr(v);
    } else {
        if ((v = ppk__upload_getenv("DD_AGENT_HOST"))) {
            if ((rc = check_chars(ppk_cstr(v), "DD_AGENT_HOST", ".-_:[]", err, err_len)))
                return rc;
            c.agent_host = ppk_cstr(v);
        }
        if ((v = ppk__upload_getenv("DD_TRACE_AGENT_PORT"))) {
            char *end;
            long p = strtol(v, &end, 10);
            if (*end || p < 1 || p > 65535 || v[0] < '0' || v[0] > '9')
                return ppk__upload_err(err, err_len,
                                       "DD_TRACE_AGENT_PORT: \"%.64s\" is not a port (1-65535)", v);
            c.agent_port = (int)p;
        }
    }
    static const struct {
        const char *name;
        size_t off;
        const char *forbid;
    } strs[] = {
        {"DD_SERVICE", offsetof(ppk_datadog_config, service), ","},
        {"DD_ENV", offsetof(ppk_datadog_config, env), ","},
        {"DD_VERSION", offsetof(ppk_datadog_config, version), ","},
    };
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        if (!(v = ppk__upload_getenv(strs[i].name))) continue;
        char *copy;
        if ((rc = ppk__upload_str(&m, ppk_cstr(v), strs[i].name, strs[i].forbid, &copy, err,
                                  err_len)))
            return rc;
        ppk__upload_str_free(&m, copy);
        *(ppk_str *)((char *)&c + strs[i].off) = ppk_cstr(v);
    }
    if ((v = ppk__upload_getenv("DD_TAGS"))) {
        if ((rc = check_tags(ppk_cstr(v), "DD_TAGS", err, err_len))) return rc;
        c.tags = ppk_cstr(v);
    }
    if ((v = ppk__upload_getenv("DD_API_KEY"))) {
        if ((rc = check_chars(ppk_cstr(v), "DD_API_KEY", "", err, err_len))) return rc;
        c.api_key = ppk_cstr(v);
    }
    if ((v = ppk__upload_getenv("DD_SITE"))) {
        if ((rc = check_chars(ppk_cstr(v), "DD_SITE", ".-", err, err_len))) return rc;
        c.site = ppk_cstr(v);
    }
    if ((v = ppk__upload_getenv("DD_PROFILING_AGENTLESS"))) {
        if (parse_bool(v, &c.agentless))
            return ppk__upload_err(err, err_len,
                                   "DD_PROFILING_AGENTLESS: \"%.32s\" is not true, false, 1 or 0",
                                   v);
    }
    *cfg = c;
    return 0;
}

/* ---- the sink ------------------------------------------------------------------------ */

static void new_runtime_id(dd_ctx *d) {
    unsigned char r[16];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)ppk_now_ns() ^ ((uint64_t)getpid() << 32);
        for (size_t i = 0; i < sizeof r; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            r[i] = (unsigned char)(x >> 56);
        }
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4 */
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80); /* variant 10 */
    snprintf(d->runtime_id, sizeof d->runtime_id,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0], r[1],
             r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14],
             r[15]);
}

static void dd_free(void *ctx) {
    dd_ctx *d = ctx;
    if (!d) return;
    ppk__upload_str_free(&d->mem, d->url);
    ppk__upload_str_free(&d->mem, d->unix_path);
    ppk__upload_str_free(&d->mem, d->tags);
    ppk__upload_str_free(&d->mem, d->family);
    ppk__upload_str_free(&d->mem, d->profiler_version);
    PPK_MEM_DELETE(d, dd_ctx, mem);
}

typedef struct ep_state {
    ppk__ubuf *b;
    int n;
} ep_state;

static void add_endpoint(void *opaque, ppk_str endpoint, int64_t count) {
    ep_state *s = opaque;
    ppk__ubuf_adds(s->b, s->n++ ? ",\"" : "{\"");
    ppk__ubuf_add_json(s->b, endpoint.ptr, endpoint.len);
    ppk__ubuf_addf(s->b, "\":%lld", (long long)count);
}

/* Exporting thread: the endpoint counts, as a JSON object (nothing when there are none). */
static int dd_prepare(void *ctx, const ppk_export *e, ppk__ubuf *extra) {
    (void)ctx;
    ep_state s = {extra, 0};
    for (size_t i = 0; i < e->n_endpoint_counts; i++)
        add_endpoint(&s, e->endpoint_counts[i].endpoint, e->endpoint_counts[i].count);
    if (s.n) ppk__ubuf_adds(extra, "}");
    return 0;
}

static void rfc3339(char *out, size_t n, int64_t ns) {
    if (ns < 0) ns = 0;
    time_t sec = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%09lldZ", (long long)(ns % 1000000000));
}

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int contains(const void *hay, size_t n, const char *needle) {
    return memmem(hay, n, needle, strlen(needle)) != NULL;
}

static void part_head(ppk__ubuf *b, const char *boundary, const char *name, const char *file,
                      const char *type) {
    ppk__ubuf_addf(b, "--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                      "Content-Type: %s\r\n\r\n",
                   boundary, name, file, type);
}

static int dd_build(void *ctx, const ppk__upload_job *job, ppk__ubuf *url, ppk__ubuf *body,
                    char *ctype, size_t ctype_len) {
    dd_ctx *d = ctx;
    ppk__ubuf_adds(url, d->url);

    ppk__ubuf ev;
    ppk__ubuf_init(&ev, body->mem);
    char start[48], end[48];
    rfc3339(start, sizeof start, job->start_ns);
    rfc3339(end, sizeof end, job->end_ns);
    ppk__ubuf_adds(&ev, "{\"attachments\":[\"profile.pprof\"],\"tags_profiler\":\"");
    ppk__ubuf_add_json(&ev, d->tags, strlen(d->tags));
    ppk__ubuf_adds(&ev, ",runtime-id:");
    ppk__ubuf_add_json(&ev, d->runtime_id, strlen(d->runtime_id));
    ppk__ubuf_addf(&ev, ",process_id:%ld\"", (long)getpid());
    ppk__ubuf_addf(&ev, ",\"start\":\"%s\",\"end\":\"%s\",\"family\":\"", start, end);
    ppk__ubuf_add_json(&ev, d->family, strlen(d->family));
    ppk__ubuf_adds(&ev, "\",\"version\":\"4\",\"endpoint_counts\":");
    if (job->extra)
        ppk__ubuf_add(&ev, job->extra, job->extra_len);
    else
        ppk__ubuf_adds(&ev, "null");
    ppk__ubuf_adds(&ev, ",\"internal\":{\"pprofkit_version\":\"" PPK_VERSION_STRING "\"}"
                        ",\"info\":{\"profiler\":{\"version\":\"");
    ppk__ubuf_add_json(&ev, d->profiler_version, strlen(d->profiler_version));
    ppk__ubuf_adds(&ev, "\"}}}");

    /* A boundary found in neither part. */
    char boundary[64];
    uint64_t seed = mix((uint64_t)ppk_now_ns() ^ job->seq ^ ((uint64_t)getpid() << 40));
    for (int i = 0;; i++) {
        snprintf(boundary, sizeof boundary, "pprofkit-%016llx%016llx",
                 (unsigned long long)mix(seed + 2 * (uint64_t)i),
                 (unsigned long long)mix(seed + 2 * (uint64_t)i + 1));
        if (i == 16 || (!contains(job->data, job->len, boundary) &&
                        !(ev.p && contains(ev.p, ev.len, boundary))))
            break;
    }
    part_head(body, boundary, "event", "event.json", "application/json");
    ppk__ubuf_add(body, ev.p, ev.len);
    ppk__ubuf_adds(body, "\r\n");
    part_head(body, boundary, "profile.pprof", "profile.pprof", "application/octet-stream");
    ppk__ubuf_add(body, job->data, job->len);
    ppk__ubuf_addf(body, "\r\n--%s--\r\n", boundary);
    int failed = ev.failed;
    ppk__ubuf_free(&ev);
    snprintf(ctype, ctype_len, "multipart/form-data; boundary=%s", boundary);
    return failed ? PPK_ENOMEM : 0;
}

static void dd_setopt(void *ctx, CURL *h) {
    dd_ctx *d = ctx;
    if (d->unix_path) curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, d->unix_path);
}

static void dd_child(void *ctx) {
    dd_ctx *d = ctx;
    if (d->runtime_id_auto) new_runtime_id(d);
}

/* Appends ",key:value" (or "key:value" first) when value is not empty. */
static void tag(ppk__ubuf *b, const char *key, const char *value) {
    if (!value || !*value) return;
    if (b->len) ppk__ubuf_adds(b, ",");
    ppk__ubuf_adds(b, key);
    ppk__ubuf_adds(b, ":");
    ppk__ubuf_adds(b, value);
}

/* Every string of the config, checked for NULL with a length before anything reads one
 * (the checks below index ptr up to len), whether or not the mode uses it. */
static const ppk__upload_field dd_strs[] = {
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
};

/* Frees the n strings of the sink's configuration that ppk_sink_datadog built. */
static void free_strs(dd_ctx *d, char **strs, size_t n) {
    for (size_t i = 0; i < n; i++) ppk__upload_str_free(&d->mem, strs[i]);
}

/* Where d uploads: the intake (agentless: *key gets the API key), the agent's URL, or
 * its host and port. */
static int dd_endpoint(dd_ctx *d, const ppk_datadog_config *cfg, char **key, char *err,
                       size_t err_len) {
    int rc;
    if (cfg->agentless) {
        if (!cfg->api_key.len)
            return ppk__upload_err(err, err_len, "api_key: required when agentless (DD_API_KEY)");
        if ((rc = check_chars(cfg->api_key, "api_key", "", err, err_len)) ||
            (rc = check_chars(cfg->site, "site", ".-", err, err_len)) ||
            (rc = ppk__upload_str(&d->mem, cfg->api_key, "api_key", "", key, err, err_len)))
            return rc;
        if (cfg->intake_url.len) {
            if ((rc = ppk__upload_str(&d->mem, cfg->intake_url, "intake_url", " \"", &d->url,
                                      err, err_len)))
                return rc;
            if (strncmp(d->url, "http://", 7) && strncmp(d->url, "https://", 8))
                return ppk__upload_err(err, err_len, "intake_url: \"%s\" is not http(s)://",
                                       d->url);
            return 0;
        }
        ppk_str site = cfg->site.len ? cfg->site : PPK_STR("datadoghq.com");
        static const char fmt[] = "https://intake.profile.%.*s/api/v2/profile";
        size_t n = (size_t)snprintf(NULL, 0, fmt, (int)site.len, site.ptr) + 1;
        if (!(d->url = ppk__mem_alloc(&d->mem, n))) return PPK_ENOMEM; /* freed as strlen + 1 */
        snprintf(d->url, n, fmt, (int)site.len, site.ptr);
        return 0;
    }
    if (cfg->agent_url.len)
        return agent_url(&d->mem, cfg->agent_url, "agent_url", &d->url, &d->unix_path, err,
                         err_len);
    ppk_str h = cfg->agent_host.len ? cfg->agent_host : PPK_STR("localhost");
    if ((rc = check_chars(h, "agent_host", ".-_:[]", err, err_len))) return rc;
    if (cfg->agent_port < 0 || cfg->agent_port > 65535)
        return ppk__upload_err(err, err_len, "agent_port: %d is not in 1..65535", cfg->agent_port);
    int v6 = memchr(h.ptr, ':', h.len) && h.ptr[0] != '[';
    char u[400];
    snprintf(u, sizeof u, "http://%s%.*s%s:%d", v6 ? "[" : "", (int)h.len, h.ptr, v6 ? "]" : "",
             cfg->agent_port ? cfg->agent_port : 8126);
    return agent_url(&d->mem, ppk_cstr(u), "agent_host", &d->url, &d->unix_path, err, err_len);
}

/* d's tags (service, env, version, host, language, profiler_version, then the user's,
 * comma separated) and family: the configured ones, or what the process is. Also sets
 * the default profiler_version. */
static int dd_tags(dd_ctx *d, const ppk_datadog_config *cfg, const char *service,
                   const char *env, const char *version, const char *host, const char *language,
                   const char *family, char *err, size_t err_len) {
    char hname[256], comm[64];
    if (!host[0] && gethostname(hname, sizeof hname) == 0) {
        hname[sizeof hname - 1] = 0;
        hname[strcspn(hname, ", ")] = 0;
        ppk__upload_cut_to_text(hname);
    } else {
        snprintf(hname, sizeof hname, "%s", host);
    }
    ppk__upload_comm(comm, sizeof comm);
    const char *fam = family[0] ? family : "native";
    int rc;
    if (!d->profiler_version[0]) {
        ppk__upload_str_free(&d->mem, d->profiler_version);
        if ((rc = ppk__upload_str(&d->mem, PPK_STR(PPK_VERSION_STRING), "profiler_version", "",
                                  &d->profiler_version, err, err_len)))
            return rc;
    }
    ppk__ubuf tags;
    ppk__ubuf_init(&tags, &d->mem);
    tag(&tags, "service", service[0] ? service : comm);
    tag(&tags, "env", env);
    tag(&tags, "version", version);
    tag(&tags, "host", hname);
    tag(&tags, "language", language[0] ? language : fam);
    tag(&tags, "profiler_version", d->profiler_version);
    /* The user's tags, normalized to comma separation. */
    for (size_t i = 0; i < cfg->tags.len;) {
        while (i < cfg->tags.len && is_space(cfg->tags.ptr[i])) i++;
        size_t b = i;
        while (i < cfg->tags.len && !is_space(cfg->tags.ptr[i])) i++;
        if (i == b) break;
        ppk__ubuf_adds(&tags, ",");
        ppk__ubuf_add(&tags, cfg->tags.ptr + b, i - b);
    }
    ppk__ubuf_nul(&tags);
    rc = tags.failed ? PPK_ENOMEM
                     : ppk__upload_str(&d->mem, (ppk_str){tags.p, tags.len}, "tags", NULL,
                                       &d->tags, err, err_len);
    ppk__ubuf_free(&tags);
    return rc ? rc : ppk__upload_str(&d->mem, ppk_cstr(fam), "family", NULL, &d->family, err,
                                     err_len);
}

int ppk_sink_datadog(const ppk_datadog_config *cfg, ppk_sink *out, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!out) return PPK_EINVAL;
    memset(out, 0, sizeof *out);
    if (!cfg) return ppk__upload_err(err, err_len, "config: NULL");
    int rc = ppk__upload_nulls(cfg, dd_strs, sizeof dd_strs / sizeof *dd_strs, err, err_len);
    if (!rc) rc = ppk__upload_check_config(&cfg->upload, err, err_len);
    if (rc) return rc;
    dd_ctx *d = PPK_MEM_NEW(&cfg->upload.allocator, dd_ctx, mem);
    if (!d) return PPK_ENOMEM;

    char *service = NULL, *env = NULL, *version = NULL, *host = NULL, *rid = NULL,
         *family = NULL, *language = NULL, *pname = NULL, *key = NULL;
    if ((rc = ppk__upload_str(&d->mem, cfg->service, "service", ",", &service, err, err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->env, "env", ",", &env, err, err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->version, "version", ",", &version, err, err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->host, "host", ", ", &host, err, err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->runtime_id, "runtime_id", ", ", &rid, err,
                              err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->family, "family", ", \"", &family, err, err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->language, "language", ", ", &language, err,
                              err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->profiler_name, "profiler_name", "", &pname, err,
                              err_len)) ||
        (rc = ppk__upload_str(&d->mem, cfg->profiler_version, "profiler_version", ", ",
                              &d->profiler_version, err, err_len)) ||
        (rc = check_tags(cfg->tags, "tags", err, err_len)))
        goto fail;
    if (rid[0] && strlen(rid) > 36) {
        rc = ppk__upload_err(err, err_len, "runtime_id: longer than 36 bytes");
        goto fail;
    }
    if ((rc = dd_endpoint(d, cfg, &key, err, err_len))) goto fail;

    if ((rc = dd_tags(d, cfg, service, env, version, host, language, family, err, err_len)))
        goto fail;
    if (rid[0]) {
        snprintf(d->runtime_id, sizeof d->runtime_id, "%s", rid);
    } else {
        d->runtime_id_auto = 1;
        new_runtime_id(d);
    }

    char h_origin[300], h_version[300], h_agent[64], h_key[300], cid[80], h_cid[120],
        h_eid[120];
    snprintf(h_origin, sizeof h_origin, "DD-EVP-ORIGIN: %.256s", pname[0] ? pname : "pprofkit");
    snprintf(h_version, sizeof h_version, "DD-EVP-ORIGIN-VERSION: %.256s", d->profiler_version);
    snprintf(h_agent, sizeof h_agent, "User-Agent: pprofkit/%s", PPK_VERSION_STRING);
    snprintf(h_key, sizeof h_key, "DD-API-KEY: %.256s", key ? key : "");
    const char *headers[6] = {h_origin, h_version, h_agent};
    size_t n_headers = 3;
    if (cfg->agentless) headers[n_headers++] = h_key;
    /* The container, as the tracers name it to the agent, which adds its tags. */
    container_id(cid, sizeof cid);
    if (cid[0]) {
        snprintf(h_cid, sizeof h_cid, "Datadog-Container-ID: %s", cid);
        snprintf(h_eid, sizeof h_eid, "Datadog-Entity-ID: ci-%s", cid);
        headers[n_headers++] = h_cid;
        headers[n_headers++] = h_eid;
    }

    free_strs(d, (char *[]){service, env, version, host, rid, family, language, pname, key}, 9);
    static const ppk__upload_ops ops = {.prepare = dd_prepare, .build = dd_build,
                                        .setopt = dd_setopt, .child = dd_child,
                                        .free = dd_free};
    rc = ppk__upload_create(&cfg->upload, &ops, d, headers, n_headers, out, err, err_len);
    memset(h_key, 0, sizeof h_key);
    return rc;

fail:
    free_strs(d, (char *[]){service, env, version, host, rid, family, language, pname, key}, 9);
    dd_free(d);
    return rc;
}
