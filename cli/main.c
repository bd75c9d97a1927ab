/*
 * main.c - the `ecgd` program: dispatches to a subcommand.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ecg.h"
#include "../service/service.h"

static void usage(FILE *out)
{
    fprintf(out,
            "ecgd %s - ECG analysis: R peaks, beats, latent coordinates and outlier scores\n"
            "\n"
            "usage:\n"
            "  ecgd serve [options]                 run the HTTP service (ecgd serve --help)\n"
            "  ecgd analyze FILE [options]          analyse a recording, print JSON\n"
            "  ecgd eval [--json] DIR [RECORD...]   score the detector (and model) on WFDB records\n"
            "  ecgd train [options]                 train a model (ecgd train --help)\n"
            "  ecgd version\n",
            ECG_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0)
        return ecg_service_main(argc - 1, argv + 1);
    if (strcmp(cmd, "analyze") == 0)
        return cli_analyze(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0)
        return cli_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0)
        return cli_train(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("ecgd %s\n", ECG_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "ecgd: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
