/*
 * test_body_pool.c - the service's request-body pool (service/body_pool.c): reuse, the choice of
 * buffer, the idle budget and slot count, rounding, the engine allocator, and many threads
 * getting and putting at once (every byte of every buffer written, so that ASan sees overruns).
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../service/body_pool.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static void test_reuse(void **state)
{
    (void)state;
    struct svc_body_pool pool;
    size_t cap = 0, cap2 = 0;
    svc_body_pool_init(&pool, 64 * MIB);
    char *a = svc_body_pool_get(&pool, 1000, 0, &cap);
    assert_non_null(a);
    assert_int_equal(cap, 64 * KIB); /* the smallest buffer handed out */
    memset(a, 0xab, cap);
    svc_body_pool_put(&pool, a, cap);
    assert_int_equal(svc_body_pool_idle_bytes(&pool), 64 * KIB);
    char *b = svc_body_pool_get(&pool, 2000, 0, &cap2);
    assert_ptr_equal(a, b);
    assert_int_equal(cap2, cap);
    assert_int_equal(svc_body_pool_idle_bytes(&pool), 0);
    assert_int_equal(atomic_load(&pool.reused), 1);
    assert_int_equal(atomic_load(&pool.allocated), 1);
    /* too big for the idle buffer: a fresh one */
    svc_body_pool_put(&pool, b, cap2);
    char *c = svc_body_pool_get(&pool, 100 * KIB, 0, &cap);
    assert_ptr_not_equal(c, b);
    assert_true(cap >= 100 * KIB);
    svc_body_pool_put(&pool, c, cap);
    svc_body_pool_put(&pool, NULL, 0); /* no-op */
    assert_int_equal(pool.n_idle, 2);
    svc_body_pool_fini(&pool);
}

static void test_rounding(void **state)
{
    (void)state;
    struct svc_body_pool pool;
    svc_body_pool_init(&pool, 0);
    static const size_t needs[] = {65537, 1000001, 3 * MIB + 1, 454 * MIB / 8, 8 * MIB};
    for (size_t i = 0; i < sizeof needs / sizeof needs[0]; i++) {
        size_t cap = 0;
        char *p = svc_body_pool_get(&pool, needs[i], 0, &cap);
        assert_non_null(p);
        assert_true(cap >= needs[i]);
        assert_true(cap <= needs[i] + needs[i] / 8); /* at most an eighth more */
        p[cap - 1] = 1;
        svc_body_pool_put(&pool, p, cap); /* budget 0: freed at once */
        assert_int_equal(pool.n_idle, 0);
    }
    svc_body_pool_fini(&pool);
}

/* Puts back buffers of the given sizes, fresh from the pool. */
static void fill(struct svc_body_pool *pool, const size_t *sizes, size_t n, char **ptrs,
                 size_t *caps)
{
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = svc_body_pool_get(pool, sizes[i], 0, &caps[i]);
        assert_non_null(ptrs[i]);
    }
    for (size_t i = 0; i < n; i++)
        svc_body_pool_put(pool, ptrs[i], caps[i]);
}

static void test_choice(void **state)
{
    (void)state;
    struct svc_body_pool pool;
    static const size_t sizes[] = {64 * KIB, 1 * MIB, 8 * MIB};
    char *ptrs[3];
    size_t caps[3], cap = 0;
    svc_body_pool_init(&pool, 64 * MIB);
    fill(&pool, sizes, 3, ptrs, caps);
    /* known length: the smallest that fits */
    char *p = svc_body_pool_get(&pool, 500 * KIB, 0, &cap);
    assert_ptr_equal(p, ptrs[1]);
    svc_body_pool_put(&pool, p, cap);
    /* unknown length: the largest within the preference */
    p = svc_body_pool_get(&pool, 64 * KIB, 16 * MIB, &cap);
    assert_ptr_equal(p, ptrs[2]);
    svc_body_pool_put(&pool, p, cap);
    p = svc_body_pool_get(&pool, 64 * KIB, 2 * MIB, &cap);
    assert_ptr_equal(p, ptrs[1]);
    svc_body_pool_put(&pool, p, cap);
    /* nothing within the preference: the smallest that fits */
    p = svc_body_pool_get(&pool, 2 * MIB, 4 * MIB, &cap);
    assert_ptr_equal(p, ptrs[2]);
    svc_body_pool_put(&pool, p, cap);
    assert_int_equal(atomic_load(&pool.reused), 4);
    svc_body_pool_fini(&pool);
}

