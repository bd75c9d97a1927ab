/*
 * registry.c - loading the served models and creating their engines.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "registry.h"

static const char model_ext[] = ".ecgm";

void svc_registry_init(struct svc_registry *reg, const struct svc_config *cfg)
{
    memset(reg, 0, sizeof *reg);
    pthread_mutex_init(&reg->mutex, NULL);
    reg->cfg = cfg;
}

static bool has_model_ext(const char *name)
{
    size_t len = strlen(name), ext = sizeof model_ext - 1;
    return len > ext && !strcmp(name + len - ext, model_ext);
}

/* The model name of a path: its file name without ".ecgm". */
static void name_of_path(const char *path, char *name, size_t size)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (has_model_ext(base))
        len -= sizeof model_ext - 1;
    if (len >= size)
        len = size - 1;
    memcpy(name, base, len);
    name[len] = '\0';
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds (or replaces) an entry named name loaded from path. */
static enum ecg_status registry_add(struct svc_registry *reg, const char *name, const char *path,
                                    size_t *index, struct ecg_error *err)
{
    size_t slot = reg->n_models;
    for (size_t i = 0; i < reg->n_models; i++)
        if (!strcmp(reg->models[i].name, name))
            slot = i;
    if (slot == SVC_MAX_MODELS)
        return ecg_fail(err, ECG_ERR_TOO_LARGE, "too_many_models",
                        "%s: more than %d models in the model directory", path, SVC_MAX_MODELS);
    struct ecg_model *model = ecg_model_load(path, err);
    if (!model)
        return err ? err->status : ECG_ERR_MODEL;
    struct svc_model *entry = &reg->models[slot];
    ecg_model_free(entry->model);
    memset(entry, 0, sizeof *entry);
    snprintf(entry->name, sizeof entry->name, "%s", name);
    snprintf(entry->path, sizeof entry->path, "%s", path);
    entry->model = model;
    if (slot == reg->n_models)
        reg->n_models++;
    *index = slot;
    return ECG_OK;
}

/* Loads every *.ecgm of the model directory, in name order, skipping (and logging) bad ones. */
static enum ecg_status registry_scan(struct svc_registry *reg, bool required,
                                     struct ecg_error *err)
{
    const char *dir_path = reg->cfg->model_dir;
    DIR *dir = opendir(dir_path);
    if (!dir) {
        if (!required)
            return ECG_OK;
        return ecg_fail(err, ECG_ERR_IO, "model_dir", "model directory \"%s\": %s", dir_path,
                        strerror(errno));
    }
    enum ecg_status status = ECG_OK;
    char *names[SVC_MAX_MODELS];
    size_t n = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] == '.' || !has_model_ext(ent->d_name))
            continue;
        if (n == SVC_MAX_MODELS) {
            svc_log("warn", "model_skipped", "%s/%s: more than %d models, ignored", dir_path,
                    ent->d_name, SVC_MAX_MODELS);
            continue;
        }
        names[n] = strdup(ent->d_name);
        if (!names[n]) {
            status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "listing %s", dir_path);
            goto out;
        }
        n++;
    }
    qsort(names, n, sizeof names[0], compare_names);
    for (size_t i = 0; i < n; i++) {
        char path[1024], name[64];
        snprintf(path, sizeof path, "%s/%s", dir_path, names[i]);
        name_of_path(names[i], name, sizeof name);
        struct ecg_error load_err = {0};
        size_t index;
        if (registry_add(reg, name, path, &index, &load_err) != ECG_OK)
            svc_log("warn", "model_skipped", "%s: %s", path, load_err.message);
    }
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    closedir(dir);
    return status;
}

enum ecg_status svc_registry_load(struct svc_registry *reg, struct ecg_error *err)
{
    const char *spec = reg->cfg->model;
    bool none = !strcmp(spec, "none");
    bool is_path = strchr(spec, '/') || has_model_ext(spec);

    enum ecg_status status = registry_scan(reg, !none && !is_path, err);
    if (status != ECG_OK)
        return status;

