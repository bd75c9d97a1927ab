/*
 * metrics_process.c - the process_* metrics every Prometheus client library exports, read from
 * the kernel at render time: CPU seconds (getrusage), resident and virtual memory
 * (/proc/self/statm), open file descriptors (/proc/self/fd) and their limit (RLIMIT_NOFILE),
 * start time (recorded when the metrics were initialised, at process start).
 */
#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics.h"

/* Entries of /proc/self/fd, less the directory stream's own descriptor; -1 if unreadable. */
static long open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    long n = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL)
        if (ent->d_name[0] != '.')
            n++;
    closedir(dir);
    return n > 0 ? n - 1 : 0;
}

void svc_metrics_render_process(double start_time_s, struct ecg_buf *out)
{
    struct rusage usage;
    double cpu_s = 0;
    if (getrusage(RUSAGE_SELF, &usage) == 0)
        cpu_s = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec * 1e-6 +
                (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec * 1e-6;
    unsigned long long pages_virtual = 0, pages_resident = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    if (statm) {
        if (fscanf(statm, "%llu %llu", &pages_virtual, &pages_resident) != 2)
            pages_virtual = pages_resident = 0;
        fclose(statm);
    }
    long page = sysconf(_SC_PAGESIZE);
    struct rlimit files;
    double max_fds = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                         ? (double)files.rlim_cur
                         : -1;
    ecg_buf_printf(out,
                   "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                   "seconds.\n"
                   "# TYPE process_cpu_seconds_total counter\n"
                   "process_cpu_seconds_total %.6f\n"
                   "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                   "# TYPE process_resident_memory_bytes gauge\n"
                   "process_resident_memory_bytes %llu\n"
                   "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
                   "# TYPE process_virtual_memory_bytes gauge\n"
                   "process_virtual_memory_bytes %llu\n"
                   "# HELP process_open_fds Number of open file descriptors.\n"
                   "# TYPE process_open_fds gauge\n"
                   "process_open_fds %ld\n"
                   "# HELP process_max_fds Maximum number of open file descriptors.\n"
                   "# TYPE process_max_fds gauge\n"
                   "process_max_fds %.0f\n"
                   "# HELP process_start_time_seconds Start time of the process since unix "
                   "epoch in seconds.\n"
                   "# TYPE process_start_time_seconds gauge\n"
                   "process_start_time_seconds %.3f\n",
                   cpu_s, pages_resident * (unsigned long long)(page > 0 ? page : 4096),
                   pages_virtual * (unsigned long long)(page > 0 ? page : 4096), open_fds(),
                   max_fds, start_time_s);
}
