/*
 * http_sink.c - the anchor of the HTTP benchmarks (bench/bench_strips.sh): a libmicrohttpd
 * server with ecgd's threading (an epoll thread pool of the same size) that reads every request
 * body to the end, discards it, and answers a small fixed JSON. What ecgd achieves on the same
 * bodies and clients, divided by what this achieves in the same run, is the share of the
 * machine's HTTP capacity left to the analysis. Not a test and not run by bench/run.sh itself.
 *
 * Usage: http_sink --threads N [--port P] [--port-file FILE]
 *   --threads   the libmicrohttpd thread pool (give ecgd's --io-threads: its workers, >= 2)
 *   --port      0 (default) picks a free port; --port-file receives the port number
 * Listens on 127.0.0.1 until SIGINT or SIGTERM. Every request (any method, any path) gets
 * 200 {"sink":true,"bytes":N}, N the body's length.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per request: the body bytes seen so far. */
struct sink_request {
    uint64_t bytes;
};

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)conn;
    (void)code;
    free(*req_cls);
    *req_cls = NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)upload_data;
    struct sink_request *req = *req_cls;
    if (!req) { /* headers only: allocate the request's state, ask for the body */
        req = calloc(1, sizeof *req);
        if (!req)
            return MHD_NO;
        *req_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size) {
        req->bytes += *upload_data_size;
        *upload_data_size = 0;
        return MHD_YES;
    }
    char body[64];
    int len = snprintf(body, sizeof body, "{\"sink\":true,\"bytes\":%llu}",
                       (unsigned long long)req->bytes);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer((size_t)len, body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

int main(int argc, char **argv)
{
    unsigned threads = 0, port = 0;
    const char *port_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--port-file") && i + 1 < argc)
            port_file = argv[++i];
        else {
            fprintf(stderr, "usage: http_sink --threads N [--port P] [--port-file FILE]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 256 || port > 65535) {
        fprintf(stderr, "http_sink: --threads must be 1..256 and --port 0..65535\n");
        return 2;
    }
    /* SIGINT/SIGTERM are waited for below, not delivered to any thread */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* as ecgd's listener (service/connections.c): epoll, a pool, a deep backlog */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC, 0, NULL, NULL,
        on_request, NULL, MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_TIMEOUT,
        120u, MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "http_sink: cannot listen: %s\n", strerror(errno));
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned bound = info ? info->port : port;
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%u\n", bound) < 0 || fclose(f) != 0 || rename(tmp, port_file)) {
            fprintf(stderr, "http_sink: cannot write %s\n", port_file);
            MHD_stop_daemon(d);
            return 1;
        }
    }
    fprintf(stderr, "http_sink: listening on 127.0.0.1:%u, %u threads\n", bound, threads);
    int sig = 0;
    sigwait(&stop, &sig);
    MHD_stop_daemon(d);
    return 0;
}
