/*
 * buf.c - a growable byte buffer for building output (JSON answers, model files).
 *
 * Allocation failure is sticky: the buffer sets `failed` and ignores further appends, so a writer
 * can append freely and check once at the end.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"

char *ecg_buf_reserve(struct ecg_buf *buf, size_t extra)
{
    if (buf->failed)
        return NULL;
    if (extra > SIZE_MAX - buf->len) {
        buf->failed = true;
        return NULL;
    }
    size_t need = buf->len + extra + 1; /* keep room for a terminating NUL */
    if (need > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 4096;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *grown = realloc(buf->data, cap);
        if (!grown) {
            buf->failed = true;
            return NULL;
        }
        buf->data = grown;
        buf->cap = cap;
    }
    return buf->data + buf->len;
}

void ecg_buf_append(struct ecg_buf *buf, const char *bytes, size_t len)
{
    char *tail = ecg_buf_reserve(buf, len);
    if (!tail)
        return;
    memcpy(tail, bytes, len);
    buf->len += len;
    buf->data[buf->len] = '\0';
}

void ecg_buf_puts(struct ecg_buf *buf, const char *str)
{
    ecg_buf_append(buf, str, strlen(str));
}

void ecg_buf_printf(struct ecg_buf *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
        buf->failed = true;
        return;
    }
    char *tail = ecg_buf_reserve(buf, (size_t)need);
    if (!tail)
        return;
    va_start(ap, fmt);
    vsnprintf(tail, (size_t)need + 1, fmt, ap);
    va_end(ap);
    buf->len += (size_t)need;
}

void ecg_buf_fini(struct ecg_buf *buf)
{
    if (!buf)
        return;
    free(buf->data);
    memset(buf, 0, sizeof *buf);
}
