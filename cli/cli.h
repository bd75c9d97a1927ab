/*
 * cli.h - the subcommands of the `ecgd` command line.
 *
 * Each takes the argument vector that follows the subcommand name (argv[0] is the subcommand) and
 * returns the process exit status: 0 on success, 1 on a failure to do the work, 2 on bad usage.
 * Results go to stdout, errors and progress to stderr.
 */
#ifndef ECG_CLI_H
#define ECG_CLI_H

/* ecgd analyze FILE [--format F] [--fs HZ] [--lead N|NAME] [--model PATH|none] [--backend B] */
int cli_analyze(int argc, char **argv);
/* ecgd eval [--json] [--model PATH|none] DIR [RECORD...] */
int cli_eval(int argc, char **argv);
/* ecgd train ... (models/README.md) */
int cli_train(int argc, char **argv);

/* Default model path: $ECGD_MODEL_DIR/default.ecgm or models/default.ecgm. */
const char *cli_default_model_path(void);

#endif /* ECG_CLI_H */
