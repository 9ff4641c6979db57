/*
 * record.c - decoding the records of record.h.
 */
#include "record.h"

#include <string.h>

void ppk__record_read_frame(const uint8_t *rec, ppk_frame *f, ppk_mapping *m, uint64_t *id) {
    ppk__frec h;
    ppk__frec_ext x;
    ppk__mrec mr;
    memset(f, 0, sizeof *f);
    *id = 0;
    uint32_t kind;
    memcpy(&kind, rec, sizeof kind);
    if (kind == PPK__FREC_ID16) {
        ppk__idrec r;
        memcpy(&r, rec, sizeof r);
        *id = r.id;
        f->line = r.line;
        return;
    }
    memcpy(&h, rec, sizeof h);
    const char *p = (const char *)rec + sizeof h;
    if (h.name_len == PPK__FREC_ID) {
        memcpy(id, p, sizeof *id);
        f->line = h.line;
        f->address = h.address;
        return;
    }
    memset(&x, 0, sizeof x);
    int full = (h.name_len & PPK__FREC_FULL) != 0;
    if (full) {
        memcpy(&x, p, sizeof x);
        p += sizeof x;
        if (x.has_mapping) {
            memcpy(&mr, p, sizeof mr);
            p += sizeof mr;
        }
    }
    uint32_t name_len = h.name_len & ~PPK__FREC_FULL;
    f->name = (ppk_str){p, name_len};
    p += name_len;
    f->filename = (ppk_str){p, h.filename_len};
    p += h.filename_len;
    f->line = h.line;
    f->address = h.address;
    if (!full) return;
    f->system_name = (ppk_str){p, x.system_name_len};
    p += x.system_name_len;
    f->start_line = x.start_line;
    if (x.has_mapping) {
        memset(m, 0, sizeof *m);
        m->memory_start = mr.memory_start;
        m->memory_limit = mr.memory_limit;
        m->file_offset = mr.file_offset;
        m->filename = (ppk_str){p, mr.filename_len};
        p += mr.filename_len;
        m->build_id = (ppk_str){p, mr.build_id_len};
        f->mapping = m;
    }
}

void ppk__record_read_label(const uint8_t *rec, ppk_label *l) {
    ppk__lrec h;
    memcpy(&h, rec, sizeof h);
    const char *key = (const char *)rec + sizeof h;
    memset(l, 0, sizeof *l);
    l->key = (ppk_str){key, h.key_len};
    l->is_num = (int)h.is_num;
    l->num = h.num;
    if (h.is_num)
        l->num_unit = (ppk_str){key + h.key_len, h.value_len};
    else
        l->str = (ppk_str){key + h.key_len, h.value_len};
}
