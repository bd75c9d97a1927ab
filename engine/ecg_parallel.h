/*
 * ecg_parallel.h - OpenMP where it pays, and nowhere else.
 *
 * A region written `#pragma omp parallel ... if (cond)` still enters libgomp when cond is
 * false: it allocates a team of one, runs the body through the outlined function and ends
 * with a futex wake, a system call, on every call. The host steps that run once per request
 * (the quality verdict, the NN selection, the CPU filter's tiles) are parallel only for long
 * recordings; a short strip, most of the requests a monitoring fleet sends, took that detour
 * several times per request on its HTTP thread (perf, bench/RESULTS.md, issue 13, session 16).
 * Those steps therefore test the condition in C and run a plain loop below it, the same
 * operations in the same order; the pragma stays on the long branch only.
 */
#ifndef ECG_PARALLEL_H
#define ECG_PARALLEL_H

#ifdef _OPENMP
#include <omp.h>
#endif

/* This thread's number in the OpenMP team running it (0 outside any region). */
static inline int ecg_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#endif /* ECG_PARALLEL_H */
