/*
 * connections.c - listeners, libmicrohttpd's callbacks, connection tracking and the reaper.
 * See connections.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "admission.h"
#include "connections.h"
#include "log.h"
#include "server.h"

/*
 * Per-connection memory of libmicrohttpd: half of it is the read buffer, which bounds the recv()
 * calls and the upload chunks we see; and libmicrohttpd zeroes the whole pool on every request
 * of a kept-alive connection. Measured (2-core dev box, 80 MB upload): 256 KiB gave ~1,600
 * chunks of ~75 KB, 1 MiB ~235 chunks of ~500 KB, with no difference in receive time (the socket
 * delivers less than the buffer holds), but 1 MiB halved GET /healthz throughput (63k/45k ->
 * 31k/30k req/s). 64 KiB (bench/RESULTS.md, issue 13): the 80 MB float32 upload and analysis
 * 0.59 s against 0.63 s at 256 KiB, and the HTTP threads' CPU per 10-s strip 37 us against 46
 * (the 256-KiB memset was 14 % of it). Streaming uploads to a GPU copy every CUDA_UPLOAD_STEP
 * bytes whatever the chunk size.
 */
#define SVC_CONNECTION_MEMORY (64u << 10)
#define SVC_CONNECTION_LIMIT 4096u
/* The admin listener: probes and scrapes only, a few at a time. */
#define SVC_ADMIN_CONNECTION_MEMORY (32u << 10)
#define SVC_ADMIN_CONNECTION_LIMIT 64u
#define SVC_ADMIN_CONNECTIONS_PER_IP 16u
#define SVC_ADMIN_TIMEOUT_S 10u
/* After a refusal written on the socket, bytes still read (and dropped) before closing. */
#define SVC_REFUSED_DRAIN_BYTES (64u << 20)
/* The reaper's period, and how many looks in a row a half-closed stalled upload must get. */
#define SVC_REAPER_PERIOD_NS (100 * 1000 * 1000)
#define SVC_PEER_CLOSED_LOOKS 3

struct svc_conn {
    struct svc_conn *prev, *next;
    int fd;
    atomic_int phase;             /* enum svc_conn_phase */
    _Atomic double phase_start_s; /* monotonic */
    atomic_uint_fast64_t body_bytes;
    atomic_bool claimed;          /* an answer was written on the socket directly; cut */
    atomic_bool served;           /* answered a request before: idle between requests */
    /* the reaper's own */
    uint64_t closed_bytes;
    unsigned closed_looks;
    uint64_t sending_mark;        /* phase_mark of the answer whose reading is timed; 0 = none */
    uint64_t sending_acked;       /* the socket's bytes acknowledged when timing began */
    double sending_start_s;
};

/* ------------------------------------------------------------------ socket answers */

