/*
 * body_pool.h - request-body buffers kept for reuse across requests.
 *
 * A 100 MB upload written into freshly allocated memory costs a page fault (and the zeroing of a
 * page) every 4 KiB, and giving the memory back afterwards (glibc unmaps big blocks) means the
 * next request pays it all again. The pool keeps the buffers of finished requests, up to a byte
 * budget, and hands them out again: steady traffic receives its bodies into memory that is
 * already mapped, and with the CUDA backend already pinned (buffers come from
 * ecg_engine_host_alloc(), which the backend can DMA from without a staging copy).
 *
 * Policy: get() returns the smallest idle buffer that is large enough (so big buffers stay for
 * big bodies), or a fresh one rounded up to an eighth of its power of two (so slightly different
 * sizes still reuse). put() keeps a buffer while at most SVC_BODY_POOL_SLOTS buffers and
 * max_idle_bytes are idle, dropping the smallest idle buffers first. Memory in use by requests
 * is not counted: the process holds at most (bodies in flight) + max_idle_bytes of bodies.
 *
 * Threading: get and put may be called from any thread (one mutex, held only to pick a slot;
 * allocation and freeing happen outside it). init, set_engine and fini run on the main thread
 * while no request is in flight. A buffer is owned by whoever got it until it is put back.
 */
#ifndef SVC_BODY_POOL_H
#define SVC_BODY_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ecg.h"

#define SVC_BODY_POOL_SLOTS 8u

struct svc_body_pool {
    pthread_mutex_t mutex;
    struct ecg_engine *engine;   /* allocator (ecg_engine_host_alloc/free); NULL = malloc/free */
    size_t max_idle_bytes;
    unsigned n_idle;
    size_t idle_bytes;           /* sum of the idle buffers' capacities */
    struct {
        char *ptr;
        size_t cap;
    } idle[SVC_BODY_POOL_SLOTS];
    /* counters for /metrics and tests */
    atomic_uint_fast64_t reused;     /* get() served from an idle buffer */
    atomic_uint_fast64_t allocated;  /* get() that allocated */
};

/* Starts an empty pool that keeps at most max_idle_bytes idle (0: keeps nothing). */
void svc_body_pool_init(struct svc_body_pool *pool, size_t max_idle_bytes);

/* Allocates from now on with ecg_engine_host_alloc(engine) (engine outlives the pool's buffers).
 * Call before the first get(), or while the pool is empty and no buffer is out. */
void svc_body_pool_set_engine(struct svc_body_pool *pool, struct ecg_engine *engine);

/*
 * A buffer of at least need bytes (need > 0); its capacity goes to *cap. With prefer_up_to > need
 * (a body of unknown length), the largest idle buffer of at most prefer_up_to bytes is preferred,
 * so that a chunked upload like the last one needs no growth. NULL (and *cap 0) when out of
 * memory.
 */
char *svc_body_pool_get(struct svc_body_pool *pool, size_t need, size_t prefer_up_to,
                        size_t *cap);

/* Gives a buffer back (ptr NULL is a no-op); cap is what get() reported. */
void svc_body_pool_put(struct svc_body_pool *pool, char *ptr, size_t cap);

/* Bytes held by idle buffers now. */
size_t svc_body_pool_idle_bytes(struct svc_body_pool *pool);

/* Frees every idle buffer now (the memory budget needs the room); buffers out stay valid. */
void svc_body_pool_trim(struct svc_body_pool *pool);

/* Frees every idle buffer. Buffers still out must not be put back afterwards. */
void svc_body_pool_fini(struct svc_body_pool *pool);

#endif /* SVC_BODY_POOL_H */
