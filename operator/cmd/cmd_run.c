/* holmes-operator run: the TrainingJob controller against a Kubernetes API server. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "commands.h"
#include "controller.h"
#include "coord_history.h"
#include "coord_metrics.h"
#include "coord_operator.h"
#include "http_auth.h"
#include "http_server.h"
#include "job_page.h"
#include "kube_config.h"
#include "kube_lease.h"
#include "log.h"
#include "tls_keeper.h"

static volatile sig_atomic_t g_stop;
static volatile int g_stop_flag; /* mirrors g_stop for the library's `volatile int *` */
static volatile int g_lost;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
    g_stop_flag = 1;
}

static void on_lost(void *user)
{
    (void)user;
    g_lost = 1;
    g_stop_flag = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: holmes-operator run [OPTIONS]\n\n"
            "Runs the TrainingJob controller: watches TrainingJobs and keeps their Secret,\n"
            "headless Service and worker pods, and their status, up to date.\n\n"
            "Options:\n"
            "  --kubeconfig FILE        kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)\n"
            "  --context NAME           kubeconfig context (default: current-context)\n"
            "  --namespace NS           watch only NS (default: all namespaces)\n"
            "  --leader-elect           elect a leader on a Lease before acting\n"
            "  --lease-name NAME        default holmes-operator\n"
            "  --lease-namespace NS     default: the kubeconfig/service-account namespace, else default\n"
            "  --lease-duration S       default 15; --renew-deadline S default 10; --retry-period S default 2\n"
            "  --identity ID            leader-election identity (default: hostname_pid)\n"
            "  --metrics-addr ADDR      Prometheus metrics on ADDR (default :8080, \"0\" = off),\n"
            "                           and the live job page: /jobs (JSON: /api/jobs)\n"
            "  --metrics-secure         serve them over HTTPS (the operator's certificate), to\n"
            "                           callers whose bearer token passes TokenReview and who may\n"
            "                           get the /metrics URL, or TrainingJobs in a namespace (its\n"
            "                           jobs on the page) - SubjectAccessReview, cached 30 s\n"
            "  --health-addr ADDR       /healthz and /readyz on ADDR (default :8081, \"0\" = off)\n"
            "  --coordinator-url URL    HOLMES_COORDINATOR for the pods (default\n"
            "                           ws[s]://holmes-operator.<lease namespace>.svc:8443)\n"
            "  --coordinator-addr ADDR  serve the workers' coordinator on ADDR (default :8443,\n"
            "                           \"0\" = off); wss:// with a certificate from either:\n"
            "  --tls-secret NAME        a CA and serving certificate the operator makes and keeps in\n"
            "                           Secret NAME of the lease namespace, renewed before expiry;\n"
            "                           the pods get the CA in their job's Secret (ca.crt)\n"
            "  --tls-names LIST         the serving certificate's names, comma-separated (DNS names,\n"
            "                           IP:ADDR); default: the host of --coordinator-url\n"
            "  --coordinator-cert FILE --coordinator-key FILE, and optionally --coordinator-ca FILE\n"
            "                           PEM files (e.g. cert-manager's Secret, mounted), read again\n"
            "                           when they change; the CA goes to the pods as above\n"
            "  --tls-check-interval S   how often the certificate is checked (default 3600 for the\n"
            "                           Secret, 60 for files)\n"
            "  --node-image IMAGE       worker image when a job sets no spec.image\n"
            "  --workers N              reconcile threads (default 2)\n"
            "  --status-interval S      write a running job's progress to its status at most every\n"
            "                           S seconds (default 5; 0.2 to 3600)\n"
            "  --qps Q --burst B        client-side API rate limit (default 50 / 100)\n"
            "  --log-format text|json   --log-level debug|info|warn|error\n"
            "  --gang-schedulers LIST   gang schedulers jobs may use (spec.scheduling.gang): comma-\n"
            "                           separated kueue, volcano, coscheduling (default: none)\n"
            "  --gang-default NAME      gang scheduler of jobs that name none: none (default) or an\n"
            "                           enabled one\n"
            "  --volcano-scheduler-name NAME       pods' schedulerName for volcano (default volcano)\n"
            "  --coscheduling-scheduler-name NAME  ... for coscheduling (default\n"
            "                           scheduler-plugins-scheduler)\n"
            "  --print-api-calls        print every API call the operator can make (with the\n"
            "                           --gang-schedulers, TLS and --metrics-secure given), exit\n"
            "  --help\n");
}