    if (none) {
        reg->has_model = false;
        snprintf(reg->none.name, sizeof reg->none.name, "none");
    } else if (is_path) {
        char name[64];
        name_of_path(spec, name, sizeof name);
        status = registry_add(reg, name, spec, &reg->default_index, err);
        if (status != ECG_OK)
            return status;
        reg->has_model = true;
    } else {
        struct svc_model *entry = svc_registry_find(reg, spec);
        if (!entry) {
            /* Load it directly, so that the error says why (missing, corrupt...). */
            char path[1024];
            snprintf(path, sizeof path, "%s/%s%s", reg->cfg->model_dir, spec, model_ext);
            status = registry_add(reg, spec, path, &reg->default_index, err);
            if (status != ECG_OK)
                return status;
        } else {
            reg->default_index = (size_t)(entry - reg->models);
        }
        reg->has_model = true;
    }

    struct ecg_engine *engine = svc_registry_engine(reg, svc_registry_default(reg), err);
    return engine ? ECG_OK : (err ? err->status : ECG_ERR_INTERNAL);
}

struct svc_model *svc_registry_default(struct svc_registry *reg)
{
    if (!reg->has_model)
        return &reg->none;
    return &reg->models[reg->default_index];
}

struct svc_model *svc_registry_find(struct svc_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n_models; i++)
        if (!strcmp(reg->models[i].name, name))
            return &reg->models[i];
    return NULL;
}

struct ecg_engine *svc_registry_engine(struct svc_registry *reg, struct svc_model *entry,
                                       struct ecg_error *err)
{
    pthread_mutex_lock(&reg->mutex);
    if (!entry->engine) {
        struct ecg_engine_config config = {
            .backend = reg->cfg->backend,
            .model = entry->model,
            .workers = reg->cfg->workers,
            .device = reg->cfg->device,
            .max_batch = reg->cfg->max_batch,
            .batch_window_us = reg->cfg->batch_window_us,
            .batch_lanes = reg->cfg->batch_lanes,
        };
        entry->engine = ecg_engine_create(&config, err);
        if (entry->engine) {
            svc_log("info", "engine_ready", "model %s: backend %s on %s%s%s",
                    entry->model ? entry->name : "none", ecg_engine_backend(entry->engine),
                    ecg_engine_device(entry->engine), ecg_engine_note(entry->engine)[0] ? "; " : "",
                    ecg_engine_note(entry->engine));
            /* an operator's --workers below --max-batch bounds every batch: said, not silent */
            config.backend = strcmp(ecg_engine_backend(entry->engine), "cuda") ? ECG_BACKEND_CPU
                                                                              : ECG_BACKEND_CUDA;
            if (config.workers < config.max_batch && ecg_engine_would_batch(&config))
                svc_log("warn", "batch_capped",
                        "--workers %u caps every batch at %u analyses (--max-batch %u): a "
                        "batch's analyses wait in workers; raise --workers, or leave it unset",
                        config.workers, config.workers, config.max_batch);
        }
    }
    struct ecg_engine *engine = entry->engine;
    pthread_mutex_unlock(&reg->mutex);
    return engine;
}

struct ecg_engine *svc_registry_engine_if_created(struct svc_registry *reg,
                                                  struct svc_model *entry)
{
    /* The mutex is held for as long as an engine takes to start (seconds): an HTTP thread must
     * not wait that long, and for a hint it need not. */
    if (pthread_mutex_trylock(&reg->mutex) != 0)
        return NULL;
    struct ecg_engine *engine = entry->engine;
    pthread_mutex_unlock(&reg->mutex);
    return engine;
}

void svc_registry_fini(struct svc_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n_models; i++) {
        ecg_engine_destroy(reg->models[i].engine);
        ecg_model_free(reg->models[i].model);
    }
    ecg_engine_destroy(reg->none.engine);
    reg->none.engine = NULL;
    memset(reg->models, 0, sizeof reg->models);
    reg->n_models = 0;
    pthread_mutex_destroy(&reg->mutex);
}
