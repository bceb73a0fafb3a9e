/* The server's connections: libmicrohttpd's messages, the list of open connections and the
 * reaper that closes the ones too slow to send their request. */
#include "server/server_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

/* libmicrohttpd's own messages (a client that hung up mid-answer, a request too big) are
 * ordinary under load: written only with verbose. */
void srv_http_log(void *cls, const char *fmt, va_list ap) {
    const st_server *s = cls;
    if (!s->verbose) return;
    fputs("strata serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* libmicrohttpd's connection notifications: a connection joins the reaper's list reading (its
 * first request's deadline running) and leaves it before its socket is closed, so the reaper
 * never shuts a descriptor another connection has since been given. */
void srv_conn_notify(void *cls, struct MHD_Connection *con, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    st_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_conn *k = calloc(1, sizeof *k);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = k;
        if (!k) return;
        k->fd = ci ? ci->connect_fd : -1;
        k->reading = 1;
        k->deadline = st_time_now() + s->request_timeout;
        pthread_mutex_lock(&s->conn_mu);
        k->next = s->conns;
        if (s->conns) s->conns->prev = k;
        s->conns = k;
        pthread_mutex_unlock(&s->conn_mu);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        srv_conn *k = *socket_context;
        pthread_mutex_lock(&s->conn_mu);
        if (k->prev) k->prev->next = k->next;
        else s->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        pthread_mutex_unlock(&s->conn_mu);
        free(k);
        *socket_context = NULL;
    }
}

/* A connection's reading state: set when a request has fully arrived (0) and when its answer
 * is done (1: the next request's deadline runs). */
void srv_conn_reading(st_server *s, struct MHD_Connection *con, int reading) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    srv_conn *k = ci ? ci->socket_context : NULL;
    if (!k) return;
    pthread_mutex_lock(&s->conn_mu);
    k->reading = reading;
    k->deadline = st_time_now() + s->request_timeout;
    pthread_mutex_unlock(&s->conn_mu);
}

/* Shuts the socket of every connection still reading past its deadline: its thread's next
 * read sees the end and libmicrohttpd closes it. */
void *srv_reaper(void *arg) {
    st_server *s = arg;
    pthread_mutex_lock(&s->conn_mu);
    while (!s->reaper_stop) {
        const double now = st_time_now();
        for (srv_conn *k = s->conns; k; k = k->next) {
            if (k->reading && k->fd >= 0 && now > k->deadline) {
                shutdown(k->fd, SHUT_RDWR);
                k->reading = 0;
                pthread_mutex_lock(&s->mu);
                s->slow_closed++;
                pthread_mutex_unlock(&s->mu);
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200L * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&s->conn_wake, &s->conn_mu, &ts);
    }
    pthread_mutex_unlock(&s->conn_mu);
    return NULL;
}
