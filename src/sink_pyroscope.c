/*
 * sink_pyroscope.c - the Pyroscope / Grafana upload sink: HTTP ingest of pprof.
 *
 * Each export becomes POST <server>/ingest?name=<app>{k=v,...}&from=<unix s>
 * &until=<unix s>&format=pprof&sampleRate=<Hz>&spyName=<name>. With format=pprof the
 * server reads the body as the profile itself (not a multipart form) and recognizes gzip
 * by its magic bytes; it does not read zstd, so zstd exports are refused by prepare() and
 * counted as invalid. Optional HTTP basic auth (or, without it, a bearer token) and the
 * X-Scope-OrgID tenant header.
 *
 * The body is the export's bytes as they are, unless Grafana Pyroscope would refuse the
 * profile for its names (a sample type with '-', a string-valued label whose key is not a
 * label name, as Datadog-style profiles have: "wall-time", "thread name", or whose value
 * is over 2048 bytes): the uploader thread then decompresses it, renames or cuts those
 * (pyroscope_fix.c) and compresses it again.
 * The configuration is checked against what the server accepts (grafana/pyroscope: the
 * application name's characters in pkg/og/flameql/flameql.go, tag keys that are label
 * names in pkg/validation/validate.go), copied at creation into a py_ctx that the uploader
 * thread only reads; the name with its tags is stored already percent-encoded.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "decompress.h"
#include "pyroscope_fix.h"
#include "upload.h"

typedef struct py_ctx {
    ppk__mem mem;
    char *base;      /* server address, without a trailing slash */
    char *name_enc;  /* app{k=v,...}, percent-encoded */
    char *spy_enc;
    char *user, *password; /* NULL: no basic auth */
    int64_t sample_rate;
} py_ctx;

static void py_free(void *ctx) {
    py_ctx *p = ctx;
    if (!p) return;
    ppk__upload_str_free(&p->mem, p->base);
    ppk__upload_str_free(&p->mem, p->name_enc);
    ppk__upload_str_free(&p->mem, p->spy_enc);
    ppk__upload_str_free(&p->mem, p->user);
    ppk__upload_str_free(&p->mem, p->password);
    PPK_MEM_DELETE(p, py_ctx, mem);
}

static int py_prepare(void *ctx, const ppk_export *e, ppk__ubuf *extra) {
    (void)ctx;
    (void)extra;
    return e->codec == PPK_CODEC_ZSTD ? PPK_EINVAL : 0;
}

/* For b > 0; they never overflow (unlike floor_div(a + b - 1, b) for a ceiling). */
static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b < 0); }
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b > 0); }

/* The most bytes an export may decompress to (the reader's default limit). */
#define PY_MAX_RAW ((size_t)256 << 20)

/* The body: the export as it is, or renamed for the server (see the top of this file). */
static int py_body(const ppk__upload_job *job, ppk__ubuf *body) {
    ppk__mem *m = body->mem;
    ppk__dbuf d = {0};
    const uint8_t *raw = job->data;
    size_t n = job->len;
    char err[128];
    int rc = 0, changed = 0;
    if (job->codec == PPK_CODEC_GZIP) {
        rc = ppk__decompress(m, PPK_CODEC_GZIP, job->data, job->len, PY_MAX_RAW, &d, err,
                             sizeof err);
        if (rc) return rc == PPK_ENOMEM ? PPK_ENOMEM : PPK_EINVAL;
        raw = d.p;
        n = d.len;
    }
    ppk__ubuf fixed;
    ppk__ubuf_init(&fixed, m);
    rc = ppk__pyroscope_fix(m, raw, n, &fixed, &changed);
    if (!rc && !changed) {
        ppk__ubuf_add(body, job->data, job->len);
    } else if (!rc && job->codec == PPK_CODEC_GZIP) {
        ppk_allocator a = ppk__mem_allocator(m);
        ppk__cstream cs;
        ppk__cstream_init(&cs, m);
        ppk_bytes z = {0};
        rc = ppk__cstream_begin(&cs, PPK_CODEC_GZIP, 0);
        if (!rc) rc = ppk__cstream_write(&cs, (const uint8_t *)fixed.p, fixed.len);
        if (!rc) rc = ppk__cstream_end(&cs, &a, &z);
        else ppk__cstream_abort(&cs);
        ppk__cstream_destroy(&cs);
        if (!rc) ppk__ubuf_add(body, z.data, z.len);
        ppk_bytes_free(&z);
    } else if (!rc) {
        ppk__ubuf_add(body, fixed.p, fixed.len);
    }
    ppk__ubuf_free(&fixed);
    if (d.p) ppk__mem_free(m, d.p, d.cap);
    return !rc ? 0 : rc == PPK_ENOMEM ? PPK_ENOMEM : PPK_EINVAL;
}

