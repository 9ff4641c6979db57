/*
 * forks.c - the fork registry (forks.h).
 */
#include "forks.h"

#include <pthread.h>
#include <stddef.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ppk__forkable *g_head;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void each(int kind, int step) {
    for (ppk__forkable *f = g_head; f; f = f->next) {
        if (f->kind != kind) continue;
        if (step == 0) f->prepare(f);
        else if (step == 1) f->parent(f);
        else f->child(f);
    }
}

static void on_prepare(void) {
    pthread_mutex_lock(&g_lock);
    each(PPK__FORK_UPLOADER, 0);
    each(PPK__FORK_RECORDER, 0);
}

static void on_parent(void) {
    each(PPK__FORK_RECORDER, 1);
    each(PPK__FORK_UPLOADER, 1);
    pthread_mutex_unlock(&g_lock);
}

static void on_child(void) {
    each(PPK__FORK_RECORDER, 2);
    each(PPK__FORK_UPLOADER, 2);
    pthread_mutex_unlock(&g_lock);
}

static void register_handlers(void) { pthread_atfork(on_prepare, on_parent, on_child); }

void ppk__fork_add(ppk__forkable *f) {
    pthread_once(&g_once, register_handlers);
    pthread_mutex_lock(&g_lock);
    f->next = g_head;
    g_head = f;
    pthread_mutex_unlock(&g_lock);
}

void ppk__fork_remove(ppk__forkable *f) {
    pthread_mutex_lock(&g_lock);
    for (ppk__forkable **pp = &g_head; *pp; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
}

int ppk__fork_if_listed(ppk__forkable *f, void (*fn)(ppk__forkable *f)) {
    int listed = 0;
    pthread_mutex_lock(&g_lock);
    for (ppk__forkable *g = g_head; g && !listed; g = g->next) listed = g == f;
    if (listed) fn(f);
    pthread_mutex_unlock(&g_lock);
    return listed;
}
