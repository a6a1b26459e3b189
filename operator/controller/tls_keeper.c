/* The operator's TLS material kept current (tls_keeper.h). */
#include "tls_keeper.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"

struct tls_keeper {
    struct tls_keeper_opts o;
    char **names;                   /* owned copies of o.names */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit;
    struct coord_tls cur;           /* under mu */
    unsigned long gen;              /* under mu; 1 after the first load */
    char last_error[1024];          /* under mu */
};

/* One check: the Secret synced or the files read; the material replaced when it changed. */
static int refresh(struct tls_keeper *k, herr *e)
{
    struct coord_tls t = {0};
    char renewed[300] = "";
    int rc;
    if (k->o.secret_name) {
        pthread_mutex_lock(&k->mu);
        rc = coord_tls_copy(&t, &k->cur);
        pthread_mutex_unlock(&k->mu);
        if (rc == 0)
            rc = coord_tls_sync_secret(k->o.kc, k->o.secret_ns, k->o.secret_name, &k->o.names,
                                       &k->o.life, &t, renewed, sizeof renewed, e);
        else
            herr_set(e, "out of memory");
    } else {
        rc = coord_tls_read_files(k->o.cert_file, k->o.key_file, k->o.ca_file, &t, e);
    }
    pthread_mutex_lock(&k->mu);
    if (rc == 0) {
        k->last_error[0] = '\0';
        if (!coord_tls_same(&t, &k->cur)) {
            coord_tls_free(&k->cur);
            k->cur = t;
            memset(&t, 0, sizeof t);
            k->gen++;
            if (renewed[0])
                log_info("TLS: Secret %s/%s written: %s", k->o.secret_ns, k->o.secret_name, renewed);
            else if (k->gen > 1)
                log_info("TLS: new certificate from %s", k->o.secret_name ? "the Secret" : "the files");
        }
    } else {
        snprintf(k->last_error, sizeof k->last_error, "%s", e->msg);
    }
    pthread_mutex_unlock(&k->mu);
    coord_tls_free(&t);
    return rc;
}

static void *run(void *arg)
{
    struct tls_keeper *k = arg;
    double every = k->o.interval_s > 0 ? k->o.interval_s : k->o.secret_name ? 3600 : 60;
    pthread_mutex_lock(&k->mu);
    while (!k->quit) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = until.tv_sec + until.tv_nsec / 1e9 + every;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&k->cv, &k->mu, &until);
        if (k->quit)
            break;
        pthread_mutex_unlock(&k->mu);
        herr e = {0};
        if (refresh(k, &e) != 0) /* keep serving the material we have; try again next time */
            log_warn("TLS: %s (keeping the current certificate)", e.msg);
        pthread_mutex_lock(&k->mu);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void keeper_free(struct tls_keeper *k)
{
    for (int i = 0; k->names && i < k->o.names.n; i++)
        free(k->names[i]);
    free(k->names);
    coord_tls_free(&k->cur);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    free(k);
}

struct tls_keeper *tls_keeper_start(const struct tls_keeper_opts *o, herr *e)
{
    if (!o->secret_name && (!o->cert_file || !o->key_file)) {
        herr_set(e, "TLS: a Secret, or a certificate and a key file, is required");
        return NULL;
    }
    struct tls_keeper *k = calloc(1, sizeof *k);
    if (!k) {
        herr_set(e, "out of memory");
        return NULL;
    }
    k->o = *o;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->names = calloc((size_t)(o->names.n > 0 ? o->names.n : 1), sizeof *k->names);
    int ok = k->names != NULL;
    for (int i = 0; ok && i < o->names.n; i++)
        ok = (k->names[i] = strdup(o->names.names[i])) != NULL;
    k->o.names.names = (const char *const *)k->names;
    if (!ok) {
        herr_set(e, "out of memory");
        keeper_free(k);
        return NULL;
    }
    if (refresh(k, e) != 0) {
        keeper_free(k);
        return NULL;
    }
    if (pthread_create(&k->th, NULL, run, k) != 0) {
        herr_set(e, "TLS: cannot start the keeper's thread");
        keeper_free(k);
        return NULL;
    }
    return k;
}

void tls_keeper_stop(struct tls_keeper *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->quit = 1;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->th, NULL);
    keeper_free(k);
}

int tls_keeper_take(struct tls_keeper *k, unsigned long *gen, struct coord_tls *out)
{
    int rc = 0;
    pthread_mutex_lock(&k->mu);
    if (k->gen != *gen) {
        rc = coord_tls_copy(out, &k->cur) == 0 ? 1 : -1;
        if (rc == 1)
            *gen = k->gen;
    }
    pthread_mutex_unlock(&k->mu);
    return rc;
}

char *tls_keeper_ca(struct tls_keeper *k)
{
    pthread_mutex_lock(&k->mu);
    char *ca = k->cur.ca_crt ? strdup(k->cur.ca_crt) : NULL;
    pthread_mutex_unlock(&k->mu);
    return ca;
}

void tls_keeper_last_error(struct tls_keeper *k, char *buf, size_t n)
{
    pthread_mutex_lock(&k->mu);
    snprintf(buf, n, "%s", k->last_error);
    pthread_mutex_unlock(&k->mu);
}
