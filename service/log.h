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

#include "ecg.h"

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

#endif /* SVC_LOG_H */