static const char *reason_phrase(unsigned status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

long svc_socket_write_error(int fd, unsigned status, const char *code, const char *message,
                            const char *request_id)
{
    char body[384], head[512];
    int body_len = snprintf(body, sizeof body,
                            "{\"error\":{\"status\":%u,\"code\":\"%s\",\"message\":\"%s\"}}\n",
                            status, code, message);
    int head_len = snprintf(head, sizeof head,
                            "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
                            "Content-Length: %d\r\n%s%s%s%sConnection: close\r\n\r\n",
                            status, reason_phrase(status), body_len,
                            request_id ? "X-Request-Id: " : "", request_id ? request_id : "",
                            request_id ? "\r\n" : "", status == 503 ? "Retry-After: 1\r\n" : "");
    if (head_len <= 0 || body_len <= 0 || (size_t)head_len >= sizeof head ||
        (size_t)body_len >= sizeof body)
        return -1;
    ssize_t sent = send(fd, head, (size_t)head_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent == head_len)
        sent = send(fd, body, (size_t)body_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    return sent > 0 ? (long)body_len : -1;
}

bool svc_conn_claim_socket(struct svc_conn *conn)
{
    if (!conn)
        return true;
    bool expected = false;
    return atomic_compare_exchange_strong(&conn->claimed, &expected, true);
}

void svc_conn_set_phase(struct svc_conn *conn, enum svc_conn_phase phase)
{
    if (!conn)
        return;
    atomic_store(&conn->phase_start_s, svc_now_s());
    atomic_store(&conn->body_bytes, 0);
    atomic_store(&conn->phase, (int)phase);
}

void svc_conn_progress(struct svc_conn *conn, uint64_t body_bytes)
{
    if (conn)
        atomic_store(&conn->body_bytes, body_bytes);
}

/* ------------------------------------------------------------------ the reaper */

/* True when the client shut its sending side down and nothing it sent is left unread. */
static bool peer_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return false;
    int unread = 0;
    return ioctl(fd, FIONREAD, &unread) == 0 && unread == 0;
}

/* Writes an answer (status > 0) on the socket and shuts it down; libmicrohttpd closes it. */
static void conn_cut(struct svc_server *srv, struct svc_conn *conn, unsigned status,
                     const char *code, const char *message, enum svc_conn_event event)
{
    if (!svc_conn_claim_socket(conn))
        return;
    if (status)
        svc_socket_write_error(conn->fd, status, code, message, NULL);
    shutdown(conn->fd, SHUT_RDWR);
    svc_metrics_conn_event(&srv->metrics, event);
}

/* One more look at a connection whose client has closed its side; cut (no answer: nobody reads
 * it) after SVC_PEER_CLOSED_LOOKS looks in a row with the same progress mark. */
static void peer_closed_look(struct svc_server *srv, struct svc_conn *conn, uint64_t mark)
{
    if (conn->closed_looks && conn->closed_bytes == mark) {
        if (++conn->closed_looks >= SVC_PEER_CLOSED_LOOKS)
            conn_cut(srv, conn, 0, NULL, NULL, SVC_CONN_EVENT_CLIENT_GONE);
    } else {
        conn->closed_looks = 1;
        conn->closed_bytes = mark;
    }
}

/* A value that changes whenever the connection enters a phase (its start time's bits). */
static uint64_t phase_mark(struct svc_conn *conn)
{
    double start = atomic_load(&conn->phase_start_s);
    uint64_t mark;
    memcpy(&mark, &start, sizeof mark);
    return mark;
}

/* Bytes of this connection the client has acknowledged (TCP_INFO); false where the kernel does
 * not say (not TCP, or older than Linux 4.1). */
static bool bytes_acked(int fd, uint64_t *acked)
{
    struct tcp_info info;
    socklen_t len = sizeof info;
    memset(&info, 0, sizeof info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked)
        return false;
    *acked = info.tcpi_bytes_acked;
    return true;
}

/* Bytes of this connection the socket still holds for the client: written by the server, not
 * yet acknowledged (SIOCOUTQ); false where the kernel does not say. */
bool svc_socket_bytes_waiting(int fd, uint64_t *waiting)
{
    int v = 0;
    if (ioctl(fd, SIOCOUTQ, &v) != 0 || v < 0)
        return false;
    *waiting = (uint64_t)v;
    return true;
}

enum svc_download_verdict svc_download_verdict(double elapsed_s, uint64_t acked_since,
                                               uint64_t waiting, double grace_s,
                                               double min_bytes_s)
{
    if (waiting == 0)
        return SVC_DOWNLOAD_RESTART;
    if (elapsed_s > grace_s && (double)acked_since < min_bytes_s * elapsed_s)
        return SVC_DOWNLOAD_CUT;
    return SVC_DOWNLOAD_KEEP;
}

/*
 * An answer being sent: its buffer stays in memory (and in the budget, http.c) until the client
 * has read it, so a client reading a byte now and then would hold it forever; libmicrohttpd's
 * idle timeout sees such a trickle as activity. Timed from the reaper's first look at it, by the
 * bytes the client acknowledged; after --header-timeout-s of grace an average under
 * --min-download-kib-s cuts the connection (no answer can follow half an answer). An answer that
 * fits the socket's buffers ends its request at once and is never timed. Whenever the client has
 * acknowledged everything written so far, the timing starts again (svc_download_verdict): the
 * wait is then the server's (its HTTP thread starved of CPU), not the client's.
 */
static void sending_look(struct svc_conns *conns, struct svc_conn *conn, double now)
{
    uint64_t mark = phase_mark(conn), acked, waiting;
    if (conns->min_download_bytes_s <= 0 || !bytes_acked(conn->fd, &acked) ||
        !svc_socket_bytes_waiting(conn->fd, &waiting))
        return;
    if (conn->sending_mark != mark) {
        conn->sending_mark = mark;
        conn->sending_acked = acked;
        conn->sending_start_s = now;
        return;
    }
    switch (svc_download_verdict(now - conn->sending_start_s, acked - conn->sending_acked,
                                 waiting, conns->header_timeout_s,
                                 conns->min_download_bytes_s)) {
    case SVC_DOWNLOAD_RESTART:
        conn->sending_acked = acked;
        conn->sending_start_s = now;
        break;
    case SVC_DOWNLOAD_CUT: {
        /* Closed with a reset: what the kernel still holds of the answer is dropped at once,
         * rather than trickled out ahead of a FIN at the client's pace. */
        struct linger reset = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(conn->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        conn_cut(conns->srv, conn, 0, NULL, NULL, SVC_CONN_EVENT_SLOW_DOWNLOAD);
        break;
    }
    case SVC_DOWNLOAD_KEEP:
        break;
    }
}

static void reaper_look(struct svc_conns *conns, struct svc_conn *conn, double now)
{
    struct svc_server *srv = conns->srv;
    if (atomic_load(&conn->claimed))
        return;
    enum svc_conn_phase phase = (enum svc_conn_phase)atomic_load(&conn->phase);
    double elapsed = now - atomic_load(&conn->phase_start_s);
    if (phase == SVC_CONN_HEADERS) {
        if (atomic_load(&conns->closing))
            conn_cut(srv, conn, 0, NULL, NULL, SVC_CONN_EVENT_SHUTDOWN);
        else if (elapsed > conns->header_timeout_s && atomic_load(&conn->served))
            /* Idle after an answer (keep-alive): closed without a 408, which a client sending
             * its next request at that moment would take for the answer to it. */
            conn_cut(srv, conn, 0, NULL, NULL, SVC_CONN_EVENT_HEADER_TIMEOUT);
        else if (elapsed > conns->header_timeout_s)
            conn_cut(srv, conn, 408, "header_timeout",
                     "the request line and headers did not arrive in time",
                     SVC_CONN_EVENT_HEADER_TIMEOUT);
        else if (peer_closed(conn->fd))
            /* Between requests and the client is done: no request can come any more.
             * libmicrohttpd 0.9.75 misses this FIN after pipelined requests and would hold
             * the connection until the deadline. Looked at several times, so that requests it
             * still holds in its buffer (the phase then moves on) are answered first. */
            peer_closed_look(srv, conn, phase_mark(conn));
        else
            conn->closed_looks = 0;
        return;
    }
    if (phase == SVC_CONN_SENDING) {
        sending_look(conns, conn, now);
        return;
    }
    if (phase != SVC_CONN_BODY)
        return;
    uint64_t bytes = atomic_load(&conn->body_bytes);
    if (atomic_load(&conns->closing)) {
        conn_cut(srv, conn, 503, "shutting_down",
                 "the server is shutting down; retry on another instance",
                 SVC_CONN_EVENT_SHUTDOWN);
    } else if (conns->min_upload_bytes_s > 0 && elapsed > conns->header_timeout_s &&
               (double)bytes < conns->min_upload_bytes_s * elapsed) {
        conn_cut(srv, conn, 408, "upload_too_slow",
                 "the body arrives slower than the server's minimum upload rate",
                 SVC_CONN_EVENT_SLOW_UPLOAD);
    } else if (peer_closed(conn->fd)) {
        /* Nothing unread and the same count over several looks: libmicrohttpd holds no more of
         * this body either, and the client can send nothing more. */
        peer_closed_look(srv, conn, bytes);
    } else {
        conn->closed_looks = 0;
    }
}

static void *reaper_main(void *arg)
{
    struct svc_conns *conns = arg;
    while (!atomic_load(&conns->stop)) {
        struct timespec pause = {0, SVC_REAPER_PERIOD_NS};
        nanosleep(&pause, NULL);
        double now = svc_now_s();
        pthread_mutex_lock(&conns->mutex);
        for (struct svc_conn *conn = conns->head; conn; conn = conn->next)
            reaper_look(conns, conn, now);
        pthread_mutex_unlock(&conns->mutex);
    }
    return NULL;
}

/* ------------------------------------------------------------------ libmicrohttpd callbacks */

static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct svc_listener *listener = cls;
    struct svc_conns *conns = &listener->srv->conns;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct svc_conn *conn = info ? calloc(1, sizeof *conn) : NULL;
        *socket_context = conn;
        if (!conn)
            return; /* untracked: libmicrohttpd's idle timeout still applies */
        conn->fd = info->connect_fd;
        unsigned send_kib = listener->srv->cfg.send_buffer_kib;
        if (send_kib && !listener->admin) {
            int bytes = (int)(send_kib << 10);
            (void)setsockopt(conn->fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
        }
        atomic_init(&conn->phase, SVC_CONN_HEADERS);
        atomic_init(&conn->phase_start_s, svc_now_s());
        atomic_init(&conn->body_bytes, 0);
        atomic_init(&conn->claimed, false);
        atomic_init(&conn->served, false);
        pthread_mutex_lock(&conns->mutex);
        conn->next = conns->head;
        if (conns->head)
            conns->head->prev = conn;
        conns->head = conn;
        conns->count++;
        pthread_mutex_unlock(&conns->mutex);
        return;
    }
    struct svc_conn *conn = *socket_context;
    if (!conn)
        return;
    /* Called before libmicrohttpd closes the socket: once unlinked, the reaper cannot touch it. */
    pthread_mutex_lock(&conns->mutex);
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        conns->head = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    conns->count--;
    pthread_mutex_unlock(&conns->mutex);
    *socket_context = NULL;
    free(conn);
}

/* ------------------------------------------------------------------ the request's head */

struct field_fill {
    struct svc_field *fields;
    size_t n, cap;
};

static enum MHD_Result field_add(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    struct field_fill *fill = cls;
    (void)kind;
    if (fill->n == fill->cap)
        return MHD_NO; /* more than counted: cannot happen on one thread */
    fill->fields[fill->n].name = key ? key : "";
    fill->fields[fill->n].value = value;
    fill->n++;
    return MHD_YES;
}

/* The fields of one kind, in arrival order, into a new array (NULL when there are none). False
 * when out of memory. */
static bool fields_of(struct MHD_Connection *connection, enum MHD_ValueKind kind,
                      struct svc_field **fields, size_t *n)
{
    *fields = NULL;
    *n = 0;
    int count = MHD_get_connection_values(connection, kind, NULL, NULL);
    if (count <= 0)
        return true;
    struct field_fill fill = {calloc((size_t)count, sizeof *fill.fields), 0, (size_t)count};
    if (!fill.fields)
        return false;
    MHD_get_connection_values(connection, kind, field_add, &fill);
    *fields = fill.fields;
    *n = fill.n;
    return true;
}

/* The head of the request on connection, as libmicrohttpd parsed it (head.h). When the fields
 * cannot be stored the head says so (incomplete) and admission refuses the request. */
static void head_from_connection(struct MHD_Connection *connection, const char *url,
                                 const char *method, const char *version, struct svc_head *head)
{
    memset(head, 0, sizeof *head);
    head->method = method;
    head->url = url;
    head->version = version;
    if (!fields_of(connection, MHD_HEADER_KIND, &head->headers, &head->n_headers) ||
        !fields_of(connection, MHD_GET_ARGUMENT_KIND, &head->query, &head->n_query)) {
        svc_head_fini(head);
        head->method = method;
        head->url = url;
        head->version = version;
        head->incomplete = true;
    }
}

/* The request line is in: the request starts here, with the URI as the client sent it. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *connection)
{
    struct svc_listener *listener = cls;
    struct svc_request *req = svc_request_create(listener->srv, connection, listener->admin);
    if (req)
        svc_admission_check_uri(req, uri);
    return req;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct svc_listener *listener = cls;
    struct svc_request *req = *con_cls;
    if (!req) {
        req = svc_request_create(listener->srv, connection, listener->admin);
        if (!req)
            return MHD_NO; /* not even memory for the request: nothing better to do */
        *con_cls = req;
    }
    if (!req->started) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        req->tracked = info ? info->socket_context : NULL;
        struct svc_head head;
        head_from_connection(connection, url, method, version, &head);
        svc_request_headers(req, &head);
        enum MHD_Result result = svc_admission_headers(req);
        /* a body comes: admitted, or refused and read to its end (admission.c refuse) */
        bool receiving = req->phase == SVC_PHASE_RECEIVING && svc_request_has_body(req);
        if (req->phase != SVC_PHASE_ANSWERED) /* answered: svc_answer_send set SENDING */
            svc_conn_set_phase(req->tracked, receiving ? SVC_CONN_BODY : SVC_CONN_BUSY);
        return result;
    }
    if (req->phase == SVC_PHASE_ANSWERED) {
        if (req->refused_on_socket) {
            bool body_ended = *upload_data_size == 0;
            req->discarded += *upload_data_size;
            *upload_data_size = 0;
            return body_ended || req->discarded > SVC_REFUSED_DRAIN_BYTES ? MHD_NO : MHD_YES;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t size = *upload_data_size;
        *upload_data_size = 0;
        return svc_request_body(req, upload_data, size);
    }
    svc_conn_set_phase(req->tracked, SVC_CONN_BUSY);
    return svc_admission_complete(req);
}

