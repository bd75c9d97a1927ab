/*
 * head.h - a request's head as the service reads it: method, decoded path, version, header fields
 * and query arguments, in the order they arrived.
 *
 * connections.c fills one from libmicrohttpd when the headers are in (svc_head_from_mhd); from
 * then on every check (admission.c, the routes, cors.c, the token) reads the head and never asks
 * libmicrohttpd, so that a harness (tests/fuzz/fuzz_request.c) or a unit test drives the very
 * same checks with a head of its own, without sockets or threads.
 *
 * Lookups follow libmicrohttpd's (MHD_lookup_connection_value): the first field whose name
 * matches ignoring case. A query key given without '=' has a NULL value, which a lookup returns
 * as if the key were absent (libmicrohttpd's behaviour), while iterating sees the key.
 *
 * Ownership: the two field arrays are the head's (svc_head_fini frees them); the strings belong
 * to whoever filled the head (libmicrohttpd's pool: valid until the request completes).
 * Threading: read by the thread that holds the request.
 */
#ifndef SVC_HEAD_H
#define SVC_HEAD_H

#include <stdbool.h>
#include <stddef.h>

struct svc_field {
    const char *name;
    const char *value;      /* NULL for a query key without '=' */
};

struct svc_head {
    const char *method;     /* as sent */
    const char *url;        /* the path, percent-decoded, without the query */
    const char *version;    /* "HTTP/1.1", "HTTP/1.0" */
    struct svc_field *headers;
    size_t n_headers;
    struct svc_field *query;
    size_t n_query;
    bool incomplete;        /* the fields could not be stored (out of memory): refused */
};

/* The value of the first header named name (any case), or NULL. */
const char *svc_head_header(const struct svc_head *head, const char *name);

/* The value of the first query argument named key (any case), or NULL (also when it has none). */
const char *svc_head_query(const struct svc_head *head, const char *key);

/* The first query key (in arrival order) that is none of known (NULL-terminated; exact case),
 * or NULL when every key is known. */
const char *svc_head_unknown_query(const struct svc_head *head, const char *const *known);

/* Frees the field arrays and empties the head. Accepts an empty head. */
void svc_head_fini(struct svc_head *head);

#endif /* SVC_HEAD_H */
