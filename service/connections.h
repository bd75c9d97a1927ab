/*
 * connections.h - the HTTP listeners and every connection on them: libmicrohttpd's callbacks,
 * deadlines for slow clients, and the socket-level answers libmicrohttpd 0.9.75 cannot give.
 *
 * Two listeners share one access handler: the main one (--port) answers every route; the admin
 * one (--admin-port, optional) answers only /healthz, /readyz, /v2/health/... and /metrics, with a
 * small connection budget of its own, so probes are answered however many connections clients
 * hold on the main port. Each client address may hold at most --max-conns-per-ip connections on
 * the main port.
 *
 * Every connection is tracked (struct svc_conn) from accept to close. A reaper thread looks at
 * them ten times a second and cuts, with a 408 written on the socket:
 *   - a request line and headers not complete within --header-timeout-s (counted from accept, or
 *     from the previous answer on a kept-alive connection);
 *   - a body arriving slower on average than --min-upload-kib-s, after --header-timeout-s of
 *     grace;
 * and closes at once (no answer: nobody reads it) a connection whose client shut its side down
 * (FIN) with its body incomplete and nothing left unread: libmicrohttpd 0.9.75 only sees that
 * FIN when it next reads, and it stops reading a connection whose body stalls (see
 * docs/SERVICE.md). When the drain is over at shutdown, bodies still arriving get a 503.
 * Cutting is shutdown(2) on the socket: libmicrohttpd then sees the end of the stream and
 * closes the connection itself, so the socket is never closed under it.
 *
 * Threading: the reaper holds the list's mutex while it looks; libmicrohttpd's notification of
 * a closed connection takes the same mutex before the socket is closed, so a socket the reaper
 * touches is never one that was closed (and its number reused). Phase and progress fields are
 * atomics written by the connection's HTTP thread.
 */
#ifndef SVC_CONNECTIONS_H
#define SVC_CONNECTIONS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ecg.h"

struct svc_server;
struct svc_conn;

enum svc_conn_phase {
    SVC_CONN_HEADERS = 0, /* waiting for a request line and headers */
    SVC_CONN_BODY,        /* receiving a request body */
    SVC_CONN_BUSY,        /* working: never cut */
    SVC_CONN_SENDING,     /* an answer queued: cut when the client reads it too slowly */
};

struct svc_conns {
    pthread_mutex_t mutex;
    struct svc_conn *head;
    long count;
    pthread_t reaper;
    bool reaper_started;
    atomic_bool stop;
    atomic_bool closing;        /* drain over: bodies still arriving get 503 */
    double header_timeout_s;
    double min_upload_bytes_s;  /* 0 = no minimum */
    double min_download_bytes_s; /* 0 = no minimum */
    struct svc_server *srv;
};

/* Starts the listeners (main, and admin when configured) and the reaper. On failure nothing is
 * left running. */
enum ecg_status svc_listeners_start(struct svc_server *srv, struct ecg_error *err) ECG_WUR;

/* The port the main (admin = false) or admin listener is bound to, 0 when there is none. */
unsigned svc_listener_port(const struct svc_server *srv, bool admin);

/* Stops accepting on the main port (the admin port keeps answering probes during the drain). */
void svc_listeners_quiesce(struct svc_server *srv);

/* From now on bodies still arriving are answered 503 (drain over). */
void svc_listeners_closing(struct svc_server *srv);

/* Stops the listeners (closing every connection) and the reaper. Safe when never started. */
void svc_listeners_stop(struct svc_server *srv);

/*
 * The slow-download rule for an answer being sent, timed for elapsed_s since the timing (re)began,
 * in which the client acknowledged acked_since bytes; waiting: the bytes the socket holds for it
 * now (svc_socket_bytes_waiting). RESTART when nothing waits (the client has all the server
 * wrote: any wait is the server's), CUT past grace_s at an average under min_bytes_s, else KEEP.
 */
enum svc_download_verdict { SVC_DOWNLOAD_KEEP, SVC_DOWNLOAD_RESTART, SVC_DOWNLOAD_CUT };
enum svc_download_verdict svc_download_verdict(double elapsed_s, uint64_t acked_since,
                                               uint64_t waiting, double grace_s,
                                               double min_bytes_s);

/* The bytes the socket fd holds for its peer: written, not yet acknowledged (SIOCOUTQ); false
 * where the kernel does not say. */
bool svc_socket_bytes_waiting(int fd, uint64_t *waiting);

/* Connections open on the listeners now. */
long svc_connections_count(struct svc_server *srv);

/* Marks a connection's phase (NULL is a no-op); entering a phase restarts its clock. */
void svc_conn_set_phase(struct svc_conn *conn, enum svc_conn_phase phase);

/* Records the body bytes received so far on the connection. */
void svc_conn_progress(struct svc_conn *conn, uint64_t body_bytes);

/* Claims the right to write an answer on the socket directly; false when the reaper or an
 * earlier answer claimed it (NULL claims). */
bool svc_conn_claim_socket(struct svc_conn *conn);

/* Writes a JSON error answer with Connection: close on a socket, then shuts down its sending
 * side. Returns the bytes of the body sent, or -1 when the socket took nothing. */
long svc_socket_write_error(int fd, unsigned status, const char *code, const char *message,
                            const char *request_id);

#endif /* SVC_CONNECTIONS_H */