static const char *termination_name(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: return "ok";
    case MHD_REQUEST_TERMINATED_WITH_ERROR: return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR: return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client_abort";
    }
    return "unknown";
}

/* Why a request ended without an answer. */
static enum svc_abort abort_reason(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return SVC_ABORT_CLIENT;
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return SVC_ABORT_TIMEOUT;
    case MHD_REQUEST_TERMINATED_READ_ERROR: return SVC_ABORT_READ_ERROR;
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return SVC_ABORT_SHUTDOWN;
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
    case MHD_REQUEST_TERMINATED_WITH_ERROR: break;
    }
    return SVC_ABORT_ERROR;
}

/* The access log's outcome: what the client got (ok, client_error, server_error), or why it
 * got nothing (client_abort, timeout...), or answer_cut when the answer was cut while sent. */
static const char *outcome_name(unsigned status, enum MHD_RequestTerminationCode toe,
                                bool sent_on_socket)
{
    if (!status)
        return termination_name(toe);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !sent_on_socket)
        return "answer_cut";
    return status >= 500 ? "server_error" : status >= 400 ? "client_error" : "ok";
}

/* Once per request that got past its request line: metrics, the access log line, and freeing
 * the request. A request that never completed its headers is connection noise: counted, and
 * logged only within the noise rate limit. */
