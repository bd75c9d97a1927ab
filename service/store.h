/*
 * store.h - analyses kept in memory for browsing (/v1/analyses): the beat table, the signal
 * (an ecg_trace in the backend's memory: device memory with CUDA) and the embedded beats of
 * each analysis, under a memory cap and a time to live. Nothing is written to disk.
 *
 * An entry is found by an id of 32 random hex digits (unguessable: analyses hold patient data).
 * Entries are kept in least-recently-used order; every lookup refreshes one. Before an entry is
 * added or looked up, entries idle for longer than the time to live are evicted, and adding one
 * evicts the least recently used until the total fits the cap. The ids of the last
 * SVC_STORE_TOMBS evicted entries are remembered, so that a client asking for one learns that
 * it expired (404 "expired") rather than that it never existed (404 "not_found").
 *
 * Ownership and threading: the store's list is guarded by its mutex. An entry is reference
 * counted: svc_store_get() hands out a reference that the caller drops with svc_analysis_put();
 * an entry evicted or deleted while referenced is unlinked at once (its bytes no longer count)
 * and freed by the last put. An entry's fields are written only before it is published
 * (svc_store_add) or, for an asynchronous analysis, by its one worker under the store's mutex
 * (svc_store_finish); readers take them under svc_analysis_state().
 */
#ifndef SVC_STORE_H
#define SVC_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ecg.h"
#include "registry.h"

#define SVC_STORE_ID_LEN 32
#define SVC_STORE_TOMBS 4096

enum svc_analysis_state {
    SVC_ANALYSIS_RUNNING = 0, /* asynchronous: accepted, not analysed yet */
    SVC_ANALYSIS_DONE,
    SVC_ANALYSIS_FAILED,      /* asynchronous analysis that failed: error holds its answer */
};

struct svc_analysis {
    char id[SVC_STORE_ID_LEN + 1];
    atomic_int refs;
    enum svc_analysis_state state;  /* under the store's mutex */
    double created_s, accessed_s;   /* monotonic clock */
    char model_name[64];
    struct ecg_engine *engine;      /* the model's: lives as long as model_entry */
    struct svc_model *model_entry;  /* a reference on the registry entry that owns engine and
                                     * model, so that a reload dropping the model cannot free
                                     * them under this analysis (released when it is freed) */
    const struct ecg_model *model;  /* NULL for the signal-only engine */
    struct ecg_result *result;
    struct ecg_trace *trace;
    float *embedding;               /* n_beats x beat_len */
    uint32_t beat_len;
    uint64_t body_bytes;            /* the request body's size */
    unsigned status;                /* FAILED: the HTTP status of error */
    struct ecg_buf error;           /* FAILED: the JSON error answer */
    size_t bytes;                   /* memory counted against the cap */
    bool linked;
    struct svc_analysis *prev, *next;
};

struct svc_store {
    pthread_mutex_t mutex;
    struct svc_analysis *head, *tail;   /* least recently used first */
    size_t count;
    size_t bytes;
    size_t cap_bytes;
    double ttl_s;
    char tombs[SVC_STORE_TOMBS][SVC_STORE_ID_LEN + 1];
    size_t next_tomb;
    uint64_t added, deleted, evicted_ttl, evicted_memory, refused;
};

void svc_store_init(struct svc_store *store, size_t cap_bytes, double ttl_s);
/* Frees every entry (referenced ones too: call once no request runs). */
void svc_store_fini(struct svc_store *store);

/* A new unpublished entry with a fresh id and one reference (the caller's), or NULL when out
 * of memory. */
struct svc_analysis *svc_analysis_create(void);
/* Drops a reference; the last one frees the entry and what it holds. NULL ok. */
void svc_analysis_put(struct svc_analysis *entry);

/*
 * Publishes entry (its bytes computed from what it holds), evicting expired and then least
 * recently used entries until it fits. Returns false, publishing nothing, when the entry alone
 * exceeds the cap. The store takes its own reference; the caller keeps theirs.
 */
bool svc_store_add(struct svc_store *store, struct svc_analysis *entry);

/* An asynchronous entry's outcome: result, trace and embedding (DONE) or the error answer
 * (FAILED) are moved in; a DONE entry that no longer fits the cap alone turns FAILED (413). */
void svc_store_finish(struct svc_store *store, struct svc_analysis *entry,
                      enum svc_analysis_state state);

/* Looks up id: a new reference (refreshing the entry) or NULL with *expired telling whether
 * the id was evicted. */
struct svc_analysis *svc_store_get(struct svc_store *store, const char *id, bool *expired);
/* The entry's state, read under the store's mutex. */
enum svc_analysis_state svc_analysis_state(struct svc_store *store,
                                           const struct svc_analysis *entry);

/* Removes id; false when there is no such entry. */
bool svc_store_delete(struct svc_store *store, const char *id);

/* Appends the store's Prometheus metrics. */
void svc_store_metrics(struct svc_store *store, struct ecg_buf *out);

#endif /* SVC_STORE_H */
