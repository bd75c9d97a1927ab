/*
 * web.c - the dashboard page at / and its files under /ui/, embedded in the binary.
 *
 * The page's own files (web/) and the plotting library it draws with (uPlot, installed from
 * npm by `npm ci` into node_modules/, never copied into the repository) are copied into .rodata
 * at build time (.incbin, paths relative to the repository root where make runs), so the binary
 * and the container image serve the page with no further step and no internet access. The
 * Makefile lists every file as a prerequisite of this object. The bundled example recording is
 * the repository's test excerpt of MIT-BIH record 100.
 *
 * Threading: the table is immutable.
 */
#include <string.h>

#include "server.h"

#define EMBED(sym, path)                                                                       \
    __asm__(".section .rodata\n"                                                               \
            ".balign 16\n"                                                                     \
            ".type " #sym "_begin, @object\n" #sym "_begin:\n"                                 \
            ".incbin \"" path "\"\n" #sym "_end:\n"                                            \
            ".byte 0\n"                                                                        \
            ".previous\n");                                                                    \
    extern const char sym##_begin[];                                                           \
    extern const char sym##_end[]

EMBED(web_index, "web/index.html");
EMBED(web_app_js, "web/app.js");
EMBED(web_app_css, "web/app.css");
EMBED(web_uplot_js, "node_modules/uplot/dist/uPlot.iife.min.js");
EMBED(web_uplot_css, "node_modules/uplot/dist/uPlot.min.css");
EMBED(web_example, "tests/data/mitdb_100s.csv");

struct web_file {
    const char *name;        /* under /ui/; "" = the page itself at / */
    const char *type;
    const char *begin, *end;
    const char *cache;       /* Cache-Control */
};

static const struct web_file web_files[] = {
    {"", "text/html; charset=utf-8", web_index_begin, web_index_end, "no-cache"},
    {"app.js", "text/javascript; charset=utf-8", web_app_js_begin, web_app_js_end, "no-cache"},
    {"app.css", "text/css; charset=utf-8", web_app_css_begin, web_app_css_end, "no-cache"},
    {"uPlot.iife.min.js", "text/javascript; charset=utf-8", web_uplot_js_begin,
     web_uplot_js_end, "max-age=86400"},
    {"uPlot.min.css", "text/css; charset=utf-8", web_uplot_css_begin, web_uplot_css_end,
     "max-age=86400"},
    {"example-mitdb-100.csv", "text/csv", web_example_begin, web_example_end, "max-age=86400"},
};

void svc_web_get(struct svc_request *req)
{
    const char *name = req->route == SVC_ROUTE_PAGE ? "" : req->model_name;
    for (size_t i = 0; i < sizeof web_files / sizeof web_files[0]; i++) {
        const struct web_file *f = &web_files[i];
        if (strcmp(f->name, name))
            continue;
        struct ecg_buf body = {0};
        ecg_buf_append(&body, f->begin, (size_t)(f->end - f->begin));
        if (body.failed) {
            ecg_buf_fini(&body);
            svc_answer_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                             "no memory for %s", f->name);
            return;
        }
        svc_answer_body(req, MHD_HTTP_OK, &body, f->type);
        req->cache_control = f->cache;
        return;
    }
    svc_answer_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no file /ui/%s", name);
}