static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct svc_listener *listener = cls;
    struct svc_server *srv = listener->srv;
    struct svc_request *req = *con_cls;
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (info && info->socket_context && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        struct svc_conn *tracked = info->socket_context;
        atomic_store(&tracked->served, true);
        svc_conn_set_phase(tracked, SVC_CONN_HEADERS); /* kept alive */
    }
    if (!req)
        return;
    *con_cls = NULL;
    if (!req->started) {
        svc_metrics_conn_event(&srv->metrics, SVC_CONN_EVENT_INCOMPLETE_HEADERS);
        svc_log_noise(&srv->noise, "incomplete_request", "request line without headers (%s)",
                      termination_name(toe));
        svc_request_free(req);
        return;
    }
    double duration_s = svc_now_s() - req->t_start;
    unsigned status = req->phase == SVC_PHASE_ANSWERED ? req->status : 0;
    uint64_t bytes_out = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK || req->refused_on_socket
                             ? req->bytes_out : 0;
    if (status)
        svc_metrics_request(&srv->metrics, req->route, status, duration_s, req->bytes_in,
                            bytes_out);
    else
        svc_metrics_aborted(&srv->metrics, req->route, abort_reason(toe), req->bytes_in);

    struct ecg_buf line = {0};
    svc_log_begin(&line, status >= 500 || status == 0 ? "warn" : "info", "request");
    ecg_buf_puts(&line, ",\"request_id\":");
    svc_json_string(&line, req->id);
    ecg_buf_puts(&line, ",\"method\":");
    svc_json_string(&line, req->method);
    ecg_buf_puts(&line, ",\"path\":");
    svc_json_string(&line, req->path);
    ecg_buf_printf(&line,
                   ",\"route\":\"%s\",\"status\":%u,\"bytes_in\":%llu,\"bytes_out\":%llu,"
                   "\"duration_ms\":%.3f,\"outcome\":\"%s\"%s",
                   svc_route_def(req->route)->pattern, status,
                   (unsigned long long)req->bytes_in, (unsigned long long)bytes_out,
                   duration_s * 1000.0, outcome_name(status, toe, req->refused_on_socket),
                   req->admin ? ",\"admin\":true" : "");
    if (status >= 400 && req->error_code[0]) {
        ecg_buf_puts(&line, ",\"error_code\":");
        svc_json_string(&line, req->error_code);
    }
    if (req->model) {
        ecg_buf_puts(&line, ",\"model\":");
        svc_json_string(&line, req->model->name);
    }
    if (status == 0)
        svc_log_noise_line(&srv->noise, &line);
    else
        svc_log_end(&line);
    svc_request_free(req);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct svc_listener *listener = cls;
    char message[512];
    vsnprintf(message, sizeof message, fmt, ap);
    size_t len = strlen(message);
    while (len && (message[len - 1] == '\n' || message[len - 1] == '\r'))
        message[--len] = '\0';
    svc_metrics_conn_event(&listener->srv->metrics, SVC_CONN_EVENT_LIBMICROHTTPD);
    svc_log_noise(&listener->srv->noise, "libmicrohttpd", "%s", message);
}

