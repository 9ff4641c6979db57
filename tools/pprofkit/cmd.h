/*
 * cmd.h - what the files of the pprofkit command share: tools/pprofkit.c (the
 * arguments, top, collapsed, diff and these helpers) and flame.c (the flame graph page).
 *
 * The helpers do not return failures: out of memory, a file that cannot be read or
 * decoded, or a missing sample type prints "pprofkit CMD: ..." on stderr and exits 1,
 * before the command has written anything. Single-threaded.
 */
#ifndef PPK_CMD_H
#define PPK_CMD_H

#include <pprofkit.h>

#include <stddef.h>

/* The subcommand running ("top", "flame"...), for messages. */
extern const char *pk_cmd;

/* realloc that exits on failure; n == 0 allocates one byte. */
void *pk_xrealloc(void *p, size_t n);

/* The profile in the file at path ("-": standard input), to be freed with ppk_pprof_free. */
ppk_pprof *pk_load(const char *path);

/* The index of sample type `want` in p (NULL: the profile's default_sample_type, else its
 * last sample type). Exits if there is no such type; path names p in the message. */
size_t pk_type_index(const ppk_pprof *p, const char *path, const char *want);

/* 1 if a and b have the same sample types (types and units) in the same order. */
int pk_same_types(const ppk_pprof *a, const ppk_pprof *b);
/* The name of frame `line` of location l (line >= n_lines: a location without lines):
 * its function's, or for a frame without a function name, its mapping file's base name
 * in brackets ("[libc.so.6]") or "<unknown>", as go tool pprof names them. Written into
 * buf when made. */
ppk_str pk_frame_name(const ppk_pprof_location *l, size_t line, char *buf, size_t size);

/* `pprofkit flame`: writes the flame graph page of the files, summed, to out (flame.c).
 * sample_type: the type shown first (NULL: as pk_type_index); title: the page's title
 * (NULL or "": "pprofkit flame graph: " and the files' names). Returns 0, or exits 1. */
int pk_flame(const char **files, size_t n_files, const char *sample_type,
             const char *title, const char *out);

#endif
