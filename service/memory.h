/*
 * memory.h - the process's memory budget for requests.
 *
 * Every request reserves its worst-case footprint before the work that needs it: a declared body
 * when its headers arrive (the buffer and what reading and analysing that many bytes can cost),
 * a chunked body as its buffer grows, and the analysis itself when the body is complete. A
 * reservation that does not fit is refused (the caller answers 503 with Retry-After), so the
 * process stays within the budget instead of being killed by the kernel. Idle body buffers kept
 * for reuse (body_pool.h) count too: a reservation that does not fit first drops them.
 *
 * The budget is --memory-budget-mb, or 3/4 of the cgroup v2 memory.max when one is set, or 3/4
 * of physical memory; the rest covers the models, the engine's buffers and libmicrohttpd.
 *
 * Threading: reserve and release may be called from any thread (atomics).
 */
#ifndef SVC_MEMORY_H
#define SVC_MEMORY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "body_pool.h"
#include "ecg.h"

struct svc_memory {
    size_t budget_bytes;
    const char *budget_source;   /* "option", "cgroup" or "ram" */
    atomic_size_t reserved_bytes;
    atomic_uint_fast64_t refused;  /* reservations refused: answered 503 */
    struct svc_body_pool *pool;    /* idle buffers, dropped when a reservation needs room */
};

/* Sets the budget: configured_bytes, or when 0 derived from the cgroup or physical memory. */
void svc_memory_init(struct svc_memory *memory, size_t configured_bytes,
                     struct svc_body_pool *pool);

/*
 * Worst-case bytes of one analysis of a body of body_bytes in this format, at fs_hz (0 = not
 * known yet: assumes 100 Hz, resampled 2.5x): the body, the samples it can hold at the format's
 * fewest bytes per sample, and the pipeline's working memory per analysed sample.
 */
size_t svc_memory_estimate(enum ecg_format format, size_t body_bytes, double fs_hz);

/* The most samples an analysis may read so that its estimate fits the budget. */
size_t svc_memory_max_samples(const struct svc_memory *memory);

/*
 * Raises a request's reservation *held to at least want bytes (never lowers it). Returns false,
 * *held unchanged, when the budget cannot take the difference even after dropping idle buffers.
 */
bool svc_memory_reserve_up_to(struct svc_memory *memory, size_t *held, size_t want)
    __attribute__((warn_unused_result));

/*
 * Counts bytes already in use in the budget whether they fit or not (an analysis's computed
 * answer, which is never thrown away): *held rises to want. Requests after it find the budget
 * fuller, and are refused until it is given back.
 */
void svc_memory_count(struct svc_memory *memory, size_t *held, size_t want);

/* Gives back a reservation (0 is a no-op). */
void svc_memory_release(struct svc_memory *memory, size_t bytes);

#endif /* SVC_MEMORY_H */
