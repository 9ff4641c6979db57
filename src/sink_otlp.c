/*
 * sink_otlp.c - the OpenTelemetry upload sink: OTLP/HTTP protobuf to a collector
 * (experimental; the schema is that of otlp.c).
 *
 * The exporting thread only queues the export's bytes, as for every upload sink. The
 * uploader thread reads them back (ppk_pprof_read), encodes the request
 * (ppk_otlp_encode), gzips it when configured and posts it to the profiles URL with
 * Content-Type application/x-protobuf. OTLP/HTTP's rules: 429, 502, 503 and 504 are
 * retried (with the answer's Retry-After, see upload_curl.c), other errors are not; a 2xx
 * answer is an ExportProfilesServiceResponse whose partial_success, when set, is
 * counted. The reader's, the encoder's and the compressor's memory is the sink's
 * (counted in its memory statistics), and is freed before the transfer.
 *
 * The configuration is checked and copied at creation into an ot_ctx that the uploader
 * thread only reads: the URL, the resource's strings (defaults filled: the program's
 * name, the host name) and the flag for gzip; the headers go to the shared uploader.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compress.h"
#include "kvlist.h"
#include "upload.h"

typedef struct ot_ctx {
    ppk__mem mem;
    char *url;
    char *strs[6]; /* service, version, environment, host, language, attributes */
    int gzip;
} ot_ctx;

enum { S_SERVICE, S_VERSION, S_ENV, S_HOST, S_LANG, S_ATTRS, N_STRS };

static void ot_free(void *ctx) {
    ot_ctx *o = ctx;
    if (!o) return;
    ppk__upload_str_free(&o->mem, o->url);
    for (int i = 0; i < N_STRS; i++) ppk__upload_str_free(&o->mem, o->strs[i]);
    PPK_MEM_DELETE(o, ot_ctx, mem);
}

static int ot_build(void *ctx, const ppk__upload_job *job, ppk__ubuf *url, ppk__ubuf *body,
                    char *ctype, size_t ctype_len) {
    ot_ctx *o = ctx;
    ppk_allocator a = ppk__mem_allocator(body->mem);
    ppk_read_options ro = {0};
    ro.allocator = a;
    ppk_pprof *p = NULL;
    int rc = ppk_pprof_read(job->data, job->len, &ro, &p, NULL, 0);
    if (rc) return rc == PPK_ENOMEM ? PPK_ENOMEM : PPK_EINVAL;
    ppk_otlp_resource res = {
        ppk_cstr(o->strs[S_SERVICE]), ppk_cstr(o->strs[S_VERSION]), ppk_cstr(o->strs[S_ENV]),
        ppk_cstr(o->strs[S_HOST]),    (int64_t)getpid(),            ppk_cstr(o->strs[S_LANG]),
        ppk_cstr(o->strs[S_ATTRS])};
    ppk_bytes req = {0};
    rc = ppk_otlp_encode(p, &res, &a, &req, NULL, 0);
    ppk_pprof_free(p);
    if (rc) return rc == PPK_ENOMEM ? PPK_ENOMEM : PPK_EINVAL;
    if (o->gzip) {
        ppk__mem m;
        ppk__mem_init(&m, &a);
        ppk__cstream cs;
        ppk__cstream_init(&cs, &m);
        ppk_bytes z = {0};
        rc = ppk__cstream_begin(&cs, PPK_CODEC_GZIP, 0);
        if (!rc) rc = ppk__cstream_write(&cs, req.data, req.len);
        if (!rc) rc = ppk__cstream_end(&cs, &a, &z);
        else ppk__cstream_abort(&cs);
        ppk__cstream_destroy(&cs);
        ppk_bytes_free(&req);
        if (rc) return rc == PPK_ENOMEM ? PPK_ENOMEM : PPK_EINVAL;
        req = z;
    }
    ppk__ubuf_adds(url, o->url);
    ppk__ubuf_add(body, req.data, req.len);
    ppk_bytes_free(&req);
    snprintf(ctype, ctype_len, "application/x-protobuf");
    return 0;
}

/* OTLP/HTTP: only these failures may succeed when sent again. */
static int ot_retryable(long status) {
    return status == 429 || status == 502 || status == 503 || status == 504;
}

