/* holmes-node worker --coordinator URL ...: a worker that gets its place in the job from the
 * coordinator (operator or `holmes-operator local`). Called by cmd_worker when --coordinator
 * or HOLMES_COORDINATOR is given. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "cpu_affinity.h"
#include "engine.h"
#include "gpt.h"
#include "log.h"
#include "nic_discover.h"
#include "nic_report.h"
#include "optimizer.h"
#include "supervisor.h"
#include "worker_coord.h"
#include "worker_train.h"

void cmd_worker_coord_usage(FILE *f)
{
    fprintf(f,
        "Coordinator mode: connects to the coordinator, reports this worker's NICs, receives its\n"
        "place in the job (stage, layers, ranks, peers and the resolved TrainingJob spec),\n"
        "rendezvous with its peers and trains, streaming progress. Each option may come from the\n"
        "environment instead (the operator's pods set these): HOLMES_COORDINATOR, HOLMES_JOB (or\n"
        "HOLMES_JOB_NAME, with HOLMES_JOB_NAMESPACE), HOLMES_TOKEN (preferred over --token-file),\n"
        "HOLMES_POD (or POD_NAME, HOSTNAME), HOLMES_WORKER (or HOLMES_WORKER_INDEX), HOLMES_NODE\n"
        "(or NODE_NAME), HOLMES_EMULATE_NIC, HOLMES_DECLARED_TFLOPS, HOLMES_GPU_MEMORY_GB,\n"
        "HOLMES_CPU_AFFINITY, HOLMES_COORDINATOR_CA.\n\n"
        "  --coordinator URL   ws:// or wss:// address of the coordinator (the operator's, or\n"
        "                      holmes-operator local's)\n"
        "  --job NAME          the TrainingJob (\"namespace/name\" in a cluster)\n"
        "  --pod POD           this worker's pod name\n"
        "  --worker I          this worker's index in the job (0..workers-1)\n"
        "  --token-file FILE   the job's rendezvous token (default: HOLMES_TOKEN)\n"
        "  --ca FILE           wss:// only: PEM CA that signed the coordinator's certificate\n"
        "                      (HOLMES_COORDINATOR_CA; default: the system's CAs)\n"
        "  --node NODE         the node it runs on (reported to the planner)\n"
        "  --emulate-nic SPEC  report CLASS:FABRIC:GBPS instead of discovering NICs\n"
        "  --sysfs ROOT        discover NICs from a recorded sysfs tree\n"
        "  --progress-ms MS    interval of progress reports to the coordinator (default 500)\n"
        "  --connect-timeout S give up connecting to the coordinator after S seconds (default 60)\n"
        "  --tflops T          declare this worker's compute rate (TFLOPS per rank) for the\n"
        "                      planner instead of measuring it; a CPU worker otherwise measures\n"
        "                      its fp32 matrix-product rate at start (a 200 ms probe, its best\n"
        "                      5 ms window), the CUDA holmes-node its engine's bf16 product on\n"
        "                      each GPU (the slowest; about a second, in a child process);\n"
        "                      skipped with --simulate\n"
        "  --gpu-memory-gb G   declare the memory of each of this worker's GPUs (GB) for the\n"
        "                      planner, which refuses a plan that does not fit it and sizes\n"
        "                      the 1F1B warm-up by it; the CUDA holmes-node otherwise reads\n"
        "                      it from its GPUs (the smallest); without either the planner\n"
        "                      does not check memory (on a CPU worker: what each rank may use)\n"
        "  --memory-gbps B     declare the memory bandwidth (GB/s) of each of this worker's\n"
        "                      devices, at which the planner prices its optimizer step; a CPU\n"
        "                      worker otherwise times its own gradient norm and AdamW over 4 Mi\n"
        "                      parameters (the best of 3), the CUDA holmes-node reads its GPUs'\n"
        "                      peak (memory clock x bus width, the slowest); skipped with\n"
        "                      --simulate\n"
        "  --cpu-affinity M    none (default): the kernel places the threads; spread: every\n"
        "                      rank of the job runs on this machine, so each pins its\n"
        "                      training to its share of the cores, replicas of one stage\n"
        "                      on different cores (holmes-operator local sets spread)\n"
        "  --simulate STEPS    train nothing: report STEPS simulated steps (protocol tests and\n"
        "                      benchmarks)\n"
        "  --step-ms MS        with --simulate: milliseconds per simulated step (default 10)\n"
        "  --fail-at STEP      with --simulate: the run fails at that step\n\n"
        "SIGTERM or SIGINT mid-training: the coordinator is told, every rank stops and\n"
        "checkpoints at the next step boundary, and the worker leaves (status 143).\n\n"
        "Supervision: the command runs the worker as a child process and starts it again,\n"
        "inside the same pod, when it stops for an in-place restart or fails or dies (at once,\n"
        "then after 1 s, doubling up to 30 s; 10 failures in a row within 60 s of a start end it);\n"
        "the coordinator decides whether the gang restarts (spec.restartPolicy). SIGTERM and\n"
        "SIGINT are passed to the child. HOLMES_SUPERVISED=1 runs the worker itself, unsupervised\n"
        "(set by the supervisor in its child, and by holmes-operator local, which restarts its\n"
        "workers itself).\n\n"
        "Exit status (coordinator mode): 0 finished, 1 failed (the job failed, or the worker kept\n"
        "failing), 2 usage, 143 left on SIGTERM (after checkpointing; before training, at once,\n"
        "also while still connecting). Unsupervised, also: 75\n"
        "stopped for an in-place restart (start it again), 78 failed for good (do not start it\n"
        "again).\n");
}

/* SIGTERM (eviction, drain, preemption, Ctrl-C): leave after checkpointing at the next step. */
static volatile sig_atomic_t terminate_requested;
static void on_terminate(int sig)
{
    (void)sig;
    terminate_requested = 1;
}

