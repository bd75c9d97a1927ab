/*
 * log.h - structured logs: one JSON object per line on stderr.
 *
 * Access logs carry time, method, path, status, bytes in and out, duration and request id; no log
 * line ever carries signal data or request bodies. Each line is written with a single write(2),
 * so lines from different threads never interleave.
 *
 * Threading: every function may be called from any thread.
 */
#ifndef SVC_LOG_H
#define SVC_LOG_H

#include <pthread.h>
#include <stdint.h>

#include "ecg.h"

/* At most this many noise lines a second; the rest are counted and reported in the next line. */
#define SVC_LOG_NOISE_PER_S 10u

/* A rate limit for connection-level noise (aborted connections, libmicrohttpd warnings), which
 * a hostile client can produce at will. */
struct svc_log_limiter {
    pthread_mutex_t mutex;
    long window_s;          /* the second being counted (monotonic) */
    unsigned in_window;     /* lines written in it */
    uint64_t suppressed;    /* lines dropped since the last one written */
    uint64_t suppressed_total;
};

/* Appends str as a JSON string literal (quotes included), escaping what JSON requires and
 * replacing bytes that are not valid UTF-8 by U+FFFD. */
void svc_json_string(struct ecg_buf *out, const char *str);

/* Starts a log line: {"time":"...","level":"...","event":"..." (no closing brace). */
void svc_log_begin(struct ecg_buf *line, const char *level, const char *event);

/* Closes the line and writes it to stderr; frees the buffer. */
void svc_log_end(struct ecg_buf *line);

/* A one-shot line with a "message" member. */
void svc_log(const char *level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void svc_log_limiter_init(struct svc_log_limiter *limiter);
void svc_log_limiter_fini(struct svc_log_limiter *limiter);

/* svc_log() at level "warn" within the limiter's rate; beyond it the line is only counted. */
void svc_log_noise(struct svc_log_limiter *limiter, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* svc_log_end() of a line begun with svc_log_begin(), within the limiter's rate (else freed). */
void svc_log_noise_line(struct svc_log_limiter *limiter, struct ecg_buf *line);

/* Lines the limiter dropped so far. */
uint64_t svc_log_suppressed(struct svc_log_limiter *limiter);

#endif /* SVC_LOG_H */
