/*
 * head.c - lookups in a request's head. See head.h.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "head.h"

static const char *field_lookup(const struct svc_field *fields, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(fields[i].name, name))
            return fields[i].value;
    return NULL;
}

const char *svc_head_header(const struct svc_head *head, const char *name)
{
    return field_lookup(head->headers, head->n_headers, name);
}

const char *svc_head_query(const struct svc_head *head, const char *key)
{
    return field_lookup(head->query, head->n_query, key);
}

const char *svc_head_unknown_query(const struct svc_head *head, const char *const *known)
{
    for (size_t i = 0; i < head->n_query; i++) {
        const char *const *k = known;
        while (*k && strcmp(head->query[i].name, *k))
            k++;
        if (!*k)
            return head->query[i].name;
    }
    return NULL;
}

void svc_head_fini(struct svc_head *head)
{
    free(head->headers);
    free(head->query);
    memset(head, 0, sizeof *head);
}
