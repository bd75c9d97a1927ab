/*
 * fuzz_http.c - libFuzzer harness for the HTTP request path: the whole `ecgd serve` (libmicrohttpd,
 * connections.c, admission.c, the routes, the readers) runs in this process, instrumented, on
 * 127.0.0.1, and each input is sent as the raw bytes of one connection (request line, headers,
 * query, body, pipelined requests, anything), after which the client shuts its side and reads
 * until the server closes.
 *
 * Contract checked: every byte the server sends is one or more complete HTTP/1.1 responses with
 * a status line, headers and exactly Content-Length bytes of body; nothing follows an answer of
 * ours that says Connection: close (framing not trusted: nothing else on that connection); the
 * server answers the next
 * connection (a /healthz probe after every 256 inputs). Answers libmicrohttpd writes itself
 * (they carry no X-Request-Id: request lines or a Content-Length it cannot parse) are exempt:
 * 0.9.75 writes the status line and headers of some of them twice (a known defect of that
 * version, docs/SERVICE.md), and closes the connection after them. A crash, a sanitizer report or a
 * broken contract stops the run. Server logs go to stderr: run with -close_fd_mask=2.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "service.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned port;

/* Says why on stdout (stderr is closed for the target) and stops the run. */
#define FAIL(why)                                                                              \
    do {                                                                                       \
        printf("fuzz_http: %s\n", why);                                                        \
        fflush(stdout);                                                                        \
        __builtin_trap();                                                                      \
    } while (0)

static void *server_main(void *arg)
{
    (void)arg;
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%u", port);
    char *args[] = {"serve", "--bind", "127.0.0.1", "--port", port_text, "--model", "none",
                    "--workers", "1", "--io-threads", "2", "--header-timeout-s", "2",
                    "--timeout-s", "3", "--max-body-mb", "1", "--max-conns-per-ip", "0",
                    "--drain-s", "0", NULL};
    ecg_service_main((int)(sizeof args / sizeof args[0]) - 1, args);
    return NULL;
}

static int connect_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval timeout = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* A free port: bind to 0, read it back, release it for the server. */
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(probe, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        getsockname(probe, (struct sockaddr *)&addr, &len) != 0)
        abort();
    port = ntohs(addr.sin_port);
    close(probe);
    pthread_t thread;
    if (pthread_create(&thread, NULL, server_main, NULL) != 0)
        abort();
    for (int i = 0; i < 500; i++) {
        int fd = connect_server();
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        usleep(10000);
    }
    abort(); /* the server did not start */
}

/* Checks that buf holds complete responses only; returns their count, -1 when malformed. */
static int responses(const char *buf, size_t len, unsigned *first_status)
{
    int count = 0;
    while (len) {
        if (len < 12 || memcmp(buf, "HTTP/1.1 ", 9) != 0)
            return -1;
        unsigned status = (unsigned)atoi(buf + 9);
        if (status < 100 || status > 599)
            return -1;
        if (!count)
            *first_status = status;
        const char *end = memmem(buf, len, "\r\n\r\n", 4);
        if (!end)
            return -1;
        size_t head = (size_t)(end - buf) + 4;
        const char *cl = memmem(buf, head, "\r\nContent-Length: ", 18);
        size_t body = cl ? strtoul(cl + 18, NULL, 10) : 0;
        if (head + body > len)
            return -1;
        buf += head + body;
        len -= head + body;
        count++;
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned runs;
    static char reply[1 << 20];
    int fd = connect_server();
    if (fd < 0)
        FAIL("the server stopped accepting");
    size_t sent = 0;
    while (sent < size) {
        ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server closed early (it may: a refusal) */
        sent += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    bool got_timeout = false;
    for (;;) {
        ssize_t n = recv(fd, reply + got, sizeof reply - got, 0);
        if (n < 0) {
            got_timeout = true; /* the server kept the connection open 5 s after our FIN */
            break;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got == sizeof reply)
            break;
    }
    close(fd);
    unsigned status = 0;
    int count = got < sizeof reply ? responses(reply, got, &status) : 0;
    const char *head_end = memmem(reply, got, "\r\n\r\n", 4);
    bool ours = head_end && memmem(reply, (size_t)(head_end - reply), "X-Request-Id:", 13);
    if (!ours && got && count != 1)
        return 0; /* libmicrohttpd's own error answer (see above) */
    if (count < 0)
        FAIL(got_timeout ? "a response still incomplete 5 s after the request"
                         : "a broken or truncated response");
    /* An answer of ours with Connection: close (a framing we do not trust, a body left unread)
     * is the last thing on the connection. */
    bool closing = memmem(reply, (size_t)(head_end - reply), "Connection: close", 17) != NULL;
    if (count > 1 && closing)
        FAIL("something followed an answer that closes the connection");
    if (++runs % 256 == 0) {
        static const char probe[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        fd = connect_server();
        if (fd < 0 || send(fd, probe, sizeof probe - 1, MSG_NOSIGNAL) != sizeof probe - 1)
            FAIL("the /healthz probe could not be sent");
        ssize_t n = recv(fd, reply, 64, 0);
        if (n < 12 || memcmp(reply, "HTTP/1.1 200", 12) != 0)
            FAIL("the /healthz probe was not answered 200");
        close(fd);
    }
    return 0;
}
