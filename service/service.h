/*
 * service.h - the HTTP service behind `ecgd serve`.
 *
 * The command line dispatches `ecgd serve [options]` here. The service answers analysis requests
 * over HTTP (libmicrohttpd, thread pool + epoll), loads its engine and models once at start and
 * reuses them, exposes health, readiness, metrics and an OpenAPI description, and shuts down
 * gracefully on SIGTERM or SIGINT. docs/SERVICE.md documents every route and option.
 *
 * Threading: ecg_service_main() must be called from the process's main thread, once. It blocks
 * SIGTERM/SIGINT in every thread it starts and waits for them itself.
 */
#ifndef ECG_SERVICE_H
#define ECG_SERVICE_H

/*
 * Runs the service until SIGTERM or SIGINT. argv[0] is the subcommand name ("serve"); options
 * follow (`--help` lists them; every option also has an ECGD_* environment variable, and an option
 * given on the command line wins over its variable). A leading "serve" in argv[1] is skipped, so
 * the caller may pass either its own argv shifted by one or the whole command line minus the
 * program name.
 * Returns the process exit status: 0 after a clean shutdown (also after --help), 2 for a bad
 * option, 1 when the service could not start (port in use, model missing or corrupt, no device).
 */
int ecg_service_main(int argc, char **argv);

#endif /* ECG_SERVICE_H */
