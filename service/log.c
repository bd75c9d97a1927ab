/*
 * log.c - JSON-lines logs on stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* Length of the UTF-8 sequence starting at p if it is valid, else 0. */
static size_t utf8_valid_len(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t len;
    unsigned min;
    unsigned cp;
    if ((p[0] & 0xe0) == 0xc0) {
        len = 2, min = 0x80, cp = p[0] & 0x1f;
    } else if ((p[0] & 0xf0) == 0xe0) {
        len = 3, min = 0x800, cp = p[0] & 0x0f;
    } else if ((p[0] & 0xf8) == 0xf0) {
        len = 4, min = 0x10000, cp = p[0] & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0; /* also stops at the terminating NUL */
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void svc_json_string(struct ecg_buf *out, const char *str)
{
    ecg_buf_puts(out, "\"");
    const unsigned char *p = (const unsigned char *)(str ? str : "");
    while (*p) {
        if (*p == '"' || *p == '\\') {
            ecg_buf_printf(out, "\\%c", *p);
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            ecg_buf_printf(out, "\\u%04x", *p);
            p++;
        } else {
            size_t len = utf8_valid_len(p);
            if (len) {
                ecg_buf_append(out, (const char *)p, len);
                p += len;
            } else {
                ecg_buf_puts(out, "\\ufffd");
                p++;
            }
        }
    }
    ecg_buf_puts(out, "\"");
}

void svc_log_begin(struct ecg_buf *line, const char *level, const char *event)
{
    struct timeval now;
    gettimeofday(&now, NULL);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char stamp[40];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    ecg_buf_printf(line, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"event\":", stamp,
                   (long)(now.tv_usec / 1000), level);
    svc_json_string(line, event);
}

void svc_log_end(struct ecg_buf *line)
{
    ecg_buf_puts(line, "}\n");
    if (!line->failed) {
        size_t done = 0;
        while (done < line->len) {
            ssize_t n = write(STDERR_FILENO, line->data + done, line->len - done);
            if (n <= 0)
                break; /* nowhere to report a failing stderr */
            done += (size_t)n;
        }
    }
    ecg_buf_fini(line);
}

/* Begins a line with a "message" member formatted from fmt (not closed). */
static void message_line(struct ecg_buf *line, const char *level, const char *event,
                         const char *fmt, va_list ap)
{
    char message[1024];
    vsnprintf(message, sizeof message, fmt, ap);
    svc_log_begin(line, level, event);
    ecg_buf_puts(line, ",\"message\":");
    svc_json_string(line, message);
}

void svc_log(const char *level, const char *event, const char *fmt, ...)
{
    struct ecg_buf line = {0};
    va_list ap;
    va_start(ap, fmt);
    message_line(&line, level, event, fmt, ap);
    va_end(ap);
    svc_log_end(&line);
}

void svc_log_limiter_init(struct svc_log_limiter *limiter)
{
    memset(limiter, 0, sizeof *limiter);
    pthread_mutex_init(&limiter->mutex, NULL);
}

void svc_log_limiter_fini(struct svc_log_limiter *limiter)
{
    pthread_mutex_destroy(&limiter->mutex);
}

/* True when one more line fits this second; *dropped = lines dropped before it (then reset). */
static bool limiter_take(struct svc_log_limiter *limiter, uint64_t *dropped)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&limiter->mutex);
    if (now.tv_sec != limiter->window_s) {
        limiter->window_s = now.tv_sec;
        limiter->in_window = 0;
    }
    bool allowed = limiter->in_window < SVC_LOG_NOISE_PER_S;
    *dropped = 0;
    if (allowed) {
        limiter->in_window++;
        *dropped = limiter->suppressed;
        limiter->suppressed = 0;
    } else {
        limiter->suppressed++;
        limiter->suppressed_total++;
    }
    pthread_mutex_unlock(&limiter->mutex);
    return allowed;
}

void svc_log_noise_line(struct svc_log_limiter *limiter, struct ecg_buf *line)
{
    uint64_t dropped = 0;
    if (!limiter_take(limiter, &dropped)) {
        ecg_buf_fini(line);
        return;
    }
    if (dropped)
        ecg_buf_printf(line, ",\"suppressed_before\":%llu", (unsigned long long)dropped);
    svc_log_end(line);
}

void svc_log_noise(struct svc_log_limiter *limiter, const char *event, const char *fmt, ...)
{
    struct ecg_buf line = {0};
    va_list ap;
    va_start(ap, fmt);
    message_line(&line, "warn", event, fmt, ap);
    va_end(ap);
    svc_log_noise_line(limiter, &line);
}

uint64_t svc_log_suppressed(struct svc_log_limiter *limiter)
{
    pthread_mutex_lock(&limiter->mutex);
    uint64_t total = limiter->suppressed_total;
    pthread_mutex_unlock(&limiter->mutex);
    return total;
}