/* A varint at b[*i] (advanced), or -1 when malformed. */
static int varint(const uint8_t *b, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64 && *i < n; s += 7) {
        uint8_t c = b[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* Skips one field's value of wire type `wt`; -1 when malformed. */
static int skip(const uint8_t *b, size_t n, size_t *i, unsigned wt) {
    uint64_t v;
    switch (wt) {
    case 0: return varint(b, n, i, &v);
    case 1: return n - *i >= 8 ? (*i += 8, 0) : -1;
    case 5: return n - *i >= 4 ? (*i += 4, 0) : -1;
    case 2:
        if (varint(b, n, i, &v) || v > n - *i) return -1;
        *i += v;
        return 0;
    default: return -1;
    }
}

/* ExportProfilesServiceResponse { ExportProfilesPartialSuccess partial_success = 1 } with
 * { int64 rejected_profiles = 1; string error_message = 2 }. A partial success is a set
 * partial_success with rejected profiles or a message (a warning); a body that does not
 * parse is taken as a plain success (the server said 2xx). The body may be cut at
 * PPK__ANSWER_MAX: partial_success and its message may run past its end (only whether
 * the message is empty matters). */
static int ot_answer(void *ctx, const char *body, size_t len, uint64_t *rejected) {
    (void)ctx;
    const uint8_t *b = (const uint8_t *)body;
    size_t i = 0;
    int partial = 0;
    while (i < len) {
        uint64_t tag, v;
        if (varint(b, len, &i, &tag)) return 0;
        if (tag != (1 << 3 | 2)) {
            if (skip(b, len, &i, tag & 7)) return 0;
            continue;
        }
        if (varint(b, len, &i, &v)) return 0;
        size_t end = v > len - i ? len : i + v;
        while (i < end) {
            if (varint(b, end, &i, &tag)) return 0;
            if (tag == (1 << 3 | 0)) {
                if (varint(b, end, &i, &v)) return 0;
                *rejected = (int64_t)v > 0 ? v : 0;
                partial |= v != 0;
            } else if (tag == (2 << 3 | 2)) {
                if (varint(b, end, &i, &v)) return 0;
                partial |= v != 0;
                i = v > end - i ? end : i + v;
            } else if (skip(b, end, &i, tag & 7)) {
                return 0;
            }
        }
    }
    return partial;
}

/* ---- configuration ------------------------------------------------------------------- */

void ppk_otlp_config_init(ppk_otlp_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    ppk_upload_config_init(&cfg->upload);
}

/* The profiles-specific variable, else the general one. */
static const char *env2(const char *specific, const char *general, const char **name) {
    const char *v = ppk__upload_getenv(specific);
    *name = v ? specific : general;
    return v ? v : ppk__upload_getenv(general);
}

int ppk_otlp_config_from_env(ppk_otlp_config *cfg, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!cfg) return PPK_EINVAL;
    ppk_otlp_config c = *cfg;
    const char *v, *name;
    int rc;
    if ((v = ppk__upload_getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"))) {
        if ((rc = ppk__upload_check_url(v, "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", err, err_len)))
            return rc;
        c.profiles_endpoint = ppk_cstr(v);
    }
    if ((v = ppk__upload_getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))) {
        if ((rc = ppk__upload_check_url(v, "OTEL_EXPORTER_OTLP_ENDPOINT", err, err_len)))
            return rc;
        c.endpoint = ppk_cstr(v);
    }
    if ((v = env2("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS", &name))) {
        if ((rc = ppk__kv_check(ppk_cstr(v), name, err, err_len))) return rc;
        c.headers = ppk_cstr(v);
    }
    if ((v = env2("OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION",
                  &name))) {
        if (strcmp(v, "gzip") && strcmp(v, "none"))
            return ppk__upload_err(err, err_len, "%s: \"%.32s\" is not gzip or none", name, v);
        c.gzip = !strcmp(v, "gzip");
    }
    if ((v = env2("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", &name))) {
        char *end;
        long long ms = strtoll(v, &end, 10);
        if (*end || ms <= 0 || ms > 3600000)
            return ppk__upload_err(err, err_len, "%s: \"%.32s\" is not 1..3600000 ms", name, v);
        c.upload.timeout_ms = ms;
    }
    if ((v = ppk__upload_getenv("OTEL_SERVICE_NAME"))) c.resource.service_name = ppk_cstr(v);
    if ((v = ppk__upload_getenv("OTEL_RESOURCE_ATTRIBUTES"))) {
        if ((rc = ppk__kv_check(ppk_cstr(v), "OTEL_RESOURCE_ATTRIBUTES", err, err_len)))
            return rc;
        c.resource.attributes = ppk_cstr(v);
    }
    *cfg = c;
    return 0;
}

/* "Name: value" lines for the configured headers (values percent-decoded), written into
 * lines[] (allocated from m, caps[i] bytes each); *n their number. */
static int header_lines(ppk__mem *m, ppk_str list, char **lines, size_t *caps, size_t max,
                        size_t *n) {
    ppk_str rest = list, key, val;
    *n = 0;
    while (ppk__kv_next(&rest, &key, &val) == 1) {
        if (*n == max) return PPK_EINVAL;
        size_t cap = key.len + 2 + val.len + 1;
        char *l = ppk__mem_alloc(m, cap);
        if (!l) return PPK_ENOMEM;
        memcpy(l, key.ptr, key.len);
        memcpy(l + key.len, ": ", 2);
        size_t k = ppk__pct_decode(val, l + key.len + 2);
        l[key.len + 2 + k] = 0;
        caps[*n] = cap;
        lines[(*n)++] = l;
    }
    return 0;
}

/* o->url: profiles_endpoint as it is, else endpoint + the signal's path. */
static int ot_url(ot_ctx *o, const ppk_otlp_config *cfg, char *err, size_t err_len) {
    ppk_str base = cfg->endpoint.len ? cfg->endpoint : PPK_STR("http://localhost:4318");
    while (base.len && base.ptr[base.len - 1] == '/') base.len--;
    int rc;
    if (cfg->profiles_endpoint.len) {
        rc = ppk__upload_str(&o->mem, cfg->profiles_endpoint, "profiles_endpoint", " \"",
                             &o->url, err, err_len);
    } else {
        char *b = NULL;
        rc = ppk__upload_str(&o->mem, base, "endpoint", " \"?#", &b, err, err_len);
        if (!rc) {
            size_t n = strlen(b) + sizeof "/v1development/profiles";
            o->url = ppk__mem_alloc(&o->mem, n);
            if (o->url) snprintf(o->url, n, "%s/v1development/profiles", b);
            else rc = PPK_ENOMEM;
            ppk__upload_str_free(&o->mem, b);
        }
    }
    if (rc || (rc = ppk__upload_check_url(o->url, "endpoint", err, err_len))) return rc;
    if (strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))
        return ppk__upload_err(err, err_len, "endpoint: \"%.200s\" is not an http:// or "
                               "https:// URL", o->url);
    return 0;
}