static const char *env2(const char *a, const char *b)
{
    const char *v = getenv(a);
    if ((!v || !v[0]) && b)
        v = getenv(b);
    return v && v[0] ? v : NULL;
}

int cmd_worker_coord_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--coordinator") == 0)
            return 1;
    return env2("HOLMES_COORDINATOR", NULL) != NULL;
}

/* A declared figure (--tflops / HOLMES_DECLARED_TFLOPS, --gpu-memory-gb / HOLMES_GPU_MEMORY_GB,
 * --memory-gbps / HOLMES_MEMORY_GBPS):
 * a number in (0, 1e6]; -1 after saying so, naming the flag and the variable. */
static int parse_figure(const char *flag, const char *env, const char *what, const char *s,
                        double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!s[0] || *end || !(v > 0) || v > 1e6) {
        fprintf(stderr, "holmes-node worker: %s (or %s): \"%s\" must be %s in (0, 1000000]\n",
                flag, env, s, what);
        return -1;
    }
    *out = v;
    return 0;
}

static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "holmes-node worker: --token-file %s: cannot open\n", path);
        return NULL;
    }
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    return strdup(buf);
}

/* The pod's main process: this same command, run as a supervised child (supervisor.h). */
static int supervise(int argc, char **argv)
{
    char **cargv = calloc((size_t)argc + 2, sizeof *cargv);
    if (!cargv) {
        fprintf(stderr, "holmes-node worker: out of memory\n");
        return 1;
    }
    cargv[0] = (char *)"holmes-node";
    for (int i = 0; i < argc; i++)
        cargv[i + 1] = argv[i];
    struct supervisor_opts so = {.exe = "/proc/self/exe", .argv = cargv};
    herr e = {0};
    int rc = supervisor_run(&so, &e);
    free(cargv);
    if (rc < 0) {
        log_error("%s", e.msg);
        return 1;
    }
    return rc;
}

