/*
 * openapi.c - the OpenAPI 3.1 document of the service, embedded in the binary.
 *
 * service/openapi.json is the source; the assembler copies its bytes into .rodata at build time
 * (.incbin, path relative to the repository root where make runs), followed by a NUL. The
 * Makefile lists the JSON file as a prerequisite of this object, so editing it rebuilds the
 * binary. tests/e2e/test_http.sh checks that the document and the route table agree.
 */
#include <stddef.h>

#include "server.h"

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".type svc_openapi_begin, @object\n"
        "svc_openapi_begin:\n"
        ".incbin \"service/openapi.json\"\n"
        "svc_openapi_end:\n"
        ".byte 0\n"
        ".previous\n");

extern const char svc_openapi_begin[];
extern const char svc_openapi_end[];

const char *svc_openapi_json(size_t *len)
{
    *len = (size_t)(svc_openapi_end - svc_openapi_begin);
    return svc_openapi_begin;
}