static int py_build(void *ctx, const ppk__upload_job *job, ppk__ubuf *url, ppk__ubuf *body,
                    char *ctype, size_t ctype_len) {
    py_ctx *p = ctx;
    int64_t from = floor_div(job->start_ns, 1000000000);
    int64_t until = ceil_div(job->end_ns, 1000000000);
    if (until <= from) until = from + 1;
    ppk__ubuf_adds(url, p->base);
    ppk__ubuf_adds(url, "/ingest?name=");
    ppk__ubuf_adds(url, p->name_enc);
    ppk__ubuf_addf(url, "&from=%lld&until=%lld&format=pprof&sampleRate=%lld&spyName=",
                   (long long)from, (long long)until, (long long)p->sample_rate);
    ppk__ubuf_adds(url, p->spy_enc);
    snprintf(ctype, ctype_len, "application/octet-stream");
    return py_body(job, body);
}

static void py_setopt(void *ctx, CURL *h) {
    py_ctx *p = ctx;
    if (!p->user) return;
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERNAME, p->user);
    curl_easy_setopt(h, CURLOPT_PASSWORD, p->password ? p->password : "");
}

/* Percent-encodes everything but the unreserved characters into m (exact size). */
static char *pct(ppk__mem *m, const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '.' || c == '_' || c == '~';
        k += keep ? 1 : 3;
    }
    char *o = ppk__mem_alloc(m, k + 1);
    if (!o) return NULL;
    static const char hex[] = "0123456789ABCDEF";
    char *q = o;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '.' || c == '_' || c == '~';
        if (keep) {
            *q++ = (char)c;
        } else {
            *q++ = '%';
            *q++ = hex[c >> 4];
            *q++ = hex[c & 15];
        }
    }
    *q = 0;
    return o;
}

static int check_server(ppk_str s, const char *what, char *err, size_t err_len) {
    for (size_t i = 0; i < s.len; i++)
        if ((unsigned char)s.ptr[i] <= 0x20 || s.ptr[i] == 0x7f || s.ptr[i] == '?' ||
            s.ptr[i] == '#' || s.ptr[i] == '"')
            return ppk__upload_err(err, err_len, "%s: bad character at byte %zu", what, i);
    int http = s.len > 7 && !memcmp(s.ptr, "http://", 7);
    int https = s.len > 8 && !memcmp(s.ptr, "https://", 8);
    if (!http && !https)
        return ppk__upload_err(err, err_len, "%s: \"%.*s\" is not an http:// or https:// URL",
                               what, (int)(s.len > 200 ? 200 : s.len), s.ptr);
    return 0;
}

/* An application name: not empty, only the characters the server takes in one
 * (grafana/pyroscope pkg/og/flameql/flameql.go: [A-Za-z0-9_.-]). */
static int check_app(ppk_str s, const char *what, char *err, size_t err_len) {
    if (!s.len) return ppk__upload_err(err, err_len, "%s: the application name is required", what);
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return ppk__upload_err(err, err_len,
                                   "%s: character %d at byte %zu is not allowed in a name "
                                   "(Pyroscope takes A-Z a-z 0-9 _ . -)",
                                   what, c, i);
    }
    return 0;
}