/* The command line and the environment, read and checked. */
struct args {
    const char *url, *job, *pod, *node, *emulate, *sysfs, *ca, *token_file;
    long progress_ms, connect_s, sim_steps, step_ms, fail_at, worker;
    double declared;               /* --tflops; 0 = measure */
    double gpu_memory_gb;          /* --gpu-memory-gb; 0 = read from the GPUs (CUDA build) */
    double memory_gbps;            /* --memory-gbps; 0 = measure (CPU) or read (GPUs) */
    enum cpu_affinity affinity;
    char jobkey[160];              /* "namespace/name" in a cluster */
};

/* Flags over the environment (the operator's pods set HOLMES_JOB_NAME, HOLMES_JOB_NAMESPACE,
 * HOLMES_WORKER_INDEX, HOLMES_COORDINATOR and HOLMES_TOKEN; the pod's hostname is its name).
 * 0, or 2 (usage) after saying why. */
static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof *a);
    a->url = env2("HOLMES_COORDINATOR", NULL);
    a->job = env2("HOLMES_JOB", "HOLMES_JOB_NAME");
    a->pod = env2("HOLMES_POD", "POD_NAME");
    if (!a->pod)
        a->pod = env2("HOSTNAME", NULL);
    a->node = env2("HOLMES_NODE", "NODE_NAME");
    a->emulate = env2("HOLMES_EMULATE_NIC", NULL);
    a->ca = env2("HOLMES_COORDINATOR_CA", NULL);
    const char *worker_s = env2("HOLMES_WORKER", "HOLMES_WORKER_INDEX");
    const char *tflops_s = env2("HOLMES_DECLARED_TFLOPS", NULL);
    const char *gpu_mem_s = env2("HOLMES_GPU_MEMORY_GB", NULL);
    const char *membw_s = env2("HOLMES_MEMORY_GBPS", NULL);
    const char *affinity_s = env2("HOLMES_CPU_AFFINITY", NULL);
    a->progress_ms = 500, a->connect_s = 60, a->sim_steps = -1, a->step_ms = 10, a->worker = -1;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--coordinator") == 0 && v) a->url = v;
        else if (strcmp(o, "--job") == 0 && v) a->job = v;
        else if (strcmp(o, "--pod") == 0 && v) a->pod = v;
        else if (strcmp(o, "--node") == 0 && v) a->node = v;
        else if (strcmp(o, "--worker") == 0 && v) worker_s = v;
        else if (strcmp(o, "--token-file") == 0 && v) a->token_file = v;
        else if (strcmp(o, "--ca") == 0 && v) a->ca = v;
        else if (strcmp(o, "--emulate-nic") == 0 && v) a->emulate = v;
        else if (strcmp(o, "--sysfs") == 0 && v) a->sysfs = v;
        else if (strcmp(o, "--tflops") == 0 && v) tflops_s = v;
        else if (strcmp(o, "--gpu-memory-gb") == 0 && v) gpu_mem_s = v;
        else if (strcmp(o, "--memory-gbps") == 0 && v) membw_s = v;
        else if (strcmp(o, "--cpu-affinity") == 0 && v) affinity_s = v;
        else if (strcmp(o, "--progress-ms") == 0 && v) {
            if (cli_long("holmes-node worker", o, v, 1, 600000, &a->progress_ms)) return 2;
        } else if (strcmp(o, "--connect-timeout") == 0 && v) {
            if (cli_long("holmes-node worker", o, v, 1, 86400, &a->connect_s)) return 2;
        } else if (strcmp(o, "--simulate") == 0 && v) {
            if (cli_long("holmes-node worker", o, v, 0, 1L << 40, &a->sim_steps)) return 2;
        } else if (strcmp(o, "--step-ms") == 0 && v) {
            if (cli_long("holmes-node worker", o, v, 0, 600000, &a->step_ms)) return 2;
        } else if (strcmp(o, "--fail-at") == 0 && v) {
            if (cli_long("holmes-node worker", o, v, 0, 1L << 40, &a->fail_at)) return 2;
        } else {
            fprintf(stderr, "holmes-node worker: unknown or incomplete option %s (see --help)\n", o);
            return 2;
        }
    }
    if (!a->url || !a->job || !a->pod || !worker_s) {
        fprintf(stderr, "holmes-node worker: --coordinator, --job, --pod and --worker are required "
                        "(or HOLMES_COORDINATOR, HOLMES_JOB, HOLMES_POD, HOLMES_WORKER)\n");
        return 2;
    }
    if (cli_long("holmes-node worker", "--worker", worker_s, 0, 65535, &a->worker))
        return 2;
    if (tflops_s && parse_figure("--tflops", "HOLMES_DECLARED_TFLOPS", "a number", tflops_s,
                                 &a->declared))
        return 2;
    if (gpu_mem_s && parse_figure("--gpu-memory-gb", "HOLMES_GPU_MEMORY_GB", "a number of GB",
                                  gpu_mem_s, &a->gpu_memory_gb))
        return 2;
    if (membw_s && parse_figure("--memory-gbps", "HOLMES_MEMORY_GBPS", "a number of GB/s",
                                membw_s, &a->memory_gbps))
        return 2;
    a->affinity = CPU_AFFINITY_NONE;
    if (affinity_s && cpu_affinity_parse(affinity_s, &a->affinity)) {
        fprintf(stderr, "holmes-node worker: --cpu-affinity (or HOLMES_CPU_AFFINITY): \"%s\" must "
                        "be none or spread\n", affinity_s);
        return 2;
    }
    const char *ns = env2("HOLMES_JOB_NAMESPACE", NULL);
    if (ns && !strchr(a->job, '/')) { /* jobs in a cluster are "namespace/name" */
        snprintf(a->jobkey, sizeof a->jobkey, "%s/%s", ns, a->job);
        a->job = a->jobkey;
    }
    return 0;
}