/* o->strs: the resource's strings, the defaults filled: the host's name, and
 * "unknown_service:<program>" unless service.name is set, as a field or an attribute. */
static int ot_resource(ot_ctx *o, const ppk_otlp_resource *r, char *err, size_t err_len) {
    char comm[64], svc[80], host[256];
    ppk_str service = r->service_name, hostname = r->host_name, rest = r->attributes, k, v;
    int in_attributes = 0;
    while (!in_attributes && ppk__kv_next(&rest, &k, &v) == 1)
        in_attributes = k.len == 12 && !memcmp(k.ptr, "service.name", 12);
    if (!service.len && !in_attributes) {
        ppk__upload_comm(comm, sizeof comm);
        snprintf(svc, sizeof svc, "unknown_service:%s", comm);
        service = ppk_cstr(svc);
    }
    if (!hostname.len && gethostname(host, sizeof host) == 0) {
        host[sizeof host - 1] = 0;
        ppk__upload_cut_to_text(host);
        hostname = ppk_cstr(host);
    }
    const ppk_str vals[N_STRS] = {service,  r->service_version, r->environment,
                                  hostname, r->sdk_language,    r->attributes};
    static const char *const names[N_STRS] = {"resource.service_name", "resource.service_version",
                                              "resource.environment", "resource.host_name",
                                              "resource.sdk_language", "resource.attributes"};
    int rc = 0;
    for (int i = 0; i < N_STRS && !rc; i++)
        rc = ppk__upload_str(&o->mem, vals[i], names[i], NULL, &o->strs[i], err, err_len);
    return rc;
}

