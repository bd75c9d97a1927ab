/*
 * cli.h - the subcommands of the `ecgd` command line.
 *
 * Each takes the argument vector that follows the subcommand name (argv[0] is the subcommand) and
 * returns the process exit status: 0 on success, 1 on a failure to do the work, 2 on bad usage.
 * Results go to stdout, errors and progress to stderr.
 */
#ifndef ECG_CLI_H
#define ECG_CLI_H

#include <stdbool.h>

#include "ecg.h"

/* ecgd analyze FILE [--format F] [--fs HZ] [--lead N|NAME] [--model PATH|none] [--backend B] */
int cli_analyze(int argc, char **argv);
/* ecgd eval [--json] [--model PATH|none] DIR [RECORD...] */
int cli_eval(int argc, char **argv);
/* ecgd train ... (models/README.md) */
int cli_train(int argc, char **argv);

/* Default model path: $ECGD_MODEL_DIR/default.ecgm or models/default.ecgm. */
const char *cli_default_model_path(void);

/* ---- common.c: what every subcommand's option parsing (getopt_long, ":" first) shares */

/* Parses a sampling rate: a finite decimal number above 0, nothing after it. */
bool cli_parse_rate(const char *text, double *fs_hz);

/* Reports getopt_long's answer c (':' a missing value, '?' an unknown option) for the option
 * just read (argv[optind - 1]) on stderr, prefixed with prog. */
void cli_bad_option(const char *prog, int c, char **argv);

/* The argument vector with each "--opt=value" split in two ("--opt" "value"), for the
 * subcommands that parse options by hand; *argc is updated. Static storage (one call per
 * process); NULL when there are more than 255 arguments or an option name is too long. */
char **cli_split_equals(int argc, char **argv, int *out_argc);

/* Writes result's beats as a WFDB annotation file at path (ecg_result_write_wfdb_annotations).
 * Returns 0, or 1 with the reason on stderr. */
int cli_write_annotations(const struct ecg_result *result, const char *path);

#endif /* ECG_CLI_H */
