/*
 * registry.c - loading the served models, creating their engines, reloading them live.
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
    pthread_mutex_init(&reg->engine_mutex, NULL);
    pthread_mutex_init(&reg->reload_mutex, NULL);
    reg->cfg = cfg;
}

static bool has_model_ext(const char *name)
{
    size_t len = strlen(name), ext = sizeof model_ext - 1;
    return len > ext && !strcmp(name + len - ext, model_ext);
}

static bool reserved_name(const char *name)
{
    return !strcmp(name, "none") || !strcmp(name, "reload");
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

static struct svc_model *entry_create(const char *name, const char *path,
                                      struct ecg_model *model)
{
    struct svc_model *entry = calloc(1, sizeof *entry);
    if (!entry)
        return NULL;
    snprintf(entry->name, sizeof entry->name, "%s", name);
    snprintf(entry->path, sizeof entry->path, "%s", path);
    if (model) {
        struct ecg_model_info info;
        ecg_model_get_info(model, &info);
        snprintf(entry->sha256, sizeof entry->sha256, "%s", info.sha256);
    }
    entry->model = model;
    atomic_init(&entry->refs, 1);
    return entry;
}

void svc_model_release(struct svc_model *entry)
{
    if (!entry || atomic_fetch_sub(&entry->refs, 1) != 1)
        return;
    ecg_engine_destroy(entry->engine);
    ecg_model_free(entry->model);
    free(entry);
}

struct svc_model *svc_model_hold(struct svc_model *entry)
{
    if (entry)
        atomic_fetch_add(&entry->refs, 1);
    return entry;
}

/* The entry named name in the current list, held; NULL if none. */
static struct svc_model *find_held(struct svc_registry *reg, const char *name)
{
    struct svc_model *found = NULL;
    pthread_mutex_lock(&reg->mutex);
    for (size_t i = 0; i < reg->n_models && !found; i++)
        if (!strcmp(reg->models[i]->name, name))
            found = svc_model_hold(reg->models[i]);
    pthread_mutex_unlock(&reg->mutex);
    return found;
}

/* A reload in the making: the new list and what it did. */
struct scan {
    struct svc_model *models[SVC_MAX_MODELS];
    size_t n;
    struct ecg_buf added, replaced, unchanged, skipped; /* JSON list bodies */
};

static void list_add(struct ecg_buf *list, const char *name)
{
    if (list->len)
        ecg_buf_puts(list, ",");
    svc_json_string(list, name);
}

static void skipped_add(struct scan *sc, const char *path, const char *why)
{
    if (sc->skipped.len)
        ecg_buf_puts(&sc->skipped, ",");
    ecg_buf_puts(&sc->skipped, "{\"file\":");
    svc_json_string(&sc->skipped, path);
    ecg_buf_puts(&sc->skipped, ",\"error\":");
    svc_json_string(&sc->skipped, why);
    ecg_buf_puts(&sc->skipped, "}");
    svc_log("warn", "model_skipped", "%s: %s", path, why);
}

/*
 * Adds the model file at path under name to the scan: the loaded entry when the file is the
 * same (SHA-256), a new entry when it is new or changed, the loaded entry again when the file no
 * longer loads. *entry_out (if not NULL) gets the entry used, not held. Returns false, with
 * load_err set, when the file does not load and no entry of that name exists.
 */