/* How long the GPU probe may take (a CUDA context, cuBLASLt's choice of algorithm and ten
 * products on each GPU, then an 85 M-parameter stage's norm and AdamW: a few seconds) before the
 * worker goes on without it. */
#define GPU_PROBE_TIMEOUT_S 60.0

/* The memory bandwidth the planner prices this worker's optimizer step at: declared, else the
 * engine's own norm and AdamW timed (the CPU engine's here; the GPUs' in the probe's child:
 * gpu_gbps, 0 when it measured none, gpu_why saying why), else its GPUs' peak read from the
 * device. */
static void describe_memory_bandwidth(const struct args *a, struct worker_coord_options *o,
                                      double gpu_gbps, const char *gpu_why)
{
    herr e = {0};
    o->memory_gbps = a->memory_gbps;
    if (a->memory_gbps > 0) {
        log_info("memory: %g GB/s a device (declared)", a->memory_gbps);
    } else if (o->gpus == 0 && a->sim_steps < 0) {
        double g = optimizer_probe_gbps(OPTIMIZER_PROBE_PARAMS, OPTIMIZER_PROBE_STEPS, &e);
        if (g > 0) {
            o->memory_gbps = g;
            o->memory_gbps_measured = 1;
            log_info("memory: %.4g GB/s (measured: the optimizer's norm and AdamW, %d threads)",
                     g, omp_get_max_threads());
        } else {
            log_warn("%s; the planner will assume its default", e.msg);
        }
    } else if (o->gpus > 0 && a->sim_steps < 0 && gpu_gbps > 0) {
        o->memory_gbps = gpu_gbps;
        o->memory_gbps_measured = 1;
        log_info("memory: %.4g GB/s a GPU (measured: the engine's norm and AdamW, the slowest of "
                 "%d)", gpu_gbps, o->gpus);
    } else if (o->gpus > 0 && a->sim_steps < 0) {
        double g = 0;
        if (gpu_why && *gpu_why)
            log_warn("%s; the GPUs' peak instead", gpu_why);
        if (engine_gpu_memory_gbps(o->gpus, &g, &e) == 0) {
            o->memory_gbps = g;
            o->memory_gbps_measured = 1;
            log_info("memory: %.4g GB/s a GPU (the peak read from the device, the slowest of %d)",
                     g, o->gpus);
        } else {
            log_warn("%s; the planner will assume its default", e.msg);
        }
    }
}

