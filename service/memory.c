/*
 * memory.c - the memory budget: where it comes from, what a request may cost, reservations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory.h"

/*
 * Working memory of the pipeline per analysed sample (at the analysis rate, 250 Hz), on top of
 * the body and the input samples. Measured with `ecgd analyze --backend cpu` (peak RSS, 2-core
 * dev box): 10 M float32 samples at 250 Hz 205 MB; 20 M int16 samples at 100 Hz (50 M analysed)
 * 777 MB, i.e. 13-16 bytes per analysed sample; 20 leaves a margin.
 */
#define SVC_WORK_BYTES_PER_SAMPLE 20u
#define SVC_ANALYSIS_FS_HZ 250.0
/* Rate assumed when the body carries it and it is not known yet (the lowest common rate). */
#define SVC_ASSUMED_FS_HZ 100.0

/* The cgroup v2 limit of this process, 0 when none ("max") or not readable. */
static size_t cgroup_memory_max(void)
{
    char line[64] = "";
    FILE *file = fopen("/sys/fs/cgroup/memory.max", "r");
    if (!file)
        return 0;
    bool got = fgets(line, sizeof line, file) != NULL;
    fclose(file);
    if (!got || !strncmp(line, "max", 3))
        return 0;
    char *end = NULL;
    unsigned long long bytes = strtoull(line, &end, 10);
    return end != line ? (size_t)bytes : 0;
}

void svc_memory_init(struct svc_memory *memory, size_t configured_bytes,
                     struct svc_body_pool *pool)
{
    memset(memory, 0, sizeof *memory);
    atomic_init(&memory->reserved_bytes, 0);
    atomic_init(&memory->refused, 0);
    memory->pool = pool;
    if (configured_bytes) {
        memory->budget_bytes = configured_bytes;
        memory->budget_source = "option";
        return;
    }
    size_t limit = cgroup_memory_max();
    memory->budget_source = "cgroup";
    if (!limit) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        limit = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)4 << 30;
        memory->budget_source = "ram";
    }
    memory->budget_bytes = limit / 4 * 3;
}

/* The fewest bytes one sample takes in a body of this format. */
static size_t min_bytes_per_sample(enum ecg_format format)
{
    switch (format) {
    case ECG_FORMAT_F32:
        return 4;
    case ECG_FORMAT_F64:
        return 8;
    case ECG_FORMAT_I16:
    case ECG_FORMAT_CSV:  /* "1\n" */
    case ECG_FORMAT_JSON: /* "1," */
    case ECG_FORMAT_EDF:
        return 2;
    default:
        return 1;         /* .npy of int8/uint8, or not known yet */
    }
}

size_t svc_memory_estimate(enum ecg_format format, size_t body_bytes, double fs_hz)
{
    double samples = (double)body_bytes / (double)min_bytes_per_sample(format);
    double rate = fs_hz > 0 ? fs_hz : SVC_ASSUMED_FS_HZ;
    double analysed = samples * SVC_ANALYSIS_FS_HZ / rate;
    double bytes = (double)body_bytes + samples * sizeof(float) +
                   analysed * SVC_WORK_BYTES_PER_SAMPLE;
    return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

size_t svc_memory_max_samples(const struct svc_memory *memory)
{
    /* An input sample costs its float, and at the lowest rate 2.5 analysed samples. */
    double per_sample = sizeof(float) + SVC_WORK_BYTES_PER_SAMPLE * SVC_ANALYSIS_FS_HZ /
                                            SVC_ASSUMED_FS_HZ;
    return (size_t)((double)memory->budget_bytes / per_sample);
}

static bool try_reserve(struct svc_memory *memory, size_t extra)
{
    size_t now = atomic_load(&memory->reserved_bytes);
    do {
        if (extra > memory->budget_bytes || now > memory->budget_bytes - extra)
            return false;
    } while (!atomic_compare_exchange_weak(&memory->reserved_bytes, &now, now + extra));
    return true;
}

bool svc_memory_reserve_up_to(struct svc_memory *memory, size_t *held, size_t want)
{
    if (want <= *held)
        return true;
    size_t extra = want - *held;
    size_t idle = memory->pool ? svc_body_pool_idle_bytes(memory->pool) : 0;
    /* Idle buffers are real memory: make room by dropping them before refusing. */
    if (idle && atomic_load(&memory->reserved_bytes) + extra + idle > memory->budget_bytes)
        svc_body_pool_trim(memory->pool);
    if (!try_reserve(memory, extra)) {
        atomic_fetch_add(&memory->refused, 1);
        return false;
    }
    *held = want;
    return true;
}

void svc_memory_count(struct svc_memory *memory, size_t *held, size_t want)
{
    if (want <= *held)
        return;
    atomic_fetch_add(&memory->reserved_bytes, want - *held);
    *held = want;
}

void svc_memory_release(struct svc_memory *memory, size_t bytes)
{
    if (bytes)
        atomic_fetch_sub(&memory->reserved_bytes, bytes);
}