/* ------------------------------------------------------------------ start and stop */

static struct MHD_Daemon *listener_start(struct svc_listener *listener, unsigned port,
                                         struct ecg_error *err)
{
    struct svc_server *srv = listener->srv;
    const struct svc_config *cfg = &srv->cfg;
    struct sockaddr_in addr4;
    struct sockaddr_in6 addr6;
    const struct sockaddr *addr;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ITC;
    memset(&addr4, 0, sizeof addr4);
    memset(&addr6, 0, sizeof addr6);
    if (inet_pton(AF_INET, cfg->bind, &addr4.sin_addr) == 1) {
        addr4.sin_family = AF_INET;
        addr4.sin_port = htons((uint16_t)port);
        addr = (const struct sockaddr *)&addr4;
    } else if (inet_pton(AF_INET6, cfg->bind, &addr6.sin6_addr) == 1) {
        addr6.sin6_family = AF_INET6;
        addr6.sin6_port = htons((uint16_t)port);
        addr = (const struct sockaddr *)&addr6;
        flags |= MHD_USE_IPv6;
    } else {
        ecg_fail(err, ECG_ERR_ARG, "bad_bind",
                 "--bind \"%s\": expected a numeric IPv4 or IPv6 address", cfg->bind);
        return NULL;
    }
    bool admin = listener->admin;
    struct MHD_Daemon *daemon = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, listener,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, listener,
        MHD_OPTION_THREAD_POOL_SIZE, admin ? 1u : (unsigned)cfg->io_threads,
        MHD_OPTION_CONNECTION_TIMEOUT, admin ? SVC_ADMIN_TIMEOUT_S : (unsigned)cfg->timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(admin ? SVC_ADMIN_CONNECTION_MEMORY : SVC_CONNECTION_MEMORY),
        MHD_OPTION_CONNECTION_LIMIT, admin ? SVC_ADMIN_CONNECTION_LIMIT : SVC_CONNECTION_LIMIT,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        admin ? SVC_ADMIN_CONNECTIONS_PER_IP : (unsigned)cfg->max_conns_per_ip,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, admin ? 64u : 1024u,
        /* Level 1 would also refuse a missing Host, but libmicrohttpd 0.9.75 then writes its
         * status line and headers twice; admission.c checks Host (and more) itself. */
        MHD_OPTION_STRICT_FOR_CLIENT, 0,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, listener,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, listener,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, listener,
        MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_END);
    if (!daemon)
        ecg_fail(err, ECG_ERR_IO, "listen_failed", "cannot listen on %s port %u%s: %s", cfg->bind,
                 port, admin ? " (--admin-port)" : "",
                 errno ? strerror(errno) : "libmicrohttpd refused the options");
    return daemon;
}

