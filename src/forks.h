/*
 * forks.h - the process-wide registry of what fork() must handle: every recorder and
 * every upload sink, each with its prepare, parent and child handlers.
 *
 * One pthread_atfork registration (made by the first ppk__fork_add) walks the registry
 * under its lock, which the prepare handler takes and the parent and child handlers
 * release. Order: the uploaders' prepare handlers run first, then the recorders': an
 * uploader's prepare may wait up to fork_timeout_ms for a transfer to abort, and it runs
 * before any recorder lock is taken, so a flush never waits for the network (G5). The
 * parent and child handlers run the recorders' first, then the uploaders'. An object is
 * listed from its creation until its destroy begins; the registry's lock is taken before
 * an object's own locks, never after.
 */
#ifndef PPK_FORKS_H
#define PPK_FORKS_H

enum { PPK__FORK_UPLOADER, PPK__FORK_RECORDER, PPK__FORK_KINDS };

typedef struct ppk__forkable {
    struct ppk__forkable *next;
    int kind; /* PPK__FORK_UPLOADER or PPK__FORK_RECORDER */
    void (*prepare)(struct ppk__forkable *f);
    void (*parent)(struct ppk__forkable *f);
    void (*child)(struct ppk__forkable *f);
} ppk__forkable;

/* Lists f (its kind and handlers set). */
void ppk__fork_add(ppk__forkable *f);
/* Unlists f; nothing if it is not listed. */
void ppk__fork_remove(ppk__forkable *f);
/* Calls fn(f) under the registry's lock if f is listed. Returns 1 if it was. */
int ppk__fork_if_listed(ppk__forkable *f, void (*fn)(ppk__forkable *f));

#endif
