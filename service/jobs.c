/*
 * jobs.c - the worker pool.
 */
#include <stdlib.h>
#include <string.h>

#include "jobs.h"

static void *worker_main(void *arg)
{
    struct svc_jobs *jobs = arg;
    pthread_mutex_lock(&jobs->mutex);
    for (;;) {
        while (!jobs->head && !jobs->stopping)
            pthread_cond_wait(&jobs->wake, &jobs->mutex);
        struct svc_job *job = jobs->head;
        if (!job)
            break; /* stopping and nothing left */
        jobs->head = job->next;
        if (!jobs->head)
            jobs->tail = NULL;
        bool cancelled = jobs->cancel_queued;
        atomic_fetch_sub(&jobs->queued, 1);
        atomic_fetch_add(&jobs->running, 1);
        pthread_mutex_unlock(&jobs->mutex);
        job->next = NULL;
        job->run(job, cancelled);
        atomic_fetch_sub(&jobs->running, 1);
        pthread_mutex_lock(&jobs->mutex);
    }
    pthread_mutex_unlock(&jobs->mutex);
    return NULL;
}

enum ecg_status svc_jobs_start(struct svc_jobs *jobs, unsigned n, struct ecg_error *err)
{
    memset(jobs, 0, sizeof *jobs);
    pthread_mutex_init(&jobs->mutex, NULL);
    pthread_cond_init(&jobs->wake, NULL);
    atomic_init(&jobs->queued, 0);
    atomic_init(&jobs->running, 0);
    jobs->threads = calloc(n ? n : 1, sizeof *jobs->threads);
    if (!jobs->threads)
        return ecg_fail(err, ECG_ERR_NOMEM, "out_of_memory", "worker pool of %u threads", n);
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&jobs->threads[i], NULL, worker_main, jobs);
        if (rc) {
            svc_jobs_stop(jobs, false);
            return ecg_fail(err, ECG_ERR_INTERNAL, "thread_create",
                            "starting analysis worker %u of %u: %s", i + 1, n, strerror(rc));
        }
        /* named, so that top -H and bench_strips.sh tell the pools apart */
        (void)pthread_setname_np(jobs->threads[i], "ecgd-worker");
        jobs->n_threads++;
    }
    return ECG_OK;
}

bool svc_jobs_submit(struct svc_jobs *jobs, struct svc_job *job)
{
    pthread_mutex_lock(&jobs->mutex);
    bool accepted = !jobs->stopping;
    if (accepted) {
        job->next = NULL;
        if (jobs->tail)
            jobs->tail->next = job;
        else
            jobs->head = job;
        jobs->tail = job;
        atomic_fetch_add(&jobs->queued, 1);
        pthread_cond_signal(&jobs->wake);
    }
    pthread_mutex_unlock(&jobs->mutex);
    return accepted;
}

void svc_jobs_stop(struct svc_jobs *jobs, bool cancel)
{
    if (!jobs->threads)
        return;
    pthread_mutex_lock(&jobs->mutex);
    jobs->stopping = true;
    jobs->cancel_queued = cancel;
    pthread_cond_broadcast(&jobs->wake);
    pthread_mutex_unlock(&jobs->mutex);
    for (unsigned i = 0; i < jobs->n_threads; i++)
        pthread_join(jobs->threads[i], NULL);
    free(jobs->threads);
    jobs->threads = NULL;
    jobs->n_threads = 0;
    pthread_cond_destroy(&jobs->wake);
    pthread_mutex_destroy(&jobs->mutex);
}