/* Header names are HTTP tokens (RFC 9110): letters, digits and !#$%&'*+-.^_`|~. */
static int check_header_names(ppk_str list, char *err, size_t err_len) {
    ppk_str rest = list, key, val;
    while (ppk__kv_next(&rest, &key, &val) == 1)
        for (size_t i = 0; i < key.len; i++) {
            char c = key.ptr[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  strchr("!#$%&'*+-.^_`|~", c)))
                return ppk__upload_err(err, err_len, "headers: \"%.*s\" is not a header name",
                                       (int)(key.len > 100 ? 100 : key.len), key.ptr);
        }
    return 0;
}

int ppk_sink_otlp(const ppk_otlp_config *cfg, ppk_sink *out, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!out) return PPK_EINVAL;
    memset(out, 0, sizeof *out);
    if (!cfg) return ppk__upload_err(err, err_len, "config: NULL");
    static const ppk__upload_field fields[] = {
        {"endpoint", offsetof(ppk_otlp_config, endpoint)},
        {"profiles_endpoint", offsetof(ppk_otlp_config, profiles_endpoint)},
        {"headers", offsetof(ppk_otlp_config, headers)},
        {"resource.service_name", offsetof(ppk_otlp_config, resource.service_name)},
        {"resource.service_version", offsetof(ppk_otlp_config, resource.service_version)},
        {"resource.environment", offsetof(ppk_otlp_config, resource.environment)},
        {"resource.host_name", offsetof(ppk_otlp_config, resource.host_name)},
        {"resource.sdk_language", offsetof(ppk_otlp_config, resource.sdk_language)},
        {"resource.attributes", offsetof(ppk_otlp_config, resource.attributes)},
    };
    int rc = ppk__upload_nulls(cfg, fields, sizeof fields / sizeof *fields, err, err_len);
    if (rc) return rc;
    if ((rc = ppk__upload_check_config(&cfg->upload, err, err_len)) ||
        (rc = ppk__kv_check(cfg->headers, "headers", err, err_len)) ||
        (rc = check_header_names(cfg->headers, err, err_len)) ||
        (rc = ppk__kv_check(cfg->resource.attributes, "resource.attributes", err, err_len)))
        return rc;
    if (cfg->gzip != 0 && cfg->gzip != 1)
        return ppk__upload_err(err, err_len, "gzip: %d is not 0 or 1", cfg->gzip);

    ot_ctx *o = PPK_MEM_NEW(&cfg->upload.allocator, ot_ctx, mem);
    if (!o) return PPK_ENOMEM;
    o->gzip = cfg->gzip;
    if ((rc = ot_url(o, cfg, err, err_len)) ||
        (rc = ot_resource(o, &cfg->resource, err, err_len))) {
        ot_free(o);
        return rc;
    }

    /* Headers: the user's, then User-Agent and Content-Encoding. */
    enum { MAX_HEADERS = 64 };
    char *lines[MAX_HEADERS];
    size_t caps[MAX_HEADERS];
    const char *headers[MAX_HEADERS + 2];
    size_t n = 0;
    ppk__mem hm;
    ppk__mem_init(&hm, &cfg->upload.allocator);
    rc = header_lines(&hm, cfg->headers, lines, caps, MAX_HEADERS, &n);
    if (rc == PPK_EINVAL) ppk__upload_err(err, err_len, "headers: more than %d", MAX_HEADERS);
    char h_agent[64];
    snprintf(h_agent, sizeof h_agent, "User-Agent: pprofkit/%s", PPK_VERSION_STRING);
    for (size_t i = 0; i < n; i++) headers[i] = lines[i];
    headers[n] = h_agent;
    headers[n + 1] = "Content-Encoding: gzip";
    if (rc) {
        ot_free(o);
    } else {
        static const ppk__upload_ops ops = {
            .build = ot_build, .free = ot_free, .retryable = ot_retryable, .answer = ot_answer};
        rc = ppk__upload_create(&cfg->upload, &ops, o, headers, n + 1 + (size_t)o->gzip, out,
                                err, err_len); /* frees o on failure */
    }
    for (size_t i = 0; i < n; i++) ppk__mem_free(&hm, lines[i], caps[i]);
    return rc;
}