/* This worker's NIC summary and GPUs (discovered, from a sysfs tree, or emulated), and its
 * compute rate: declared, else measured (the CPU engine's product on a CPU worker, the CUDA
 * engine's on each GPU). WORKER_EXIT_FINAL when no NIC. */
static int describe_worker(const struct args *a, struct worker_coord_options *o)
{
    herr e = {0};
    struct nic_report rep;
    nic_report_init(&rep);
    int rc;
    if (a->emulate) {
        rc = nic_report_emulate(a->emulate, &rep, &e);
    } else {
        struct nic_discover_opts dopt = {.sysfs_root = a->sysfs};
        rc = nic_discover(&dopt, &rep, &e);
    }
    if (rc || !rep.have_summary) {
        fprintf(stderr, "holmes-node worker: NIC discovery: %s\n",
                rc ? e.msg : "no usable NIC found");
        nic_report_free(&rep);
        return WORKER_EXIT_FINAL; /* this node's NICs will not change on a restart */
    }
    o->nic = rep.summary;
    o->gpus = rep.ngpus;
    nic_report_free(&rep);
    o->tflops = a->declared;
    /* GPUs: the CUDA engine's own matrix product, norm and AdamW on each, in a process of its
     * own, for whichever of the compute and memory rates is not declared */
    struct engine_gpu_rates gr;
    memset(&gr, 0, sizeof gr);
    int probed = -1;
    herr pe = {0};
    if (o->gpus > 0 && a->sim_steps < 0 && (a->declared <= 0 || a->memory_gbps <= 0))
        probed = engine_gpu_probe(o->gpus, GPU_PROBE_TIMEOUT_S, &gr, &pe);
    if (probed != 0 && pe.msg[0])
        snprintf(gr.gbps_why, sizeof gr.gbps_why, "%s", pe.msg);
    if (a->declared > 0) {
        log_info("compute: %g TFLOPS per rank (declared)", a->declared);
    } else if (o->gpus == 0 && a->sim_steps < 0) {
        /* The engine's own matrix product, with the threads it will use. */
        double t = gpt_gemm_probe_tflops(256, 200, &e);
        if (t > 0) {
            o->tflops = t;
            o->tflops_measured = 1;
            log_info("compute: %.4g TFLOPS fp32 (measured, %d threads)", t, omp_get_max_threads());
        } else {
            log_warn("compute probe: %s; the planner will assume a default", e.msg);
        }
    } else if (o->gpus > 0 && a->sim_steps < 0) {
        if (probed == 0) {
            o->tflops = gr.tflops;
            o->tflops_measured = 1;
            log_info("compute: %.4g TFLOPS bf16 a GPU (measured: the engine's matrix product, the "
                     "slowest of %d)", gr.tflops, o->gpus);
        } else {
            log_warn("%s; the planner will assume a default", pe.msg);
        }
    }
    o->gpu_memory_gb = a->gpu_memory_gb;
    if (a->gpu_memory_gb > 0) {
        log_info("GPU memory: %g GB a GPU (declared)", a->gpu_memory_gb);
    } else if (o->gpus > 0 && a->sim_steps < 0) {
        double bytes = 0;
        if (engine_gpu_memory(o->gpus, &bytes, &e) == 0) {
            o->gpu_memory_gb = bytes / 1e9;
            o->gpu_memory_measured = 1;
            log_info("GPU memory: %.1f GB a GPU (the smallest of %d)", o->gpu_memory_gb, o->gpus);
        } else {
            log_warn("%s; the planner will not check memory", e.msg);
        }
    }
    describe_memory_bandwidth(a, o, gr.gbps, gr.gbps_why);
    return 0;
}