struct run_state {
    struct tls_keeper *tls;     /* the operator's certificate; NULL = plain */
    int ca_to_pods;             /* the keeper has a CA: pods verify the coordinator with it */
    struct controller *ctl;
    struct http_auth *auth;     /* --metrics-secure: who may read; NULL = anyone */
    struct coord_metrics *jobs; /* the coordinator's per-job gauges; outlives both servers */
    struct coord_history *history; /* what the job page shows of each job; the same */
    struct kube_lease *lease;
    int leader_elect;
};

/* The caller of a request, when the listener is secure: 0 with *who set, else the HTTP status
 * with its body in b (401: no or bad token; 503: the API server did not answer). */
static int caller(struct run_state *s, const struct http_request *req, cJSON **who,
                  struct metrics_buf *b)
{
    char why[300];
    int rc = http_auth_authenticate(s->auth, req->authorization, who, why, sizeof why);
    if (rc == 1)
        return 0;
    log_debug("%s: %s", req->path, why);
    metrics_printf(b, "%s: %s\n", rc == 0 ? "Unauthorized" : "authentication unavailable", why);
    return rc == 0 ? 401 : 503;
}

/* Whether who may do what: 0, else 403 (or 503) with the body in b. */
static int allowed(struct run_state *s, const cJSON *who, const struct http_access *what,
                   struct metrics_buf *b)
{
    char why[400];
    int rc = http_auth_authorize(s->auth, who, what, why, sizeof why);
    if (rc == 1)
        return 0;
    log_debug("%s", why);
    metrics_printf(b, "%s: %s\n", rc == 0 ? "Forbidden" : "authorization unavailable", why);
    return rc == 0 ? 403 : 503;
}

/* The jobs of the namespaces who may `get` TrainingJobs in (all of them when it may in every
 * namespace); *none set when that leaves none. Takes jobs. */
static cJSON *visible_jobs(struct run_state *s, const cJSON *who, cJSON *jobs, int *none,
                           char *why, size_t why_len)
{
    struct http_access all = {.verb = "get", .group = "holmes.dev", .resource = "trainingjobs"};
    *none = 0;
    if (http_auth_authorize(s->auth, who, &all, why, why_len) == 1)
        return jobs;
    int kept = 0;
    for (int i = cJSON_GetArraySize(jobs) - 1; i >= 0; i--) {
        const char *ns = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(jobs, i), "namespace"));
        struct http_access one = all;
        one.ns = ns ? ns : "";
        char w[400];
        if (ns && http_auth_authorize(s->auth, who, &one, w, sizeof w) == 1)
            kept++;
        else
            cJSON_DeleteItemFromArray(jobs, i);
    }
    *none = kept == 0;
    return jobs;
}

/* The job page's paths: its jobs from the controller's cache and the coordinator's history;
 * behind --metrics-secure the page needs a token (without one it answers 401 with the page, which
 * asks for one) and /api/jobs lists the jobs of the namespaces the caller may read. */
