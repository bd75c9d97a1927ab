/*
 * body_pool.c - request-body buffers kept for reuse (see body_pool.h).
 */
#include <stdlib.h>
#include <string.h>

#include "body_pool.h"

/* Fresh buffers: at least this much, and rounded up to an eighth of their power of two. */
#define BODY_POOL_MIN_ALLOC (64u << 10)

static size_t round_capacity(size_t need)
{
    if (need <= BODY_POOL_MIN_ALLOC)
        return BODY_POOL_MIN_ALLOC;
    size_t top = 1;
    while (top <= need / 2)
        top <<= 1; /* the highest power of two <= need */
    size_t step = top / 8;
    size_t rounded = (need + step - 1) / step * step;
    return rounded < need ? need : rounded; /* wrapped: no rounding */
}

static char *pool_alloc(struct svc_body_pool *pool, size_t bytes)
{
    return pool->engine ? ecg_engine_host_alloc(pool->engine, bytes) : malloc(bytes);
}

static void pool_free(struct svc_body_pool *pool, char *ptr)
{
    if (pool->engine)
        ecg_engine_host_free(pool->engine, ptr);
    else
        free(ptr);
}

void svc_body_pool_init(struct svc_body_pool *pool, size_t max_idle_bytes)
{
    memset(pool, 0, sizeof *pool);
    pthread_mutex_init(&pool->mutex, NULL);
    pool->max_idle_bytes = max_idle_bytes;
    atomic_init(&pool->reused, 0);
    atomic_init(&pool->allocated, 0);
}

void svc_body_pool_set_engine(struct svc_body_pool *pool, struct ecg_engine *engine)
{
    pthread_mutex_lock(&pool->mutex);
    for (unsigned i = 0; i < pool->n_idle; i++)
        pool_free(pool, pool->idle[i].ptr);
    pool->n_idle = 0;
    pool->idle_bytes = 0;
    pool->engine = engine;
    pthread_mutex_unlock(&pool->mutex);
}

/* Removes idle slot i (mutex held). */
static void take_slot(struct svc_body_pool *pool, unsigned i, char **ptr, size_t *cap)
{
    *ptr = pool->idle[i].ptr;
    *cap = pool->idle[i].cap;
    pool->idle_bytes -= *cap;
    pool->idle[i] = pool->idle[--pool->n_idle];
}

char *svc_body_pool_get(struct svc_body_pool *pool, size_t need, size_t prefer_up_to,
                        size_t *cap)
{
    char *ptr = NULL;
    *cap = 0;
    if (!need)
        need = 1;
    pthread_mutex_lock(&pool->mutex);
    int best = -1;
    if (prefer_up_to > need) {
        for (unsigned i = 0; i < pool->n_idle; i++)
            if (pool->idle[i].cap >= need && pool->idle[i].cap <= prefer_up_to &&
                (best < 0 || pool->idle[i].cap > pool->idle[best].cap))
                best = (int)i;
    }
    if (best < 0) {
        for (unsigned i = 0; i < pool->n_idle; i++)
            if (pool->idle[i].cap >= need && (best < 0 || pool->idle[i].cap < pool->idle[best].cap))
                best = (int)i;
    }
    if (best >= 0)
        take_slot(pool, (unsigned)best, &ptr, cap);
    pthread_mutex_unlock(&pool->mutex);
    if (ptr) {
        atomic_fetch_add(&pool->reused, 1);
        return ptr;
    }
    size_t bytes = round_capacity(need);
    ptr = pool_alloc(pool, bytes);
    if (!ptr && bytes > need) {
        bytes = need;
        ptr = pool_alloc(pool, bytes);
    }
    if (!ptr)
        return NULL;
    atomic_fetch_add(&pool->allocated, 1);
    *cap = bytes;
    return ptr;
}

void svc_body_pool_put(struct svc_body_pool *pool, char *ptr, size_t cap)
{
    char *drop[SVC_BODY_POOL_SLOTS + 1];
    unsigned n_drop = 0;
    if (!ptr)
        return;
    pthread_mutex_lock(&pool->mutex);
    if (cap > pool->max_idle_bytes) {
        drop[n_drop++] = ptr;
    } else {
        /* Make room by dropping the smallest idle buffers, unless the newcomer is the smallest. */
        while (pool->n_idle &&
               (pool->n_idle == SVC_BODY_POOL_SLOTS || pool->idle_bytes + cap > pool->max_idle_bytes)) {
            unsigned smallest = 0;
            for (unsigned i = 1; i < pool->n_idle; i++)
                if (pool->idle[i].cap < pool->idle[smallest].cap)
                    smallest = i;
            if (pool->idle[smallest].cap > cap)
                break;
            char *victim;
            size_t victim_cap;
            take_slot(pool, smallest, &victim, &victim_cap);
            drop[n_drop++] = victim;
        }
        if (pool->n_idle < SVC_BODY_POOL_SLOTS && pool->idle_bytes + cap <= pool->max_idle_bytes) {
            pool->idle[pool->n_idle].ptr = ptr;
            pool->idle[pool->n_idle].cap = cap;
            pool->n_idle++;
            pool->idle_bytes += cap;
        } else {
            drop[n_drop++] = ptr;
        }
    }
    pthread_mutex_unlock(&pool->mutex);
    for (unsigned i = 0; i < n_drop; i++)
        pool_free(pool, drop[i]);
}

size_t svc_body_pool_idle_bytes(struct svc_body_pool *pool)
{
    pthread_mutex_lock(&pool->mutex);
    size_t bytes = pool->idle_bytes;
    pthread_mutex_unlock(&pool->mutex);
    return bytes;
}

void svc_body_pool_fini(struct svc_body_pool *pool)
{
    for (unsigned i = 0; i < pool->n_idle; i++)
        pool_free(pool, pool->idle[i].ptr);
    pool->n_idle = 0;
    pool->idle_bytes = 0;
    pthread_mutex_destroy(&pool->mutex);
}

void svc_body_pool_trim(struct svc_body_pool *pool)
{
    char *drop[SVC_BODY_POOL_SLOTS];
    unsigned n_drop = 0;
    pthread_mutex_lock(&pool->mutex);
    for (unsigned i = 0; i < pool->n_idle; i++)
        drop[n_drop++] = pool->idle[i].ptr;
    pool->n_idle = 0;
    pool->idle_bytes = 0;
    pthread_mutex_unlock(&pool->mutex);
    for (unsigned i = 0; i < n_drop; i++)
        pool_free(pool, drop[i]);
}
