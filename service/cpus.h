/*
 * cpus.h - how many CPUs this process may really use: its CPU affinity (sched_getaffinity:
 * taskset, cpusets, Kubernetes' static CPU manager) and its cgroup v2 CPU quota (cpu.max:
 * Kubernetes CPU limits, docker --cpus), not the host's CPU count. The default worker count.
 *
 * Threading: plain functions; read files, keep no state.
 */
#ifndef SVC_CPUS_H
#define SVC_CPUS_H

#include <stddef.h>

/*
 * The CPUs available: the affinity mask's count, capped by the quota of cpu.max (rounded up)
 * of this process's cgroup and of each of its ancestors. The cgroup v2 hierarchy is read under
 * cgroup_root (NULL: $ECGD_CGROUP_ROOT, else /sys/fs/cgroup, else /sys/fs/cgroup/unified);
 * missing files mean no quota. At least 1. why (if not NULL) gets a short explanation such as
 * "affinity 16 CPUs, cgroup cpu.max 200000/100000 -> 2".
 */
unsigned svc_cpus_available(const char *cgroup_root, char *why, size_t why_size);

#endif /* SVC_CPUS_H */