static int page_handler(struct run_state *s, const struct http_request *req,
                        struct metrics_buf *b, const char **type)
{
    cJSON *who = NULL;
    int denied = 0, api = strcmp(req->path, JOB_PAGE_API_PATH) == 0;
    struct metrics_buf why = {0};
    if (s->auth)
        denied = caller(s, req, &who, &why);
    if (denied && api) {
        metrics_printf(b, "%s", why.data ? why.data : "");
        free(why.data);
        return denied;
    }
    free(why.data);
    cJSON *jobs = NULL;
    if (!denied && api) {
        struct controller *ctl = __atomic_load_n(&s->ctl, __ATOMIC_ACQUIRE);
        herr e = {0};
        cJSON *listed = ctl ? controller_jobs_json(ctl) : cJSON_CreateArray();
        cJSON *seen = coord_history_json(s->history, &e);
        if (listed && seen)
            jobs = job_page_jobs(listed, seen);
        else {
            cJSON_Delete(listed);
            cJSON_Delete(seen);
        }
        int none = 0;
        char reason[400] = "";
        if (jobs && who)
            jobs = visible_jobs(s, who, jobs, &none, reason, sizeof reason);
        if (none) {
            cJSON_Delete(jobs);
            cJSON_Delete(who);
            metrics_printf(b, "Forbidden: %s (and in no namespace that has a TrainingJob)\n", reason);
            return 403;
        }
    }
    cJSON_Delete(who);
    int rc = job_page_serve(req->path, jobs, b, type);
    return denied && rc == 200 ? denied : rc; /* the page itself asks for a token */
}

static int metrics_handler(void *user, const struct http_request *req, struct metrics_buf *b,
                           const char **type)
{
    struct run_state *s = user;
    const char *path = req->path;
    if (job_page_handles(path))
        return page_handler(s, req, b, type);
    if (strcmp(path, "/metrics") != 0) {
        metrics_printf(b, "not found\n");
        return 404;
    }
    if (s->auth) {
        cJSON *who = NULL;
        int rc = caller(s, req, &who, b);
        if (rc == 0) {
            struct http_access a = {.verb = "get", .path = "/metrics"};
            rc = allowed(s, who, &a, b);
            cJSON_Delete(who);
        }
        if (rc)
            return rc;
    }
    struct controller *ctl = __atomic_load_n(&s->ctl, __ATOMIC_ACQUIRE);
    metrics_printf(b, "# HELP holmes_leader 1 when this replica holds the lease.\n"
                      "# TYPE holmes_leader gauge\nholmes_leader %d\n",
                   s->lease ? kube_lease_is_leader(s->lease) : (ctl != NULL));
    if (ctl)
        controller_metrics(ctl, b);
    coord_metrics_render(s->jobs, b);
    if (s->auth)
        http_auth_metrics(s->auth, b);
    return b->oom ? 500 : 200;
}

static int health_handler(void *user, const struct http_request *req, struct metrics_buf *b,
                          const char **type)
{
    struct run_state *s = user;
    const char *path = req->path;
    (void)type;
    if (strcmp(path, "/healthz") == 0) {
        metrics_printf(b, "ok\n");
        return 200;
    }
    if (strcmp(path, "/readyz") == 0) {
        struct controller *ctl = __atomic_load_n(&s->ctl, __ATOMIC_ACQUIRE);
        /* A standby replica is ready (it serves health and waits for the lease). */
        if ((ctl && controller_synced(ctl)) || (s->leader_elect && !ctl)) {
            metrics_printf(b, "ok\n");
            return 200;
        }
        metrics_printf(b, "informers not synced\n");
        return 503;
    }
    metrics_printf(b, "not found\n");
    return 404;
}

static int parse_double(const char *flag, const char *v, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (*end || end == v || d <= 0) {
        fprintf(stderr, "holmes-operator run: %s: \"%s\" is not a positive number\n", flag, v);
        return -1;
    }
    *out = d;
    return 0;
}

