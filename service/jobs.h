/*
 * jobs.h - the analysis worker pool: a FIFO of jobs and a fixed set of threads that run them.
 *
 * libmicrohttpd's threads only move bytes; anything slow (parsing a body, running the engine,
 * decoding latents, rendering a big JSON answer) runs here, while the HTTP connection is
 * suspended. The pool never refuses work by itself: admission control (workers + queue depth)
 * happens before a request's body is read (server.c).
 *
 * Threading: submit may be called from any thread. A job is owned by its submitter; the pool
 * only links it into the queue and calls job->run exactly once, from one worker thread.
 */
#ifndef SVC_JOBS_H
#define SVC_JOBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "ecg.h"

struct svc_job {
    struct svc_job *next;
    /* Runs the job; cancelled is true when the pool is stopping and the job never ran. */
    void (*run)(struct svc_job *job, bool cancelled);
};

struct svc_jobs {
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    struct svc_job *head, *tail;
    bool stopping;
    bool cancel_queued;
    atomic_long queued;
    atomic_long running;
    pthread_t *threads;
    unsigned n_threads;
};

/* Starts n worker threads. On failure nothing is left running. */
enum ecg_status svc_jobs_start(struct svc_jobs *jobs, unsigned n, struct ecg_error *err) ECG_WUR;

/* Queues a job; returns false (job untouched) when the pool is stopping. */
bool svc_jobs_submit(struct svc_jobs *jobs, struct svc_job *job);

/* Stops the pool: with cancel, queued jobs are run with cancelled = true; without, they all run
 * normally first. Waits for the threads. Safe to call on a pool that never started. */
void svc_jobs_stop(struct svc_jobs *jobs, bool cancel);

#endif /* SVC_JOBS_H */