/* Where peers reach this worker: HOLMES_ADVERTISE_HOST, the pod IP, else loopback when the
 * coordinator is local, else the pod's DNS name. */
static void advertise_host(const char *url, char *host, size_t cap)
{
    snprintf(host, cap, "127.0.0.1");
    const char *adv = env2("HOLMES_ADVERTISE_HOST", "POD_IP");
    if (adv) {
        snprintf(host, cap, "%s", adv);
    } else if (!strstr(url, "127.0.0.1") && !strstr(url, "localhost")) {
        /* In a pod: hostname is the pod name and the job's headless Service its subdomain,
         * so "<pod>.<job>" resolves through the namespace's search domain. */
        char hn[128] = "";
        gethostname(hn, sizeof hn - 1);
        const char *sub = env2("HOLMES_JOB_NAME", NULL);
        snprintf(host, cap, "%s%s%s", hn, sub ? "." : "", sub ? sub : "");
    }
}

/* The process's exit status for worker_coord_run's result, said in the log. */
static int exit_status(int rc, const herr *e)
{
    switch (rc) {
    case 0:
        log_info("finished");
        return 0;
    case WORKER_EXIT_RESTART:
        log_info("stopped for an in-place restart");
        return rc;
    case WORKER_EXIT_TERMINATED:
        log_info("%s", e->msg);
        return rc;
    case WORKER_EXIT_FINAL:
        log_error("%s", e->msg);
        return rc;
    default:
        log_error("%s", e->msg);
        return 1;
    }
}

int cmd_worker_coord(int argc, char **argv)
{
    struct args a; /* (--help: cmd_worker answered it) */
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    char *token = a.token_file ? read_token(a.token_file) : NULL;
    if (a.token_file && !token)
        return 2;
    char comp[64];
    snprintf(comp, sizeof comp, "worker-%ld", a.worker);
    log_set_component(comp);
    if (!supervisor_is_child()) {
        free(token);
        return supervise(argc, argv);
    }
    struct worker_coord_options o;
    memset(&o, 0, sizeof o);
    o.url = a.url;
    o.ca_file = a.ca;
    o.job = a.job;
    o.token = token ? token : env2("HOLMES_TOKEN", NULL);
    o.pod = a.pod;
    o.node = a.node ? a.node : "";
    o.worker = (int)a.worker;
    o.progress_interval_ms = (int)a.progress_ms;
    o.connect_timeout_ms = (int)(a.connect_s * 1000);
    o.terminate = &terminate_requested;
    struct sigaction sa = {.sa_handler = on_terminate};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        perror("holmes-node worker: sigaction");
        free(token);
        return 1;
    }
    if ((rc = describe_worker(&a, &o)) != 0) {
        free(token);
        return rc;
    }
    herr e = {0};
    struct worker_sim sim = {.steps = a.sim_steps, .step_ms = (int)a.step_ms,
                             .fail_at_step = a.fail_at};
    struct worker_runner runner = worker_sim_runner;
    runner.user = &sim;
    struct worker_train *wt = NULL;
    if (a.sim_steps < 0) {
        char host[256];
        advertise_host(a.url, host, sizeof host);
        if (worker_train_create(&wt, host, a.affinity, &e)) {
            fprintf(stderr, "holmes-node worker: %s\n", e.msg);
            free(token);
            return 1;
        }
        runner = worker_train_runner(wt);
    }
    log_info("connecting to %s as %s (worker %ld of job %s, NIC %s %s %g Gb/s)", a.url, a.pod,
             a.worker, a.job, nic_class_name(o.nic.cls), o.nic.fabric, o.nic.gbps);
    rc = worker_coord_run(&o, &runner, &e);
    worker_train_free(wt);
    free(token);
    return exit_status(rc, &e);
}
