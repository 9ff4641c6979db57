/* sink_file.h - the file sink with an allocator (the recorder's, for its out_dir). */
#ifndef PPK_SINK_FILE_H
#define PPK_SINK_FILE_H

#include "pprofkit.h"

/* ppk_sink_file, allocating through `a` (NULL: malloc). */
int ppk__sink_file(const ppk_allocator *a, ppk_str dir, ppk_str name, ppk_sink *out);

#endif
