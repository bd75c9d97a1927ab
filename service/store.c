/*
 * store.c - the in-memory store of analyses (store.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "store.h"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void svc_store_init(struct svc_store *store, size_t cap_bytes, double ttl_s)
{
    memset(store, 0, sizeof *store);
    pthread_mutex_init(&store->mutex, NULL);
    store->cap_bytes = cap_bytes;
    store->ttl_s = ttl_s;
}

static void analysis_free(struct svc_analysis *entry)
{
    ecg_result_free(entry->result);
    ecg_trace_free(entry->trace); /* before the engine can go */
    free(entry->embedding);
    svc_model_release(entry->model_entry);
    ecg_buf_fini(&entry->error);
    free(entry);
}

void svc_store_fini(struct svc_store *store)
{
    struct svc_analysis *entry = store->head;
    while (entry) {
        struct svc_analysis *next = entry->next;
        analysis_free(entry);
        entry = next;
    }
    store->head = store->tail = NULL;
    pthread_mutex_destroy(&store->mutex);
}

struct svc_analysis *svc_analysis_create(void)
{
    struct svc_analysis *entry = calloc(1, sizeof *entry);
    unsigned char raw[SVC_STORE_ID_LEN / 2];
    if (!entry)
        return NULL;
    /* getrandom() of 16 bytes never returns short once the pool is initialised; a failure
     * leaves no safe id, so no entry. */
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        free(entry);
        return NULL;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(entry->id + 2 * i, 3, "%02x", raw[i]);
    atomic_init(&entry->refs, 1);
    entry->created_s = entry->accessed_s = mono_s();
    return entry;
}

void svc_analysis_put(struct svc_analysis *entry)
{
    if (entry && atomic_fetch_sub(&entry->refs, 1) == 1)
        analysis_free(entry);
}

/* Memory an entry holds: the beat table, the trace (host or device), the embedding. */
static size_t analysis_bytes(const struct svc_analysis *entry)
{
    size_t bytes = sizeof *entry + entry->error.cap;
    const struct ecg_result *r = entry->result;
    if (r) {
        size_t per_beat = 3 * sizeof(int64_t) + sizeof(float) + 1;
        if (r->latent)
            per_beat += r->latent_dim * sizeof(float) + sizeof(float) + 1;
        bytes += sizeof *r + r->n_beats * per_beat;
        if (entry->embedding)
            bytes += r->n_beats * (size_t)entry->beat_len * sizeof(float);
    }
    return bytes + ecg_trace_bytes(entry->trace);
}

static void unlink_entry(struct svc_store *store, struct svc_analysis *entry)
{
    if (entry->prev)
        entry->prev->next = entry->next;
    else
        store->head = entry->next;
    if (entry->next)
        entry->next->prev = entry->prev;
    else
        store->tail = entry->prev;
    entry->prev = entry->next = NULL;
    entry->linked = false;
    store->count--;
    store->bytes -= entry->bytes;
}

static void append_entry(struct svc_store *store, struct svc_analysis *entry)
{
    entry->prev = store->tail;
    entry->next = NULL;
    if (store->tail)
        store->tail->next = entry;
    else
        store->head = entry;
    store->tail = entry;
    entry->linked = true;
    store->count++;
    store->bytes += entry->bytes;
}

/* Unlinks an evicted entry, remembers its id, drops the store's reference. Under the mutex. */
static void evict(struct svc_store *store, struct svc_analysis *entry, bool by_ttl)
{
    unlink_entry(store, entry);
    memcpy(store->tombs[store->next_tomb], entry->id, sizeof entry->id);
    store->next_tomb = (store->next_tomb + 1) % SVC_STORE_TOMBS;
    if (by_ttl)
        store->evicted_ttl++;
    else
        store->evicted_memory++;
    svc_analysis_put(entry);
}

/* Evicts entries idle past the time to live (the list is in access order). Under the mutex. */
static void evict_expired(struct svc_store *store, double now)
{
    while (store->head && now - store->head->accessed_s > store->ttl_s)
        evict(store, store->head, true);
}

/* Evicts least recently used entries (never keep) until extra more bytes fit. */
static void evict_for(struct svc_store *store, size_t extra, const struct svc_analysis *keep)
{
    struct svc_analysis *entry = store->head;
    while (entry && store->bytes + extra > store->cap_bytes) {
        struct svc_analysis *next = entry->next;
        if (entry != keep)
            evict(store, entry, false);
        entry = next;
    }
}

bool svc_store_add(struct svc_store *store, struct svc_analysis *entry)
{
    entry->bytes = analysis_bytes(entry);
    pthread_mutex_lock(&store->mutex);
    bool fits = entry->bytes <= store->cap_bytes;
    if (fits) {
        double now = mono_s();
        evict_expired(store, now);
        evict_for(store, entry->bytes, NULL);
        entry->accessed_s = now;
        atomic_fetch_add(&entry->refs, 1);
        append_entry(store, entry);
        store->added++;
    } else {
        store->refused++;
    }
    pthread_mutex_unlock(&store->mutex);
    return fits;
}

