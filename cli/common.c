/*
 * common.c - helpers the subcommands share: option values and errors (getopt_long), and writing
 * an annotation file.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool cli_parse_rate(const char *text, double *fs_hz)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || end == text || *end || errno || !isfinite(v) || !(v > 0))
        return false;
    *fs_hz = v;
    return true;
}

void cli_bad_option(const char *prog, int c, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (c == ':')
        fprintf(stderr, "%s: %s needs a value\n", prog, arg);
    else
        fprintf(stderr, "%s: unknown option %s\n", prog, arg);
}

char **cli_split_equals(int argc, char **argv, int *out_argc)
{
    static char *out[512];
    static char names[256][64];
    int n = 0, n_names = 0;
    if (argc > 255)
        return NULL;
    for (int i = 0; i < argc; i++) {
        const char *eq = strncmp(argv[i], "--", 2) == 0 ? strchr(argv[i], '=') : NULL;
        if (!eq) {
            out[n++] = argv[i];
            continue;
        }
        size_t len = (size_t)(eq - argv[i]);
        if (len >= sizeof names[0])
            return NULL;
        memcpy(names[n_names], argv[i], len);
        names[n_names][len] = '\0';
        out[n++] = names[n_names++];
        out[n++] = (char *)eq + 1;
    }
    out[n] = NULL;
    *out_argc = n;
    return out;
}

int cli_write_annotations(const struct ecg_result *result, const char *path)
{
    struct ecg_buf atr = {0};
    int rc = 1;
    ecg_result_write_wfdb_annotations(result, &atr);
    FILE *f = atr.failed ? NULL : fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "ecgd: %s: %s\n", path, atr.failed ? "out of memory" : strerror(errno));
        goto out;
    }
    bool written = fwrite(atr.data, 1, atr.len, f) == atr.len;
    if (fclose(f) != 0 || !written) {
        fprintf(stderr, "ecgd: %s: write failed\n", path);
        goto out;
    }
    rc = 0;
out:
    ecg_buf_fini(&atr);
    return rc;
}
