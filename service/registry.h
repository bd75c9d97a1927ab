/*
 * registry.h - the models the service offers and the engine that runs each one; hot reload.
 *
 * At start the registry loads every *.ecgm file of the model directory (and the default model,
 * which may also be given as a path) and creates the default model's engine. Engines of the
 * other models are created on first use and kept. "none" is always there: a signal-only engine
 * (detection and segmentation, no latent or score), created on first use, or the default when
 * the server runs with --model none. The names "none" and "reload" are reserved: model files
 * so named are skipped.
 *
 * Reload (svc_registry_reload: POST /v1/models/reload and SIGHUP) rescans the directory without
 * stopping anything: files are loaded first, outside any lock; a file whose SHA-256 is that of
 * the loaded model keeps its entry (and its engine); a new or changed file gets a new entry; a
 * file that no longer loads keeps the last good version; then the list is swapped in one short
 * critical section. Entries are reference-counted: a request holds the entry it resolved
 * (svc_registry_acquire) until it ends (svc_model_release), so an entry removed or replaced by a
 * reload lives, with its engine, until the last request using it is answered. The first default
 * entry is also held until svc_registry_fini(): the body pool's buffers came from its engine.
 *
 * Threading: every function may be called from any thread. The list is guarded by a mutex held
 * only to copy pointers; engine creation by another (held for seconds; an engine, once made, is
 * read without it: svc_registry_engine_if_created never waits); reloads by a third, one at a
 * time.
 */
#ifndef SVC_REGISTRY_H
#define SVC_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>

#include "config.h"
#include "ecg.h"

#define SVC_MAX_MODELS 32

struct svc_model {
    char name[64];
    char path[1024];
    char sha256[65];            /* of the file; "" for "none" */
    struct ecg_model *model;    /* NULL only for the "none" pseudo-model */
    struct ecg_engine *engine;  /* NULL until first use (the default's is created at load); set
                                 * once under engine_mutex, read with acquire loads */
    atomic_int refs;
};

struct svc_registry {
    pthread_mutex_t mutex;          /* guards models[], n_models, def */
    pthread_mutex_t engine_mutex;   /* guards engine creation */
    pthread_mutex_t reload_mutex;   /* one load or reload at a time */
    struct svc_model *models[SVC_MAX_MODELS]; /* by name; one reference each */
    size_t n_models;
    struct svc_model *def;          /* the default (a model, or none); one reference */
    struct svc_model *none;         /* the signal-only pseudo-model; one reference */
    struct svc_model *first_default; /* held until fini (the body pool's engine) */
    const struct svc_config *cfg;
};

void svc_registry_init(struct svc_registry *reg, const struct svc_config *cfg);

/*
 * Loads the models and creates the default engine. On failure returns the status with err
 * filled (the default model missing or corrupt, no device for --backend cuda); other models
 * that fail to load are skipped with a warning logged. Slow: runs once, before /readyz turns.
 */
enum ecg_status svc_registry_load(struct svc_registry *reg, struct ecg_error *err) ECG_WUR;

/*
 * Rescans the model directory (and re-reads a default given as a path), as described above. On
 * success appends to report (if not NULL) the JSON object {"default", "models", "added",
 * "replaced", "removed", "unchanged", "skipped": [{"file", "error"}]} and logs one line. Fails,
 * changing nothing, when the default model is gone (ECG_ERR_NOT_FOUND, default_model_missing)
 * or the directory cannot be read. Callable from any thread, at any time after a load
 * succeeded; requests in flight keep the entries they hold.
 */
enum ecg_status svc_registry_reload(struct svc_registry *reg, struct ecg_buf *report,
                                    struct ecg_error *err) ECG_WUR;

/* The entry named name ("none" included; NULL or "" = the default), with a reference the caller
 * gives back with svc_model_release(); NULL when there is none. */
struct svc_model *svc_registry_acquire(struct svc_registry *reg, const char *name);

/* Takes one more reference on entry (for what outlives the request: a kept analysis); returns
 * entry. NULL ok. */
struct svc_model *svc_model_hold(struct svc_model *entry);

/* Gives back a reference; the last one frees the entry, its engine and its model. NULL ok. */
void svc_model_release(struct svc_model *entry);

/* Writes the default model's name into name (size bytes). */
void svc_registry_default_name(struct svc_registry *reg, char *name, size_t size);

/* Appends GET /v1/models's document {"default", "models": [...]} to out. */
void svc_registry_write_list(struct svc_registry *reg, struct ecg_buf *out);

/* The engine of entry, created now if needed. NULL with err filled on failure. */
struct ecg_engine *svc_registry_engine(struct svc_registry *reg, struct svc_model *entry,
                                       struct ecg_error *err);

/* The engine of entry if it exists already, else NULL (none yet, or one still being created);
 * never creates one and never waits: for the HTTP threads, which must not wait for an engine
 * to start. */
struct ecg_engine *svc_registry_engine_if_created(struct svc_registry *reg,
                                                  struct svc_model *entry);

/* Frees everything; once no request runs. */
void svc_registry_fini(struct svc_registry *reg);

#endif /* SVC_REGISTRY_H */
