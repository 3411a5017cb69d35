/* The store client (src/comm/bootstrap/store_client.c) against a store that answers strangely: a
 * thread plays the store over loopback and sends prepared frames. Found by fuzzing the client: a
 * NOTICE whose text is empty (or starts with a NUL byte) became an error with an empty message. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness/st_test.h"

#include "comm/bootstrap/store.h"
#include "comm/bootstrap/store_proto.h"

typedef struct fake {
    int listen_fd;
    st_buf_t reply; /* what the store sends, then it ends its stream */
} fake_t;

static void *serve(void *arg)
{
    fake_t *f = arg;
    int fd = accept(f->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    assert_int_equal(send(fd, f->reply.data, f->reply.len, MSG_NOSIGNAL), (ssize_t)f->reply.len);
    shutdown(fd, SHUT_WR);
    char buf[4096];
    while (recv(fd, buf, sizeof buf, 0) > 0)
        ;
    close(fd);
    return NULL;
}

/* Connects to a store that sends `f->reply`; returns the client (NULL if the handshake failed). */
static st_store_t *connect_fake(fake_t *f, pthread_t *th)
{
    f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->listen_fd, 1), 0);
    assert_int_equal(getsockname(f->listen_fd, (struct sockaddr *)&a, &alen), 0);
    assert_int_equal(pthread_create(th, NULL, serve, f), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    st_store_t *st = NULL;
    st_store_connect(addr, "", 0, 5000, &st);
    return st;
}

static void test_notice_without_text(void **state)
{
    (void)state;
    fake_t f = {0};
    size_t start = st_frame_begin(&f.reply, ST_MSG_OK); // the answer to HELLO, request 1
    st_buf_put_u32(&f.reply, 1);
    st_frame_end(&f.reply, start);
    start = st_frame_begin(&f.reply, ST_MSG_NOTICE);
    st_buf_put_u32(&f.reply, 7); // rank 7, then a text of one NUL byte
    st_buf_put(&f.reply, "\0", 1);
    st_frame_end(&f.reply, start);
    pthread_t th;
    st_store_t *st = connect_fake(&f, &th);
    assert_non_null(st);
    int rank = -1;
    assert_int_equal(st_store_check_notice(st, &rank), STRATA_ERR_PEER_FAILED);
    assert_int_equal(rank, 7);
    assert_non_null(strstr(strata_last_error(), "rank 7 failed"));
    st_store_close(st, false);
    pthread_join(th, NULL);
    close(f.listen_fd);
    st_buf_free(&f.reply);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notice_without_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
