/*
 * registry.h - the models the service offers and the engine that runs each one.
 *
 * At start the registry loads every *.ecgm file of the model directory (and the default model,
 * which may also be given as a path) and creates the default model's engine. Engines of the
 * other models are created on first use and kept. "none" as the default model means a
 * signal-only engine (detection and segmentation, no latent or score).
 *
 * Threading: after svc_registry_load() the list of models is immutable and may be read from any
 * thread without locking; svc_registry_engine() creates engines under the registry's mutex, and
 * svc_registry_engine_if_created() only tries it (HTTP threads must not wait on it).
 * The registry owns models and engines; svc_registry_fini() frees them once no request runs.
 */
#ifndef SVC_REGISTRY_H
#define SVC_REGISTRY_H

#include <pthread.h>

#include "config.h"
#include "ecg.h"

#define SVC_MAX_MODELS 32

struct svc_model {
    char name[64];
    char path[1024];
    struct ecg_model *model;    /* NULL only for the "none" pseudo-model */
    struct ecg_engine *engine;  /* NULL until first use (the default's is created at load) */
};

struct svc_registry {
    pthread_mutex_t mutex;      /* guards engine creation */
    struct svc_model models[SVC_MAX_MODELS];
    size_t n_models;
    size_t default_index;
    bool has_model;             /* false when the default is "none" */
    struct svc_model none;      /* the signal-only pseudo-model when has_model is false */
    const struct svc_config *cfg;
};

void svc_registry_init(struct svc_registry *reg, const struct svc_config *cfg);

/*
 * Loads the models and creates the default engine. On failure returns the status with err
 * filled (the default model missing or corrupt, no device for --backend cuda); other models
 * that fail to load are skipped with a warning logged. Slow: runs once, before /readyz turns.
 */
enum ecg_status svc_registry_load(struct svc_registry *reg, struct ecg_error *err) ECG_WUR;

/* The default model entry (valid after a successful load). */
struct svc_model *svc_registry_default(struct svc_registry *reg);

/* The entry named name, or NULL. */
struct svc_model *svc_registry_find(struct svc_registry *reg, const char *name);

/* The engine of entry, created now if needed. NULL with err filled on failure. */
struct ecg_engine *svc_registry_engine(struct svc_registry *reg, struct svc_model *entry,
                                       struct ecg_error *err);

/* The engine of entry if it exists already, else NULL; never creates one and never waits (also
 * NULL while another thread holds the registry, creating an engine): for the HTTP threads, which
 * must not wait for an engine to start. */
struct ecg_engine *svc_registry_engine_if_created(struct svc_registry *reg,
                                                  struct svc_model *entry);

void svc_registry_fini(struct svc_registry *reg);

#endif /* SVC_REGISTRY_H */
