/*
 * cpus.c - CPUs from the affinity mask and the cgroup v2 quota.
 */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpus.h"

/* CPUs in this process's affinity mask (the online count if it cannot be read). */
static unsigned affinity_cpus(void)
{
    long online = sysconf(_SC_NPROCESSORS_CONF);
    size_t n = online > 0 ? (size_t)online : 1;
    if (n < 1024)
        n = 1024;
    cpu_set_t *set = CPU_ALLOC(n);
    unsigned count = 0;
    if (set) {
        size_t size = CPU_ALLOC_SIZE(n);
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0)
            count = (unsigned)CPU_COUNT_S(size, set);
        CPU_FREE(set);
    }
    if (!count)
        count = online > 0 ? (unsigned)online : 1;
    return count;
}

/* Reads "QUOTA PERIOD" or "max PERIOD" from dir/cpu.max; true with a quota. */
static bool read_cpu_max(const char *dir, long long *quota, long long *period)
{
    char path[4300], text[128];
    snprintf(path, sizeof path, "%s/cpu.max", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool got = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!got)
        return false;
    long long q = 0, p = 0;
    if (sscanf(text, "%lld %lld", &q, &p) != 2 || q <= 0 || p <= 0)
        return false; /* "max ...": no quota */
    *quota = q;
    *period = p;
    return true;
}

/* This process's cgroup v2 path ("/kubepods/pod.../ctr"), from /proc/self/cgroup's "0::" line. */
static bool own_cgroup(char *path, size_t size)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096];
    bool found = false;
    if (!f)
        return false;
    while (!found && fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(path, size, "%.*s", (int)(size - 1), line + 3);
            found = true;
        }
    fclose(f);
    return found;
}

static const char *default_root(void)
{
    const char *env = getenv("ECGD_CGROUP_ROOT");
    struct stat st;
    if (env && *env)
        return env;
    if (stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0)
        return "/sys/fs/cgroup";
    return "/sys/fs/cgroup/unified"; /* hybrid hierarchy */
}

unsigned svc_cpus_available(const char *cgroup_root, char *why, size_t why_size)
{
    const char *root = cgroup_root ? cgroup_root : default_root();
    unsigned cpus = affinity_cpus(), affinity = cpus;
    char cgroup[2048] = "", dir[4096];
    long long best_quota = 0, best_period = 0;
    if (!own_cgroup(cgroup, sizeof cgroup))
        cgroup[0] = '\0';
    /* The process's cgroup and each ancestor up to the root: the tightest quota wins. */
    for (;;) {
        long long quota, period;
        snprintf(dir, sizeof dir, "%s%s", root, cgroup);
        if (read_cpu_max(dir, &quota, &period)) {
            unsigned limit = (unsigned)((quota + period - 1) / period);
            if (limit < 1)
                limit = 1;
            if (limit < cpus || !best_quota) {
                if (limit < cpus)
                    cpus = limit;
                best_quota = quota;
                best_period = period;
            }
        }
        char *slash = strrchr(cgroup, '/');
        if (!slash || !cgroup[0])
            break;
        *slash = '\0'; /* the parent; "" is the root itself */
    }
    if (why && why_size) {
        if (best_quota)
            snprintf(why, why_size, "affinity %u CPUs, cgroup cpu.max %lld/%lld -> %u", affinity,
                     best_quota, best_period, cpus);
        else
            snprintf(why, why_size, "affinity %u CPUs, no cgroup CPU quota", affinity);
    }
    return cpus ? cpus : 1;
}