/* A tenant id as the server takes one (Grafana Pyroscope's tenant ids: at most 150
 * bytes of A-Z a-z 0-9 ! - _ . * ' ( ), not "." or ".."); empty: none. */
static int check_tenant(ppk_str s, const char *what, char *err, size_t err_len) {
    if (s.len > 150)
        return ppk__upload_err(err, err_len, "%s: %zu bytes, more than a tenant id's 150", what,
                               s.len);
    if ((s.len == 1 && s.ptr[0] == '.') || (s.len == 2 && !memcmp(s.ptr, "..", 2)))
        return ppk__upload_err(err, err_len, "%s: \"%.*s\" is not a tenant id", what,
                               (int)s.len, s.ptr);
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (c && strchr("!-_.*'()", c))))
            return ppk__upload_err(err, err_len,
                                   "%s: character %d at byte %zu is not allowed in a tenant id "
                                   "(A-Z a-z 0-9 ! - _ . * ' ( ))",
                                   what, c, i);
    }
    return 0;
}

/* key=value[,key=value...]: keys [A-Za-z0-9_.] not starting with a digit (the server's
 * tag keys, then label names once '.' is '_'), values without {}=,". */
static int check_tags(ppk_str s, char *err, size_t err_len) {
    size_t i = 0;
    while (i < s.len) {
        size_t b = i;
        while (i < s.len && s.ptr[i] != ',') i++;
        ppk_str item = {s.ptr + b, i - b};
        if (i < s.len) i++;
        if (!item.len) continue;
        const char *eq = memchr(item.ptr, '=', item.len);
        if (!eq || eq == item.ptr)
            return ppk__upload_err(err, err_len, "tags: \"%.*s\" is not key=value",
                                   (int)item.len, item.ptr);
        if (item.ptr[0] >= '0' && item.ptr[0] <= '9')
            return ppk__upload_err(err, err_len, "tags: key in \"%.*s\" starts with a digit",
                                   (int)item.len, item.ptr);
        for (const char *k = item.ptr; k < eq; k++)
            if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
                  (*k >= '0' && *k <= '9') || *k == '_' || *k == '.'))
                return ppk__upload_err(err, err_len, "tags: bad key in \"%.*s\"", (int)item.len,
                                       item.ptr);
        for (const char *v = eq + 1; v < item.ptr + item.len; v++)
            if ((unsigned char)*v < 0x20 || strchr("{}=,\"", *v))
                return ppk__upload_err(err, err_len, "tags: bad value in \"%.*s\"",
                                       (int)item.len, item.ptr);
    }
    return 0;
}

void ppk_pyroscope_config_init(ppk_pyroscope_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    ppk_upload_config_init(&cfg->upload);
}

/* Environment variable `var`, if set, into *out once it passes the check of a config
 * string (no byte of `forbid`). */
static int env_str(const char *var, const char *forbid, ppk_str *out, char *err,
                   size_t err_len) {
    const char *v = ppk__upload_getenv(var);
    if (!v) return 0;
    int rc = ppk__upload_check_str(ppk_cstr(v), var, forbid, err, err_len);
    if (!rc) *out = ppk_cstr(v);
    return rc;
}