void svc_store_finish(struct svc_store *store, struct svc_analysis *entry,
                      enum svc_analysis_state state)
{
    size_t bytes = analysis_bytes(entry);
    pthread_mutex_lock(&store->mutex);
    if (state == SVC_ANALYSIS_DONE && bytes > store->cap_bytes) {
        ecg_result_free(entry->result);
        ecg_trace_free(entry->trace);
        free(entry->embedding);
        entry->result = NULL;
        entry->trace = NULL;
        entry->embedding = NULL;
        entry->status = 413;
        ecg_buf_printf(&entry->error,
                       "{\"error\":{\"status\":413,\"code\":\"too_large_to_keep\",\"message\":"
                       "\"the analysis needs %zu bytes, more than the store's cap of %zu bytes "
                       "(--store-mb)\"}}\n", bytes, store->cap_bytes);
        store->refused++;
        state = SVC_ANALYSIS_FAILED;
        bytes = analysis_bytes(entry);
    }
    if (entry->linked) {
        store->bytes -= entry->bytes;
        entry->bytes = bytes;
        store->bytes += bytes;
        evict_for(store, 0, entry);
    } else {
        entry->bytes = bytes;
    }
    entry->state = state;
    pthread_mutex_unlock(&store->mutex);
}

struct svc_analysis *svc_store_get(struct svc_store *store, const char *id, bool *expired)
{
    struct svc_analysis *found = NULL;
    *expired = false;
    pthread_mutex_lock(&store->mutex);
    double now = mono_s();
    evict_expired(store, now);
    for (struct svc_analysis *entry = store->tail; entry; entry = entry->prev)
        if (!strcmp(entry->id, id)) {
            found = entry;
            break;
        }
    if (found) {
        unlink_entry(store, found);
        found->accessed_s = now;
        append_entry(store, found);
        atomic_fetch_add(&found->refs, 1);
    } else {
        for (size_t i = 0; i < SVC_STORE_TOMBS && !*expired; i++)
            *expired = !strcmp(store->tombs[i], id);
    }
    pthread_mutex_unlock(&store->mutex);
    return found;
}

enum svc_analysis_state svc_analysis_state(struct svc_store *store,
                                           const struct svc_analysis *entry)
{
    pthread_mutex_lock(&store->mutex);
    enum svc_analysis_state state = entry->state;
    pthread_mutex_unlock(&store->mutex);
    return state;
}

bool svc_store_delete(struct svc_store *store, const char *id)
{
    struct svc_analysis *found = NULL;
    pthread_mutex_lock(&store->mutex);
    for (struct svc_analysis *entry = store->head; entry; entry = entry->next)
        if (!strcmp(entry->id, id)) {
            found = entry;
            break;
        }
    if (found) {
        unlink_entry(store, found);
        store->deleted++;
    }
    pthread_mutex_unlock(&store->mutex);
    svc_analysis_put(found);
    return found != NULL;
}

void svc_store_metrics(struct svc_store *store, struct ecg_buf *out)
{
    pthread_mutex_lock(&store->mutex);
    evict_expired(store, mono_s());
    size_t count = store->count, bytes = store->bytes, cap = store->cap_bytes;
    uint64_t added = store->added, deleted = store->deleted, ttl = store->evicted_ttl;
    uint64_t memory = store->evicted_memory, refused = store->refused;
    pthread_mutex_unlock(&store->mutex);
    ecg_buf_printf(out,
                   "# HELP ecgd_analyses_stored Analyses kept for browsing (/v1/analyses).\n"
                   "# TYPE ecgd_analyses_stored gauge\n"
                   "ecgd_analyses_stored %zu\n"
                   "# HELP ecgd_analyses_stored_bytes Memory the kept analyses hold (host and "
                   "device).\n"
                   "# TYPE ecgd_analyses_stored_bytes gauge\n"
                   "ecgd_analyses_stored_bytes %zu\n"
                   "# HELP ecgd_analyses_store_cap_bytes The store's memory cap (--store-mb).\n"
                   "# TYPE ecgd_analyses_store_cap_bytes gauge\n"
                   "ecgd_analyses_store_cap_bytes %zu\n"
                   "# HELP ecgd_analyses_kept_total Analyses added to the store.\n"
                   "# TYPE ecgd_analyses_kept_total counter\n"
                   "ecgd_analyses_kept_total %llu\n"
                   "# HELP ecgd_analyses_removed_total Analyses that left the store, by reason.\n"
                   "# TYPE ecgd_analyses_removed_total counter\n"
                   "ecgd_analyses_removed_total{reason=\"deleted\"} %llu\n"
                   "ecgd_analyses_removed_total{reason=\"ttl\"} %llu\n"
                   "ecgd_analyses_removed_total{reason=\"memory\"} %llu\n"
                   "# HELP ecgd_analyses_refused_total Analyses too large for the store's cap.\n"
                   "# TYPE ecgd_analyses_refused_total counter\n"
                   "ecgd_analyses_refused_total %llu\n",
                   count, bytes, cap, (unsigned long long)added, (unsigned long long)deleted,
                   (unsigned long long)ttl, (unsigned long long)memory,
                   (unsigned long long)refused);
}
