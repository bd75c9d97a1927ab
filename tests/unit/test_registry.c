/*
 * test_registry.c - the model registry's engines (service/registry.h) as the HTTP threads see
 * them: an engine that exists is handed over at once, even while another model's engine is
 * starting (which holds the registry's engine lock for seconds), so that a short analysis is
 * never sent to a worker for that reason alone.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../../service/registry.h"
#include "../../service/server.h"

static int setup(void **state)
{
    char *args[] = {"serve", "--model", "none", NULL};
    int exit_code = 0;
    struct svc_server *srv = svc_server_create(3, args, &exit_code);
    struct ecg_error err = {0};
    if (!srv || svc_registry_load(&srv->registry, &err) != ECG_OK)
        return -1;
    *state = srv;
    return 0;
}

static int teardown(void **state)
{
    svc_server_destroy(*state);
    return 0;
}

/* The default engine is made at load; asked for while the engine lock is held elsewhere (as
 * during another model's engine start), it comes back at once, the same one the workers get. */
static void test_engine_while_another_starts(void **state)
{
    struct svc_server *srv = *state;
    struct ecg_error err = {0};
    struct svc_model *def = svc_registry_acquire(&srv->registry, NULL);
    assert_non_null(def);
    struct ecg_engine *engine = svc_registry_engine(&srv->registry, def, &err);
    assert_non_null(engine);

    assert_int_equal(pthread_mutex_lock(&srv->registry.engine_mutex), 0);
    assert_ptr_equal(svc_registry_engine_if_created(&srv->registry, def), engine);
    assert_ptr_equal(svc_registry_engine(&srv->registry, def, &err), engine);
    assert_int_equal(pthread_mutex_unlock(&srv->registry.engine_mutex), 0);

    assert_null(svc_registry_engine_if_created(&srv->registry, NULL));
    svc_model_release(def);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_engine_while_another_starts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
