/* Fuzz target: the bootstrap store's client (src/comm/bootstrap/store_client.c), which parses
 * every frame the store sends back (answers OK / ERR / CANCELLED by request id, and NOTICEs at any
 * time; wire format in store_proto.h). A thread plays the store over loopback: it accepts the
 * client, sends the input as the store's whole side of the conversation, and ends its stream, while
 * the client runs what a rank does: connect (HELLO is request 1), GET (2), ADD (3), WAIT for two
 * keys (4), look for notices, SET (5), and close with BYE (6). The end of the stream makes every
 * wait end at once, so an input that answers nothing costs no timeout. */
#include "common.h"

#include "comm/bootstrap/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct fake_store {
    int listen_fd;
    const uint8_t *data;
    size_t size;
} fake_store_t;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static void *serve(void *arg)
{
    fake_store_t *fs = arg;
    // EINTR: libFuzzer's timer signal may land on this thread.
    int fd;
    while ((fd = accept(fs->listen_fd, NULL, NULL)) < 0 && errno == EINTR)
        ;
    if (fd < 0)
        return NULL;
    size_t off = 0;
    while (off < fs->size) {
        ssize_t w = send(fd, fs->data + off, fs->size - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, 0)) > 0 || (r < 0 && errno == EINTR))
        ; // the client's requests, until it hangs up
    close(fd);
    return NULL;
}

/* One listening socket for the whole process: the fake store ends its stream first, so each
 * run leaves a TIME_WAIT connection on the store's side, and a new listener per run would soon
 * find no free port to bind. */
static int listener(int *port)
{
    static int fd = -1, bound_port;
    if (fd < 0) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t alen = sizeof a;
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
            perror("fuzz_store_client: listen");
            abort();
        }
        bound_port = ntohs(a.sin_port);
    }
    *port = bound_port;
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fake_store_t fs = {.data = data, .size = size};
    int port;
    fs.listen_fd = listener(&port);
    pthread_t th;
    if (pthread_create(&th, NULL, serve, &fs) != 0)
        abort();
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    st_store_t *st;
    if (st_store_connect(addr, "fuzz", 3, 5000, &st) == STRATA_OK) {
        void *val;
        size_t len;
        if (st_store_get(st, "addr0", &val, &len, 5000) == STRATA_OK) {
            FUZZ_CHECK(((char *)val)[len] == '\0');
            free(val);
        }
        int64_t sum;
        st_store_add(st, "count", 1, &sum);
        const char *keys[] = {"a", "b"};
        st_store_wait(st, keys, 2, 5000);
        int rank;
        if (st_store_check_notice(st, &rank) != STRATA_OK)
            FUZZ_CHECK(strata_last_error()[0]);
        st_store_set(st, "k", "v", 1);
        st_store_close(st, true);
    } else {
        FUZZ_CHECK(strata_last_error()[0]);
    }
    pthread_join(th, NULL); // the client always connects first, so accept() has returned
    return 0;
}