enum ecg_status svc_listeners_start(struct svc_server *srv, struct ecg_error *err)
{
    struct svc_conns *conns = &srv->conns;
    pthread_mutex_init(&conns->mutex, NULL);
    atomic_init(&conns->stop, false);
    atomic_init(&conns->closing, false);
    conns->srv = srv;
    conns->header_timeout_s = srv->cfg.header_timeout_s;
    conns->min_upload_bytes_s = (double)srv->cfg.min_upload_kib_s * 1024.0;
    conns->min_download_bytes_s = (double)srv->cfg.min_download_kib_s * 1024.0;
    srv->main.srv = srv;
    srv->main.admin = false;
    srv->admin.srv = srv;
    srv->admin.admin = true;
    srv->main.daemon = listener_start(&srv->main, srv->cfg.port, err);
    if (!srv->main.daemon)
        goto fail;
    if (srv->cfg.admin_port >= 0) {
        srv->admin.daemon = listener_start(&srv->admin, (unsigned)srv->cfg.admin_port, err);
        if (!srv->admin.daemon)
            goto fail;
    }
    int rc = pthread_create(&conns->reaper, NULL, reaper_main, conns);
    if (rc) {
        ecg_fail(err, ECG_ERR_INTERNAL, "thread_create", "starting the connection reaper: %s",
                 strerror(rc));
        goto fail;
    }
    (void)pthread_setname_np(conns->reaper, "ecgd-reaper");
    conns->reaper_started = true;
    return ECG_OK;
fail:
    svc_listeners_stop(srv);
    return err->status;
}