struct run_opts {
    const char *kubeconfig, *context, *ns, *lease_name, *lease_ns, *identity;
    const char *metrics_addr, *health_addr, *coord, *image;
    const char *coord_addr, *coord_cert, *coord_key, *coord_ca;
    const char *tls_secret, *tls_names;
    double lease_dur, renew, retry, qps, burst, workers;
    double status_interval, tls_interval;
    int leader_elect, print_calls, metrics_secure;
    struct controller_gang gang;
    char coord_host[256]; /* --coordinator-addr: host ("" = any) and port (0 = off) */
    int coord_port;
};

/* The command line into o: -1 to go on, else the exit status (--help, --print-api-calls: 0;
 * a bad option: 2). */
static int parse_opts(int argc, char **argv, struct run_opts *o)
{
    enum { O_KUBECONFIG = 1000, O_CONTEXT, O_NAMESPACE, O_LEADER, O_LEASE_NAME, O_LEASE_NS,
           O_LEASE_DUR, O_RENEW, O_RETRY, O_IDENTITY, O_METRICS, O_HEALTH, O_COORD, O_IMAGE,
           O_WORKERS, O_QPS, O_BURST, O_LOGFMT, O_LOGLVL, O_PRINT, O_HELP, O_COORD_ADDR,
           O_COORD_CERT, O_COORD_KEY, O_STATUS_INTERVAL, O_GANGS, O_GANG_DEFAULT, O_VOLCANO_SCHED,
           O_COSCHED_SCHED, O_COORD_CA, O_TLS_SECRET, O_TLS_NAMES, O_TLS_INTERVAL,
           O_METRICS_SECURE };
    static const struct option opts[] = {
        {"kubeconfig", required_argument, 0, O_KUBECONFIG}, {"context", required_argument, 0, O_CONTEXT},
        {"namespace", required_argument, 0, O_NAMESPACE}, {"leader-elect", no_argument, 0, O_LEADER},
        {"lease-name", required_argument, 0, O_LEASE_NAME},
        {"lease-namespace", required_argument, 0, O_LEASE_NS},
        {"lease-duration", required_argument, 0, O_LEASE_DUR},
        {"renew-deadline", required_argument, 0, O_RENEW}, {"retry-period", required_argument, 0, O_RETRY},
        {"identity", required_argument, 0, O_IDENTITY}, {"metrics-addr", required_argument, 0, O_METRICS},
        {"health-addr", required_argument, 0, O_HEALTH},
        {"coordinator-url", required_argument, 0, O_COORD}, {"node-image", required_argument, 0, O_IMAGE},
        {"workers", required_argument, 0, O_WORKERS}, {"qps", required_argument, 0, O_QPS},
        {"burst", required_argument, 0, O_BURST}, {"log-format", required_argument, 0, O_LOGFMT},
        {"log-level", required_argument, 0, O_LOGLVL}, {"print-api-calls", no_argument, 0, O_PRINT},
        {"coordinator-addr", required_argument, 0, O_COORD_ADDR},
        {"coordinator-cert", required_argument, 0, O_COORD_CERT},
        {"coordinator-key", required_argument, 0, O_COORD_KEY},
        {"coordinator-ca", required_argument, 0, O_COORD_CA},
        {"tls-secret", required_argument, 0, O_TLS_SECRET},
        {"tls-names", required_argument, 0, O_TLS_NAMES},
        {"tls-check-interval", required_argument, 0, O_TLS_INTERVAL},
        {"metrics-secure", no_argument, 0, O_METRICS_SECURE},
        {"status-interval", required_argument, 0, O_STATUS_INTERVAL},
        {"gang-schedulers", required_argument, 0, O_GANGS}, {"gang-default", required_argument, 0, O_GANG_DEFAULT},
        {"volcano-scheduler-name", required_argument, 0, O_VOLCANO_SCHED},
        {"coscheduling-scheduler-name", required_argument, 0, O_COSCHED_SCHED},
        {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case O_KUBECONFIG: o->kubeconfig = optarg; break;
        case O_CONTEXT: o->context = optarg; break;
        case O_NAMESPACE: o->ns = optarg; break;
        case O_LEADER: o->leader_elect = 1; break;
        case O_LEASE_NAME: o->lease_name = optarg; break;
        case O_LEASE_NS: o->lease_ns = optarg; break;
        case O_LEASE_DUR: if (parse_double("--lease-duration", optarg, &o->lease_dur)) return 2; break;
        case O_RENEW: if (parse_double("--renew-deadline", optarg, &o->renew)) return 2; break;
        case O_RETRY: if (parse_double("--retry-period", optarg, &o->retry)) return 2; break;
        case O_IDENTITY: o->identity = optarg; break;
        case O_METRICS: o->metrics_addr = optarg; break;
        case O_HEALTH: o->health_addr = optarg; break;
        case O_COORD: o->coord = optarg; break;
        case O_COORD_ADDR: o->coord_addr = optarg; break;
        case O_COORD_CERT: o->coord_cert = optarg; break;
        case O_COORD_KEY: o->coord_key = optarg; break;
        case O_COORD_CA: o->coord_ca = optarg; break;
        case O_TLS_SECRET: o->tls_secret = optarg; break;
        case O_TLS_NAMES: o->tls_names = optarg; break;
        case O_TLS_INTERVAL: if (parse_double("--tls-check-interval", optarg, &o->tls_interval)) return 2; break;
        case O_METRICS_SECURE: o->metrics_secure = 1; break;
        case O_IMAGE: o->image = optarg; break;
        case O_WORKERS: if (parse_double("--workers", optarg, &o->workers)) return 2; break;
        case O_STATUS_INTERVAL:
            if (parse_double("--status-interval", optarg, &o->status_interval)) return 2;
            if (o->status_interval < 0.2 || o->status_interval > 3600) {
                fprintf(stderr, "holmes-operator run: --status-interval: %g is not in [0.2, 3600] "
                                "seconds\n", o->status_interval);
                return 2;
            }
            break;
        case O_QPS: if (parse_double("--qps", optarg, &o->qps)) return 2; break;
        case O_BURST: if (parse_double("--burst", optarg, &o->burst)) return 2; break;
        case O_LOGFMT: {
            enum log_format f;
            if (log_parse_format(optarg, &f) != 0) {
                fprintf(stderr, "holmes-operator run: --log-format: \"%s\" is not text or json\n", optarg);
                return 2;
            }
            log_set_format(f);
            break;
        }
        case O_LOGLVL: {
            enum log_level l;
            if (log_parse_level(optarg, &l) != 0) {
                fprintf(stderr, "holmes-operator run: --log-level: \"%s\" is not debug, info, warn "
                                "or error\n", optarg);
                return 2;
            }
            log_set_level(l);
            break;
        }
        case O_PRINT: o->print_calls = 1; break;
        case O_GANGS: {
            herr ge;
            if (controller_gang_parse_list(optarg, &o->gang.enabled, &ge) != 0) {
                fprintf(stderr, "holmes-operator run: --gang-schedulers: %s\n", ge.msg);
                return 2;
            }
            break;
        }
        case O_GANG_DEFAULT:
            if (tj_gang_parse(optarg, &o->gang.default_gang) != 0) {
                fprintf(stderr, "holmes-operator run: --gang-default: \"%s\" is not none, kueue, volcano or "
                                "coscheduling\n", optarg);
                return 2;
            }
            break;
        case O_VOLCANO_SCHED: o->gang.volcano_scheduler = optarg; break;
        case O_COSCHED_SCHED: o->gang.cosched_scheduler = optarg; break;
        case 'h':
        case O_HELP: usage(stdout); return 0;
        default:
            fprintf(stderr, "holmes-operator run: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "holmes-operator run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    enum tj_gang dg = o->gang.default_gang;
    if (dg != TJ_GANG_DEFAULT && dg != TJ_GANG_NONE && !(o->gang.enabled & (1u << dg))) {
        fprintf(stderr, "holmes-operator run: --gang-default: %s is not in --gang-schedulers\n", tj_gang_name(dg));
        return 2;
    }
    if (o->print_calls) {
        unsigned features = (o->tls_secret ? API_NEEDS_TLS_SECRET | API_NEEDS_CA : 0) |
                            (o->coord_ca ? API_NEEDS_CA : 0) |
                            (o->metrics_secure && strcmp(o->metrics_addr, "0") != 0 ? API_NEEDS_AUTH : 0);
        controller_print_api_calls_for(stdout, o->gang.enabled, features);
        return 0;
    }
    if (o->tls_secret && (o->coord_cert || o->coord_key || o->coord_ca)) {
        fprintf(stderr, "holmes-operator run: --tls-secret and --coordinator-cert/-key/-ca are two "
                        "sources of the certificate: give one\n");
        return 2;
    }
    if (!o->tls_secret && (!o->coord_cert != !o->coord_key || (o->coord_ca && !o->coord_cert))) {
        fprintf(stderr, "holmes-operator run: --coordinator-cert and --coordinator-key go together "
                        "(and --coordinator-ca with them)\n");
        return 2;
    }
    if (o->metrics_secure && !o->tls_secret && !o->coord_cert) {
        fprintf(stderr, "holmes-operator run: --metrics-secure needs a certificate: --tls-secret, or "
                        "--coordinator-cert and --coordinator-key\n");
        return 2;
    }
    if (o->leader_elect && o->renew >= o->lease_dur) {
        fprintf(stderr, "holmes-operator run: --renew-deadline (%g) must be below --lease-duration (%g)\n",
                o->renew, o->lease_dur);
        return 2;
    }
    return -1;
}

/* --coordinator-addr HOST:PORT or :PORT into o->coord_host, o->coord_port ("0": off). 0, or
 * the exit status 2. */
static int parse_coord_addr(struct run_opts *o)
{
    if (strcmp(o->coord_addr, "0") != 0) {
        const char *colon = strrchr(o->coord_addr, ':');
        char *end;
        long p = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || *end || p < 1 || p > 65535 || (size_t)(colon - o->coord_addr) >= sizeof o->coord_host) {
            fprintf(stderr, "holmes-operator run: --coordinator-addr: \"%s\" is not HOST:PORT or :PORT\n",
                    o->coord_addr);
            return 2;
        }
        snprintf(o->coord_host, sizeof o->coord_host, "%.*s", (int)(colon - o->coord_addr), o->coord_addr);
        o->coord_port = (int)p;
    }
    return 0;
}

/* --leader-elect: waits for the lease. -1 to go on (leading), else the exit status (1: the
 * lease failed; 0: stopped while waiting). */
static int elect_leader(struct kube_client *kc, const struct run_opts *o, struct run_state *st,
                        herr *e)
{
    struct kube_lease_opts lo = {.ns = o->lease_ns, .name = o->lease_name, .identity = o->identity,
                                 .duration_s = o->lease_dur, .renew_deadline_s = o->renew,
                                 .retry_s = o->retry};
    st->lease = kube_lease_new(kc, &lo, e);
    if (!st->lease) {
        fprintf(stderr, "holmes-operator run: %s\n", e->msg);
        return 1;
    }
    if (kube_lease_run(st->lease, &g_stop_flag, on_lost, NULL) != 0)
        return 0; /* stopped while waiting */
    return -1;
}

/* The controller, and the workers' coordinator, until a signal or lost leadership; the
 * metrics server stopped before the controller is freed. The exit status. */
static int run_controller(struct kube_client *kc, const struct run_opts *o, struct run_state *st,
                          struct http_server **ms, herr *e)
{
    struct controller_opts cop = {.namespace = o->ns, .coordinator_url = o->coord,
                                  .default_image = o->image, .threads = (int)o->workers,
                                  .gang = o->gang, .tls = st->ca_to_pods ? st->tls : NULL};
    struct controller *ctl = controller_new(kc, &cop, e);
    if (!ctl || controller_start(ctl, e) != 0) {
        fprintf(stderr, "holmes-operator run: %s\n", e->msg);
        controller_free(ctl);
        return 1;
    }
    __atomic_store_n(&st->ctl, ctl, __ATOMIC_RELEASE);
    if (controller_wait_synced(ctl, 60000) == 0)
        log_info("caches synced; reconciling");
    struct coord_operator *coordinator = NULL;
    if (o->coord_port) {
        struct coord_operator_opts coo = {.bind = o->coord_host[0] ? o->coord_host : NULL,
                                          .port = o->coord_port, .tls = st->tls,
                                          .status_interval_ms = (int)(o->status_interval * 1000),
                                          .metrics = st->jobs, .history = st->history};
        coordinator = coord_operator_start(ctl, &coo, e);
        if (coordinator)
            log_info("coordinator listening on %s (%s)", o->coord_addr, st->tls ? "wss" : "ws");
        else
            log_error("coordinator not started (workers cannot connect): %s", e->msg);
    }
    while (!g_stop_flag)
        clock_sleep_s(0.1);
    int status = g_lost ? 1 : 0;
    log_info("%s; shutting down", g_lost ? "lost leadership" : "signal received");
    coord_operator_stop(coordinator);
    __atomic_store_n(&st->ctl, NULL, __ATOMIC_RELEASE);
    /* Let a scrape in flight finish before freeing. */
    http_server_stop(*ms);
    *ms = NULL;
    controller_free(ctl);
    return status;
}

/* The host of a ws[s]:// URL into host ("" when there is none). */
static void url_host(const char *url, char *host, size_t n)
{
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    size_t len = strcspn(h, ":/");
    snprintf(host, n, "%.*s", (int)len, h);
}

/* The operator's certificate, when it has one (--tls-secret, or --coordinator-cert/-key): the
 * keeper started into st. 0, or -1 (said). */
static int start_tls(struct kube_client *kc, const struct run_opts *o, struct run_state *st)
{
    if (!o->tls_secret && !o->coord_cert)
        return 0;
    char host[256], list[2048];
    url_host(o->coord, host, sizeof host);
    snprintf(list, sizeof list, "%s", o->tls_names ? o->tls_names : host);
    const char *names[64];
    int n = 0;
    for (char *save, *t = strtok_r(list, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
        if (*t)
            names[n++] = t;
    if (o->tls_secret && n == 0) {
        fprintf(stderr, "holmes-operator run: --tls-names: no name for the serving certificate\n");
        return -1;
    }
    struct tls_keeper_opts ko = {.kc = kc, .secret_ns = o->lease_ns, .secret_name = o->tls_secret,
                                 .names = {names, n}, .cert_file = o->coord_cert,
                                 .key_file = o->coord_key, .ca_file = o->coord_ca,
                                 .interval_s = o->tls_interval};
    herr e = {0};
    if (!(st->tls = tls_keeper_start(&ko, &e))) {
        fprintf(stderr, "holmes-operator run: TLS: %s\n", e.msg);
        return -1;
    }
    char *ca = tls_keeper_ca(st->tls);
    st->ca_to_pods = ca != NULL;
    free(ca);
    if (strncmp(o->coord, "wss://", 6) != 0)
        log_warn("the coordinator serves wss:// but --coordinator-url %s is not wss://: workers "
                 "will not connect", o->coord);
    log_info("TLS: %s%s, names %s; the pods %s", o->tls_secret ? "Secret " : "files ",
             o->tls_secret ? o->tls_secret : o->coord_cert, o->tls_names ? o->tls_names : host,
             st->ca_to_pods ? "verify the coordinator with its CA (HOLMES_COORDINATOR_CA)"
                            : "verify the coordinator with the system's CAs");
    return 0;
}

/* A coordinator that serves many workers (and withstands a flood of connections) needs file
 * descriptors: the soft limit raised to the hard one (at most 65536), as Go programs do. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int cmd_run(int argc, char **argv)
{
    struct run_opts opts = {.lease_name = "holmes-operator", .metrics_addr = ":8080",
                            .health_addr = ":8081", .coord_addr = ":8443", .lease_dur = 15,
                            .renew = 10, .retry = 2, .qps = 50, .burst = 100, .workers = 2,
                            .status_interval = 5};
    struct run_opts *o = &opts;
    int rc = parse_opts(argc, argv, o);
    if (rc >= 0)
        return rc;
    log_set_component("operator");
    if (parse_coord_addr(o) != 0)
        return 2;

    herr e = {0};
    struct kube_config cfg;
    if (kube_config_load(&cfg, o->kubeconfig, o->context, &e) != 0) {
        fprintf(stderr, "holmes-operator run: %s\n", e.msg);
        return 1;
    }
    if (!o->lease_ns)
        o->lease_ns = cfg.namespace ? cfg.namespace : "default";
    char coord_buf[300], id_buf[300];
    if (!o->coord) {
        snprintf(coord_buf, sizeof coord_buf, "%s://holmes-operator.%s.svc:8443",
                 o->tls_secret || o->coord_cert ? "wss" : "ws", o->lease_ns);
        o->coord = coord_buf;
    }
    raise_nofile();
    if (!o->identity) {
        char host[256] = "holmes";
        gethostname(host, sizeof host - 1);
        snprintf(id_buf, sizeof id_buf, "%s_%d", host, (int)getpid());
        o->identity = id_buf;
    }
    struct kube_client_opts co = {.qps = o->qps, .burst = (int)o->burst};
    struct kube_client *kc = kube_client_new(&cfg, &co, &e);
    if (!kc) {
        fprintf(stderr, "holmes-operator run: %s\n", e.msg);
        kube_config_free(&cfg);
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    struct run_state st = {.leader_elect = o->leader_elect, .jobs = coord_metrics_new(),
                           .history = coord_history_new(0)};
    struct http_server *ms = NULL, *hs = NULL;
    if (start_tls(kc, o, &st) != 0)
        goto out;
    if (o->metrics_secure && !(st.auth = http_auth_new(kc, 0))) {
        fprintf(stderr, "holmes-operator run: out of memory\n");
        goto out;
    }
    if (strcmp(o->metrics_addr, "0") != 0 &&
        !(ms = http_server_start(o->metrics_addr, metrics_handler, &st,
                                 o->metrics_secure ? st.tls : NULL, &e))) {
        fprintf(stderr, "holmes-operator run: --metrics-addr: %s\n", e.msg);
        goto out;
    }
    /* health probes stay plain and open: the kubelet probes them */
    if (strcmp(o->health_addr, "0") != 0 && !(hs = http_server_start(o->health_addr, health_handler, &st, NULL, &e))) {
        fprintf(stderr, "holmes-operator run: --health-addr: %s\n", e.msg);
        goto out;
    }
    log_info("holmes-operator run: API %s, namespace %s, identity %s%s", cfg.server,
             o->ns ? o->ns : "(all)", o->identity, o->leader_elect ? ", leader election on" : "");
    if (o->leader_elect && (rc = elect_leader(kc, o, &st, &e)) >= 0) {
        status = rc;
        goto out;
    }
    status = run_controller(kc, o, &st, &ms, &e);
out:
    if (st.lease) {
        if (!g_lost)
            kube_lease_release(st.lease);
        kube_lease_free(st.lease);
    }
    http_server_stop(ms);
    http_server_stop(hs);
    http_auth_free(st.auth);
    tls_keeper_stop(st.tls);
    coord_metrics_free(st.jobs);
    coord_history_free(st.history);
    kube_client_free(kc);
    kube_config_free(&cfg);
    return status;
}