static bool scan_add(struct svc_registry *reg, struct scan *sc, const char *name,
                     const char *path, struct svc_model **entry_out, struct ecg_error *load_err)
{
    for (size_t i = 0; i < sc->n; i++)
        if (!strcmp(sc->models[i]->name, name)) { /* the default given as a path, again */
            if (entry_out)
                *entry_out = sc->models[i];
            return true;
        }
    if (sc->n == SVC_MAX_MODELS) {
        ecg_fail(load_err, ECG_ERR_TOO_LARGE, "too_many_models",
                 "more than %d models in the model directory", SVC_MAX_MODELS);
        skipped_add(sc, path, load_err->message);
        return false;
    }
    struct svc_model *old = find_held(reg, name);
    struct svc_model *entry = NULL;
    struct ecg_model *model = ecg_model_load(path, load_err);
    if (!model) {
        char why[600];
        snprintf(why, sizeof why, "%s%s", load_err->message,
                 old ? " (the version loaded before is kept)" : "");
        skipped_add(sc, path, why);
        entry = old;
        if (!entry)
            return false;
    } else {
        struct ecg_model_info info;
        ecg_model_get_info(model, &info);
        if (old && !strcmp(old->sha256, info.sha256)) {
            ecg_model_free(model);
            entry = old;
            list_add(&sc->unchanged, name);
        } else {
            entry = entry_create(name, path, model);
            if (!entry) {
                ecg_model_free(model);
                svc_model_release(old);
                ecg_fail(load_err, ECG_ERR_NOMEM, "out_of_memory", "model entry %s", name);
                skipped_add(sc, path, load_err->message);
                return false;
            }
            list_add(old ? &sc->replaced : &sc->added, name);
            svc_model_release(old);
        }
    }
    sc->models[sc->n++] = entry; /* the scan owns the reference */
    if (entry_out)
        *entry_out = entry;
    return true;
}

/* Loads every *.ecgm of the model directory into the scan, in name order. */
static enum ecg_status scan_dir(struct svc_registry *reg, struct scan *sc, bool required,
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
    char *names[SVC_MAX_MODELS + 1];
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
        if (reserved_name(name)) {
            skipped_add(sc, path, "\"none\" and \"reload\" are reserved names");
            continue;
        }
        struct ecg_error load_err = {0};
        scan_add(reg, sc, name, path, NULL, &load_err);
    }
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    closedir(dir);
    return status;
}

static void scan_fini(struct scan *sc)
{
    for (size_t i = 0; i < sc->n; i++)
        svc_model_release(sc->models[i]);
    ecg_buf_fini(&sc->added);
    ecg_buf_fini(&sc->replaced);
    ecg_buf_fini(&sc->unchanged);
    ecg_buf_fini(&sc->skipped);
}

/* Scans and picks the default: the common part of the first load and of reloads. *def is held. */
static enum ecg_status scan_all(struct svc_registry *reg, struct scan *sc, bool first,
                                struct svc_model **def, struct ecg_error *err)
{
    const char *spec = reg->cfg->model;
    bool none = !strcmp(spec, "none");
    bool is_path = strchr(spec, '/') || has_model_ext(spec);
    *def = NULL;
    enum ecg_status status = scan_dir(reg, sc, !none && !is_path, err);
    if (status != ECG_OK)
        return status;
    if (none) {
        *def = svc_model_hold(reg->none);
        return ECG_OK;
    }
    struct svc_model *entry = NULL;
    char name[64];
    if (is_path) {
        name_of_path(spec, name, sizeof name);
        if (!scan_add(reg, sc, name, spec, &entry, err))
            return err ? err->status : ECG_ERR_MODEL;
    } else {
        for (size_t i = 0; i < sc->n && !entry; i++)
            if (!strcmp(sc->models[i]->name, spec))
                entry = sc->models[i];
        if (!entry && first) {
            /* Load it directly, so that the error says why (missing, corrupt...). */
            char path[1024];
            snprintf(path, sizeof path, "%s/%s%s", reg->cfg->model_dir, spec, model_ext);
            if (!scan_add(reg, sc, spec, path, &entry, err))
                return err ? err->status : ECG_ERR_MODEL;
        }
        if (!entry)
            return ecg_fail(err, ECG_ERR_NOT_FOUND, "default_model_missing",
                            "the default model \"%s\" is no longer in %s: nothing was changed",
                            spec, reg->cfg->model_dir);
    }
    *def = svc_model_hold(entry);
    return ECG_OK;
}