int ppk_pyroscope_config_from_env(ppk_pyroscope_config *cfg, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!cfg) return PPK_EINVAL;
    const char *v;
    int rc;
    ppk_pyroscope_config c = *cfg;
    if ((v = ppk__upload_getenv("PYROSCOPE_SERVER_ADDRESS"))) {
        if ((rc = check_server(ppk_cstr(v), "PYROSCOPE_SERVER_ADDRESS", err, err_len)) ||
            (rc = ppk__upload_check_url(v, "PYROSCOPE_SERVER_ADDRESS", err, err_len)))
            return rc;
        c.server_address = ppk_cstr(v);
    }
    if ((v = ppk__upload_getenv("PYROSCOPE_APPLICATION_NAME"))) {
        if ((rc = check_app(ppk_cstr(v), "PYROSCOPE_APPLICATION_NAME", err, err_len))) return rc;
        c.application_name = ppk_cstr(v);
    }
    if ((v = ppk__upload_getenv("PYROSCOPE_TENANT_ID"))) {
        if ((rc = check_tenant(ppk_cstr(v), "PYROSCOPE_TENANT_ID", err, err_len))) return rc;
        c.tenant_id = ppk_cstr(v);
    }
    /* Credentials, checked as the sink checks them. */
    if ((rc = env_str("PYROSCOPE_BASIC_AUTH_USER", ":", &c.basic_auth_user, err, err_len)) ||
        (rc = env_str("PYROSCOPE_BASIC_AUTH_PASSWORD", NULL, &c.basic_auth_password, err,
                      err_len)) ||
        (rc = env_str("PYROSCOPE_AUTH_TOKEN", NULL, &c.auth_token, err, err_len)))
        return rc;
    *cfg = c;
    return 0;
}

/* The series name, app{k=v,...} without empty items, percent-encoded; NULL when out of
 * memory. */
static char *series_name(ppk__mem *m, ppk_str app, ppk_str tags) {
    size_t n = app.len + tags.len + 3;
    char *name = ppk__mem_alloc(m, n);
    if (!name) return NULL;
    memcpy(name, app.ptr, app.len);
    size_t k = app.len;
    name[k++] = '{';
    int first = 1;
    for (size_t i = 0; i < tags.len;) {
        size_t b = i;
        while (i < tags.len && tags.ptr[i] != ',') i++;
        if (i > b) {
            if (!first) name[k++] = ',';
            memcpy(name + k, tags.ptr + b, i - b);
            k += i - b;
            first = 0;
        }
        if (i < tags.len) i++;
    }
    name[k++] = '}';
    char *enc = pct(m, name, k);
    ppk__mem_free(m, name, n);
    return enc;
}