unsigned svc_listener_port(const struct svc_server *srv, bool admin)
{
    struct MHD_Daemon *daemon = admin ? srv->admin.daemon : srv->main.daemon;
    const union MHD_DaemonInfo *info =
        daemon ? MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    return info ? (unsigned)info->port : 0;
}

long svc_connections_count(struct svc_server *srv)
{
    pthread_mutex_lock(&srv->conns.mutex);
    long count = srv->conns.count;
    pthread_mutex_unlock(&srv->conns.mutex);
    return count;
}

void svc_listeners_quiesce(struct svc_server *srv)
{
    if (!srv->main.daemon)
        return;
    MHD_socket listener = MHD_quiesce_daemon(srv->main.daemon);
    if (listener != MHD_INVALID_SOCKET)
        close(listener);
}

void svc_listeners_closing(struct svc_server *srv)
{
    atomic_store(&srv->conns.closing, true);
}

void svc_listeners_stop(struct svc_server *srv)
{
    struct svc_conns *conns = &srv->conns;
    if (conns->reaper_started) {
        atomic_store(&conns->stop, true);
        pthread_join(conns->reaper, NULL);
        conns->reaper_started = false;
    }
    if (srv->admin.daemon)
        MHD_stop_daemon(srv->admin.daemon);
    if (srv->main.daemon)
        MHD_stop_daemon(srv->main.daemon);
    srv->admin.daemon = NULL;
    srv->main.daemon = NULL;
    if (conns->srv) {
        pthread_mutex_destroy(&conns->mutex);
        conns->srv = NULL;
    }
}