/* Swaps the scan in; the old list goes to the scan, to be released outside the lock. */
static void swap_in(struct svc_registry *reg, struct scan *sc, struct svc_model **def)
{
    struct svc_model *old[SVC_MAX_MODELS];
    size_t n_old = reg->n_models;
    pthread_mutex_lock(&reg->mutex);
    memcpy(old, reg->models, n_old * sizeof old[0]);
    memcpy(reg->models, sc->models, sc->n * sizeof sc->models[0]);
    reg->n_models = sc->n;
    struct svc_model *old_def = reg->def;
    reg->def = *def;
    pthread_mutex_unlock(&reg->mutex);
    memcpy(sc->models, old, n_old * sizeof old[0]);
    sc->n = n_old;
    *def = old_def;
}

enum ecg_status svc_registry_load(struct svc_registry *reg, struct ecg_error *err)
{
    struct scan sc = {0};
    struct svc_model *def = NULL;
    enum ecg_status status = ECG_OK;
    pthread_mutex_lock(&reg->reload_mutex);
    reg->none = entry_create("none", "", NULL);
    if (!reg->none) {
        status = ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "model registry");
        goto out;
    }
    status = scan_all(reg, &sc, true, &def, err);
    if (status != ECG_OK)
        goto out;
    swap_in(reg, &sc, &def);
    reg->first_default = svc_model_hold(reg->def);
    if (!svc_registry_engine(reg, reg->def, err))
        status = err ? err->status : ECG_ERR_INTERNAL;
out:
    svc_model_release(def);
    scan_fini(&sc);
    pthread_mutex_unlock(&reg->reload_mutex);
    return status;
}

enum ecg_status svc_registry_reload(struct svc_registry *reg, struct ecg_buf *report,
                                    struct ecg_error *err)
{
    struct scan sc = {0};
    struct svc_model *def = NULL;
    struct ecg_buf removed = {0}, names = {0};
    pthread_mutex_lock(&reg->reload_mutex);
    enum ecg_status status = scan_all(reg, &sc, false, &def, err);
    if (status != ECG_OK)
        goto out;
    swap_in(reg, &sc, &def); /* sc now holds the old list, def the old default */
    char def_name[64];
    svc_registry_default_name(reg, def_name, sizeof def_name);
    pthread_mutex_lock(&reg->mutex);
    for (size_t i = 0; i < reg->n_models; i++)
        list_add(&names, reg->models[i]->name);
    for (size_t i = 0; i < sc.n; i++) {
        bool kept = false;
        for (size_t j = 0; j < reg->n_models && !kept; j++)
            kept = !strcmp(reg->models[j]->name, sc.models[i]->name);
        if (!kept)
            list_add(&removed, sc.models[i]->name);
    }
    pthread_mutex_unlock(&reg->mutex);
    svc_log("info", "models_reloaded", "default %s; models [%s]; added [%s]; replaced [%s]; "
            "removed [%s]", def_name, names.len ? names.data : "",
            sc.added.len ? sc.added.data : "", sc.replaced.len ? sc.replaced.data : "",
            removed.len ? removed.data : "");
    if (report) {
        ecg_buf_puts(report, "{\"default\":");
        svc_json_string(report, def_name);
        const struct {
            const char *key;
            const struct ecg_buf *list;
        } parts[] = {{"models", &names},          {"added", &sc.added},
                     {"replaced", &sc.replaced}, {"removed", &removed},
                     {"unchanged", &sc.unchanged}, {"skipped", &sc.skipped}};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
            ecg_buf_printf(report, ",\"%s\":[%s]", parts[i].key,
                           parts[i].list->len ? parts[i].list->data : "");
        ecg_buf_puts(report, "}\n");
    }
out:
    svc_model_release(def);
    scan_fini(&sc);
    ecg_buf_fini(&removed);
    ecg_buf_fini(&names);
    pthread_mutex_unlock(&reg->reload_mutex);
    return status;
}

struct svc_model *svc_registry_acquire(struct svc_registry *reg, const char *name)
{
    if (!name || !*name) {
        pthread_mutex_lock(&reg->mutex);
        struct svc_model *def = svc_model_hold(reg->def);
        pthread_mutex_unlock(&reg->mutex);
        return def;
    }
    if (!strcmp(name, "none"))
        return svc_model_hold(reg->none);
    return find_held(reg, name);
}