static void test_budget_and_slots(void **state)
{
    (void)state;
    struct svc_body_pool pool;
    size_t caps[SVC_BODY_POOL_SLOTS + 2], cap = 0;
    char *ptrs[SVC_BODY_POOL_SLOTS + 2];
    size_t sizes[SVC_BODY_POOL_SLOTS + 2];

    /* over the budget by itself: freed, not kept */
    svc_body_pool_init(&pool, 2 * MIB);
    char *big = svc_body_pool_get(&pool, 4 * MIB, 0, &cap);
    assert_non_null(big);
    svc_body_pool_put(&pool, big, cap);
    assert_int_equal(svc_body_pool_idle_bytes(&pool), 0);
    /* the budget keeps the larger buffers: 64 KiB and 1 MiB idle, then another 1 MiB evicts
     * the 64 KiB one (2 MiB + 64 KiB would exceed the budget) */
    sizes[0] = 64 * KIB;
    sizes[1] = 1 * MIB;
    sizes[2] = 1 * MIB;
    fill(&pool, sizes, 3, ptrs, caps);
    assert_true(svc_body_pool_idle_bytes(&pool) <= 2 * MIB);
    assert_int_equal(pool.n_idle, 2);
    for (unsigned i = 0; i < pool.n_idle; i++)
        assert_int_equal(pool.idle[i].cap, 1 * MIB);
    svc_body_pool_fini(&pool);

    /* at most SVC_BODY_POOL_SLOTS idle buffers, the smallest dropped first */
    svc_body_pool_init(&pool, 1024 * MIB);
    for (size_t i = 0; i < SVC_BODY_POOL_SLOTS + 2; i++)
        sizes[i] = (i + 1) * MIB;
    fill(&pool, sizes, SVC_BODY_POOL_SLOTS + 2, ptrs, caps);
    assert_int_equal(pool.n_idle, SVC_BODY_POOL_SLOTS);
    for (unsigned i = 0; i < pool.n_idle; i++)
        assert_true(pool.idle[i].cap >= 3 * MIB);
    /* a newcomer smaller than every idle buffer is freed (without an engine, the pool frees
     * with free()) */
    char *small = svc_body_pool_get(&pool, 1000, 0, &cap);
    assert_int_equal(cap, 3 * MIB); /* served by the smallest idle buffer */
    svc_body_pool_put(&pool, small, cap);
    assert_int_equal(pool.n_idle, SVC_BODY_POOL_SLOTS);
    char *fresh = malloc(100 * KIB);
    assert_non_null(fresh);
    svc_body_pool_put(&pool, fresh, 100 * KIB);
    assert_int_equal(pool.n_idle, SVC_BODY_POOL_SLOTS);
    for (unsigned i = 0; i < pool.n_idle; i++)
        assert_ptr_not_equal(pool.idle[i].ptr, fresh);
    svc_body_pool_fini(&pool);
}

static void test_engine_allocator(void **state)
{
    (void)state;
    struct ecg_engine_config config = {.backend = ECG_BACKEND_CPU};
    struct ecg_error err = {0};
    struct ecg_engine *engine = ecg_engine_create(&config, &err);
    assert_non_null(engine);
    struct svc_body_pool pool;
    size_t cap = 0;
    svc_body_pool_init(&pool, 16 * MIB);
    char *before = svc_body_pool_get(&pool, 1000, 0, &cap);
    svc_body_pool_put(&pool, before, cap);
    assert_int_equal(pool.n_idle, 1);
    svc_body_pool_set_engine(&pool, engine); /* drops the malloc'd idle buffer */
    assert_int_equal(pool.n_idle, 0);
    char *p = svc_body_pool_get(&pool, 3 * MIB, 0, &cap);
    assert_non_null(p);
    memset(p, 1, cap);
    svc_body_pool_put(&pool, p, cap);
    assert_int_equal(svc_body_pool_idle_bytes(&pool), cap);
    svc_body_pool_fini(&pool); /* freed through the engine, before it goes */
    ecg_engine_destroy(engine);
}

struct worker_arg {
    struct svc_body_pool *pool;
    unsigned seed;
    int failures;
};

static void *worker(void *p)
{
    struct worker_arg *arg = p;
    for (int i = 0; i < 2000; i++) {
        size_t need = 1 + (size_t)rand_r(&arg->seed) % (3 * MIB);
        size_t prefer = rand_r(&arg->seed) % 2 ? 4 * MIB : 0;
        size_t cap = 0;
        char *buf = svc_body_pool_get(arg->pool, need, prefer, &cap);
        if (!buf || cap < need) {
            arg->failures++;
            continue;
        }
        /* mark the ends: another thread holding the same buffer would overwrite them */
        unsigned char tag = (unsigned char)(arg->seed | 1);
        buf[0] = (char)tag;
        buf[need - 1] = (char)tag;
        buf[cap - 1] = (char)tag;
        sched_yield();
        if ((unsigned char)buf[0] != tag || (unsigned char)buf[need - 1] != tag)
            arg->failures++;
        svc_body_pool_put(arg->pool, buf, cap);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    struct svc_body_pool pool;
    pthread_t threads[6];
    struct worker_arg args[6];
    svc_body_pool_init(&pool, 12 * MIB);
    for (unsigned i = 0; i < 6; i++) {
        args[i] = (struct worker_arg){.pool = &pool, .seed = 17 + i * 7919, .failures = 0};
        assert_int_equal(pthread_create(&threads[i], NULL, worker, &args[i]), 0);
    }
    for (unsigned i = 0; i < 6; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    assert_true(svc_body_pool_idle_bytes(&pool) <= 12 * MIB);
    assert_true(pool.n_idle <= SVC_BODY_POOL_SLOTS);
    assert_int_equal(atomic_load(&pool.reused) + atomic_load(&pool.allocated), 6 * 2000);
    assert_true(atomic_load(&pool.reused) > 6000); /* most gets are served by the pool */
    svc_body_pool_fini(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_budget_and_slots),
        cmocka_unit_test(test_engine_allocator),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