int ppk_sink_pyroscope(const ppk_pyroscope_config *cfg, ppk_sink *out, char *err,
                       size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!out) return PPK_EINVAL;
    memset(out, 0, sizeof *out);
    if (!cfg) return ppk__upload_err(err, err_len, "config: NULL");
    /* Every string, before anything reads one, whether or not it is used. */
    static const ppk__upload_field strs[] = {
        {"server_address", offsetof(ppk_pyroscope_config, server_address)},
        {"application_name", offsetof(ppk_pyroscope_config, application_name)},
        {"tags", offsetof(ppk_pyroscope_config, tags)},
        {"spy_name", offsetof(ppk_pyroscope_config, spy_name)},
        {"basic_auth_user", offsetof(ppk_pyroscope_config, basic_auth_user)},
        {"basic_auth_password", offsetof(ppk_pyroscope_config, basic_auth_password)},
        {"auth_token", offsetof(ppk_pyroscope_config, auth_token)},
        {"tenant_id", offsetof(ppk_pyroscope_config, tenant_id)},
    };
    int rc = ppk__upload_nulls(cfg, strs, sizeof strs / sizeof *strs, err, err_len);
    if (rc) return rc;
    ppk_str server = cfg->server_address.len ? cfg->server_address
                                             : PPK_STR("http://localhost:4040");
    if ((rc = ppk__upload_check_config(&cfg->upload, err, err_len)) ||
        (rc = check_server(server, "server_address", err, err_len)) ||
        (rc = check_app(cfg->application_name, "application_name", err, err_len)) ||
        (rc = check_tags(cfg->tags, err, err_len)) ||
        (rc = check_tenant(cfg->tenant_id, "tenant_id", err, err_len)))
        return rc;
    if (cfg->sample_rate < 0 || cfg->sample_rate > 1000000000)
        return ppk__upload_err(err, err_len, "sample_rate: %lld is not in 1..1e9",
                               (long long)cfg->sample_rate);

    py_ctx *p = PPK_MEM_NEW(&cfg->upload.allocator, py_ctx, mem);
    if (!p) return PPK_ENOMEM;
    p->sample_rate = cfg->sample_rate ? cfg->sample_rate : 100;
    char *tenant = NULL, *spy = NULL, *token = NULL, *h_auth = NULL;
    ppk__mem tmp; /* the Authorization header, until the sink has its copy */
    ppk__mem_init(&tmp, &cfg->upload.allocator);
    size_t h_auth_len = 0;
    while (server.len && server.ptr[server.len - 1] == '/') server.len--;
    if ((rc = ppk__upload_str(&p->mem, server, "server_address", NULL, &p->base, err, err_len)) ||
        (rc = ppk__upload_check_url(p->base, "server_address", err, err_len)) ||
        (rc = ppk__upload_str(&p->mem, cfg->spy_name, "spy_name", NULL, &spy, err, err_len)) ||
        (rc = ppk__upload_str(&p->mem, cfg->tenant_id, "tenant_id", NULL, &tenant, err,
                              err_len)))
        goto fail;
    /* Basic auth with a user and a password; else a bearer token if there is one (a
     * user without a password beside a token is left out, as Pyroscope's Go client
     * does); a user alone: basic auth with an empty password. One Authorization
     * header either way. */
    int basic = cfg->basic_auth_user.len && (cfg->basic_auth_password.len || !cfg->auth_token.len);
    if (basic &&
        ((rc = ppk__upload_str(&p->mem, cfg->basic_auth_user, "basic_auth_user", ":", &p->user,
                               err, err_len)) ||
         (rc = ppk__upload_str(&p->mem, cfg->basic_auth_password, "basic_auth_password", NULL,
                               &p->password, err, err_len))))
        goto fail;
    if (!basic && cfg->auth_token.len) {
        if ((rc = ppk__upload_str(&p->mem, cfg->auth_token, "auth_token", NULL, &token, err,
                                  err_len)))
            goto fail;
        h_auth_len = sizeof "Authorization: Bearer " + strlen(token);
        if (!(h_auth = ppk__mem_alloc(&tmp, h_auth_len))) goto nomem;
        snprintf(h_auth, h_auth_len, "Authorization: Bearer %s", token);
    }

    if (!(p->name_enc = series_name(&p->mem, cfg->application_name, cfg->tags))) goto nomem;
    const char *spy_name = spy[0] ? spy : "pprofkit";
    p->spy_enc = pct(&p->mem, spy_name, strlen(spy_name));
    if (!p->spy_enc) goto nomem;

    char h_agent[64], h_tenant[176];
    snprintf(h_agent, sizeof h_agent, "User-Agent: pprofkit/%s", PPK_VERSION_STRING);
    snprintf(h_tenant, sizeof h_tenant, "X-Scope-OrgID: %.150s", tenant); /* checked: <= 150 */
    const char *headers[3] = {h_agent};
    size_t n_headers = 1;
    if (cfg->tenant_id.len) headers[n_headers++] = h_tenant;
    if (h_auth) headers[n_headers++] = h_auth;
    ppk__upload_str_free(&p->mem, tenant);
    ppk__upload_str_free(&p->mem, spy);
    ppk__upload_str_free(&p->mem, token);
    static const ppk__upload_ops ops = {.prepare = py_prepare, .build = py_build,
                                        .setopt = py_setopt, .free = py_free};
    /* It copies the headers, and owns p from here on. */
    rc = ppk__upload_create(&cfg->upload, &ops, p, headers, n_headers, out, err, err_len);
    if (h_auth) ppk__mem_free(&tmp, h_auth, h_auth_len);
    return rc;

nomem:
    rc = PPK_ENOMEM;
fail:
    ppk__upload_str_free(&p->mem, tenant);
    ppk__upload_str_free(&p->mem, spy);
    ppk__upload_str_free(&p->mem, token);
    if (h_auth) ppk__mem_free(&tmp, h_auth, h_auth_len);
    py_free(p);
    return rc;
}
