/*
 * sink_file.c - the file sink: each export becomes DIR/NAME.PID.SEQ.pb.gz.
 *
 * The bytes are written to a temporary name in DIR (a dot file, so globs for profiles
 * skip it), synced, then renamed, and DIR synced: a reader sees a whole profile or none,
 * and after a power loss a profile's name never holds an empty or partial file (the
 * rename is made durable too, where the file system can sync a directory). DIR must be
 * a directory this process can write to when the sink is made; a relative DIR is joined
 * to the working directory then. The pid is read at each write, so a forked child
 * writes under its own. Called by one exporting thread at a time per recorder (exports
 * are serialized); recorders may share DIR and NAME.
 *
 * A name is never replaced, whether another recorder of this process took it or an
 * earlier process with the same pid (the first process of every container) left it:
 * the next free one of NAME.PID.SEQ-2, -3, ... is taken instead.
 */
#define _GNU_SOURCE /* renameat2 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "sink_file.h"
#include "pprofkit.h"

typedef struct file_sink {
    ppk__mem mem;
    char *dir;  /* NUL-terminated copies */
    char *name;
    size_t dir_len, name_len;
    /* Room for the temporary and the final path, made with the sink: a write allocates
     * nothing, so a fork in the middle of one leaves the child nothing to account for. */
    char *paths;
    size_t path_room; /* of each of the two */
} file_sink;

static const char *extension(ppk_codec c) {
    return c == PPK_CODEC_GZIP ? "pb.gz" : c == PPK_CODEC_ZSTD ? "pb.zst" : "pb";
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Temporary names: unique in the process, whatever sink or recorder writes. */
static atomic_ulong g_tmp_seq;

/* Attempts at a free name, for the temporary file and for the profile. */
#define NAME_TRIES 1000

/* errno of a call the file system (or a seccomp filter) does not support. */
static int unsupported(int e) {
    return e == EINVAL || e == ENOSYS || e == EOPNOTSUPP || e == EPERM;
}

/* Renames `from` to `to` unless `to` exists (then fails with EEXIST). */
static int rename_noreplace(const char *from, const char *to) {
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (!unsupported(errno)) return -1;
    /* Without RENAME_NOREPLACE, a hard link is just as exclusive. */
    if (link(from, to) == 0) {
        unlink(from);
        return 0;
    }
    if (!unsupported(errno)) return -1;
    /* Without hard links either (vfat, some FUSE): look, then rename. */
    if (access(to, F_OK) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

static int file_write(void *opaque, const ppk_export *e) {
    file_sink *fs = opaque;
    size_t n = fs->path_room;
    char *path = fs->paths, *tmp = path + n;
    long pid = (long)getpid();
    int fd = -1;
    for (int i = 0; fd < 0 && i < NAME_TRIES; i++) {
        snprintf(tmp, n, "%s/.%s.%ld.%lu.tmp", fs->dir, fs->name, pid,
                 atomic_fetch_add(&g_tmp_seq, 1) + 1);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    int rc = PPK_ESYS;
    if (fd >= 0) {
        int ok = write_all(fd, e->data.data, e->data.len) == 0 && fsync(fd) == 0;
        if (close(fd) != 0) ok = 0;
        for (int k = 1; ok && rc != 0 && k <= NAME_TRIES; k++) {
            int len = snprintf(path, n, "%s/%s.%ld.%llu", fs->dir, fs->name, pid,
                               (unsigned long long)e->seq);
            if (k > 1) len += snprintf(path + len, n - (size_t)len, "-%d", k);
            snprintf(path + len, n - (size_t)len, ".%s", extension(e->codec));
            if (rename_noreplace(tmp, path) == 0)
                rc = 0;
            else if (errno != EEXIST)
                ok = 0;
        }
        if (rc != 0) unlink(tmp);
    }
    if (rc == 0) {
        /* The rename's durability: a file system that cannot sync a directory says so
         * (EINVAL); the profile is written either way. */
        int dfd = open(fs->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    return rc;
}

static void file_destroy(void *opaque) {
    file_sink *fs = opaque;
    ppk__mem_free(&fs->mem, fs->dir, fs->dir_len + 1);
    ppk__mem_free(&fs->mem, fs->name, fs->name_len + 1);
    ppk__mem_free(&fs->mem, fs->paths, 2 * fs->path_room);
    PPK_MEM_DELETE(fs, file_sink, mem);
}

static char *dup_str(ppk__mem *m, ppk_str s) {
    char *c = ppk__mem_alloc(m, s.len + 1);
    if (!c) return NULL;
    if (s.len) memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}

/* DIR as the sink keeps it: a relative one joined to the working directory now, so that
 * a program that changes directory later (a daemon to "/") does not move its profiles.
 * NULL: no memory, or errno from getcwd. */
static char *dir_from_cwd(ppk__mem *m, ppk_str dir, size_t *len) {
    if (dir.ptr[0] == '/') {
        *len = dir.len;
        return dup_str(m, dir);
    }
    char *cwd = getcwd(NULL, 0);
    if (!cwd) return NULL;
    size_t n = strlen(cwd);
    char *c = ppk__mem_alloc(m, n + 1 + dir.len + 1);
    if (c) {
        memcpy(c, cwd, n);
        c[n] = '/';
        memcpy(c + n + 1, dir.ptr, dir.len);
        c[n + 1 + dir.len] = 0;
        *len = n + 1 + dir.len;
    } else {
        errno = ENOMEM;
    }
    free(cwd);
    return c;
}

int ppk_sink_file(ppk_str dir, ppk_str name, ppk_sink *out) {
    return ppk__sink_file(NULL, dir, name, out);
}

int ppk__sink_file(const ppk_allocator *a, ppk_str dir, ppk_str name, ppk_sink *out) {
    if (!out) return PPK_EINVAL;
    memset(out, 0, sizeof *out);
    if ((!dir.ptr && dir.len) || (!name.ptr && name.len)) return PPK_ENULL;
    if (!dir.len || !name.len || memchr(dir.ptr, 0, dir.len) || memchr(name.ptr, 0, name.len) ||
        memchr(name.ptr, '/', name.len))
        return PPK_EINVAL;
    file_sink *fs = PPK_MEM_NEW(a, file_sink, mem);
    if (!fs) return PPK_ENOMEM;
    fs->name_len = name.len;
    fs->dir = dir_from_cwd(&fs->mem, dir, &fs->dir_len);
    if (!fs->dir) {
        int e = errno;
        PPK_MEM_DELETE(fs, file_sink, mem);
        errno = e;
        return e == ENOMEM ? PPK_ENOMEM : PPK_ESYS;
    }
    fs->name = dup_str(&fs->mem, name);
    /* "DIR/.NAME.PID.SEQ.tmp", "DIR/NAME.PID.SEQ-K.EXT": the numbers take at most 64. */
    fs->path_room = fs->dir_len + name.len + 128;
    fs->paths = ppk__mem_alloc(&fs->mem, 2 * fs->path_room);
    if (!fs->name || !fs->paths) {
        file_destroy(fs);
        return PPK_ENOMEM;
    }
    /* A directory that is not there or not writable would fail every export. */
    struct stat st;
    int e = stat(fs->dir, &st) != 0              ? errno
            : !S_ISDIR(st.st_mode)               ? ENOTDIR
            : access(fs->dir, W_OK | X_OK) != 0 ? errno
                                                 : 0;
    if (e) {
        file_destroy(fs);
        errno = e;
        return PPK_ESYS;
    }
    out->write = file_write;
    out->destroy = file_destroy;
    out->opaque = fs;
    return 0;
}