void svc_registry_default_name(struct svc_registry *reg, char *name, size_t size)
{
    pthread_mutex_lock(&reg->mutex);
    snprintf(name, size, "%s", reg->def ? reg->def->name : "");
    pthread_mutex_unlock(&reg->mutex);
}

void svc_registry_write_list(struct svc_registry *reg, struct ecg_buf *out)
{
    pthread_mutex_lock(&reg->mutex);
    ecg_buf_puts(out, "{\"default\":");
    svc_json_string(out, reg->def ? reg->def->name : "");
    ecg_buf_puts(out, ",\"models\":[");
    for (size_t i = 0; i < reg->n_models; i++) {
        struct ecg_model_info info;
        ecg_model_get_info(reg->models[i]->model, &info);
        ecg_buf_puts(out, i ? ",{\"name\":" : "{\"name\":");
        svc_json_string(out, reg->models[i]->name);
        ecg_buf_printf(out, ",\"default\":%s,\"sha256\":",
                       reg->models[i] == reg->def ? "true" : "false");
        svc_json_string(out, info.sha256);
        ecg_buf_printf(out,
                       ",\"beat_len\":%u,\"latent_dim\":%u,\"threshold\":%.9g,"
                       "\"train_beats\":%llu,\"epochs\":%u,\"records\":",
                       info.beat_len, info.latent_dim, info.threshold,
                       (unsigned long long)info.train_beats, info.epochs);
        svc_json_string(out, info.records);
        ecg_buf_puts(out, "}");
    }
    pthread_mutex_unlock(&reg->mutex);
    ecg_buf_puts(out, "]}\n");
}

struct ecg_engine *svc_registry_engine(struct svc_registry *reg, struct svc_model *entry,
                                       struct ecg_error *err)
{
    /* made once, kept as long as the entry: once there, no lock (every analysis asks) */
    struct ecg_engine *engine = __atomic_load_n(&entry->engine, __ATOMIC_ACQUIRE);
    if (engine)
        return engine;
    pthread_mutex_lock(&reg->engine_mutex);
    if (!entry->engine) {
        struct ecg_engine_config config = {
            .backend = reg->cfg->backend,
            .model = entry->model,
            .workers = reg->cfg->workers,
            .device = reg->cfg->device,
            .max_batch = reg->cfg->max_batch,
            .batch_window_us = reg->cfg->batch_window_us,
            .batch_lanes = reg->cfg->batch_lanes,
            .batch_depth = reg->cfg->batch_depth,
        };
        __atomic_store_n(&entry->engine, ecg_engine_create(&config, err), __ATOMIC_RELEASE);
        if (entry->engine) {
            svc_log("info", "engine_ready", "model %s: backend %s on %s%s%s",
                    entry->name, ecg_engine_backend(entry->engine),
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
    engine = entry->engine;
    pthread_mutex_unlock(&reg->engine_mutex);
    return engine;
}

struct ecg_engine *svc_registry_engine_if_created(struct svc_registry *reg,
                                                  struct svc_model *entry)
{
    /* No lock: it is held for as long as an engine takes to start (seconds), which an HTTP
     * thread must not wait, and a trylock failed whenever a worker was asking for its engine,
     * sending that analysis to a worker too (the engine is published with release order once
     * made, and stays while the entry does). */
    (void)reg;
    return entry ? __atomic_load_n(&entry->engine, __ATOMIC_ACQUIRE) : NULL;
}

void svc_registry_fini(struct svc_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n_models; i++)
        svc_model_release(reg->models[i]);
    reg->n_models = 0;
    svc_model_release(reg->def);
    svc_model_release(reg->first_default);
    svc_model_release(reg->none);
    reg->def = reg->first_default = reg->none = NULL;
    pthread_mutex_destroy(&reg->mutex);
    pthread_mutex_destroy(&reg->engine_mutex);
    pthread_mutex_destroy(&reg->reload_mutex);
}
