/* Writes the fuzzers' seed corpora (tests/fuzz/seeds/): real protocol messages, made by the
 * encoders both sides use, with a real plan (the coordinator's plan hook on examples/local-tiny.yaml
 * and examples/local-gpus.yaml) in the assignments; the manifests, cluster and calibration files of
 * examples/ and tests/fixtures/planner (manifest/); checkpoints, an llm.c file and data files that
 * ckpt_write, model_export_llmc and the shard layout make (train_files/); request heads to the
 * operator's HTTP server (http_request/); for each recorded sysfs tree, records that set its
 * rates, link layers, states, GIDs and NUMA nodes to their own values (nic_sysfs/). `make
 * fuzz-seeds` runs
 * it; the seeds are committed. The Kubernetes seeds (kube_decode/) come from a real API server
 * (tests/fuzz/capture_kube_seeds.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "choice_eval.h"
#include "fuzz_nic_sysfs.h"
#include "coord_plan.h"
#include "dataloader.h"
#include "model_export.h"
#include "protocol.h"
#include "trainingjob.h"
#include "yaml_json.h"

static const char *dir;

/* Writes text (taken), and after a NUL byte the text `then` when given (not taken). */
static void put2(const char *target, const char *name, char *text, const char *then)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s.json", dir, target, name);
    FILE *f = text ? fopen(path, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && (!then || (fputc(0, f) == 0 && fputs(then, f) >= 0));
    if (!f || fclose(f) != 0 || !ok) {
        fprintf(stderr, "fuzz_seeds: %s: cannot write\n", path);
        exit(1);
    }
    free(text);
}

static void put(const char *target, const char *name, char *text)
{
    put2(target, name, text, NULL);
}

static struct proto_hello hello(const char *job, int worker, int gpus, enum nic_class cls,
                                const char *fabric, double gbps)
{
    struct proto_hello h;
    memset(&h, 0, sizeof h);
    snprintf(h.job, sizeof h.job, "%s", job);
    snprintf(h.token, sizeof h.token, "0123456789abcdef0123456789abcdef0123456789abcdef");
    snprintf(h.pod, sizeof h.pod, "%s-worker-%d", job, worker);
    snprintf(h.node, sizeof h.node, "node-%d", worker);
    h.worker = worker;
    h.gpus = gpus;
    h.nic.cls = cls;
    snprintf(h.nic.fabric, sizeof h.nic.fabric, "%s", fabric);
    h.nic.gbps = gbps;
    h.nic.gid_index = cls == NIC_ROCE ? 3 : -1;
    if (cls != NIC_ETHERNET)
        snprintf(h.nic.ib_hca, sizeof h.nic.ib_hca, "mlx5_%d:1", worker);
    snprintf(h.nic.socket_ifname, sizeof h.nic.socket_ifname, "eth0");
    return h;
}

/* Writes head[nh] then data[n] as target/name (binary). */
static void put_bin(const char *target, const char *name, const void *head, size_t nh,
                    const void *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, target, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(head, 1, nh, f) == nh && (!n || fwrite(data, 1, n, f) == n);
    if (!f || fclose(f) != 0 || !ok) {
        fprintf(stderr, "fuzz_seeds: %s: cannot write\n", path);
        exit(1);
    }
}

static char *slurp(const char *path, size_t *n)
{
    herr e = {0};
    char *t = read_file_limited(path, 1u << 24, n, &e);
    if (!t) {
        fprintf(stderr, "fuzz_seeds: %s\n", e.msg);
        exit(1);
    }
    return t;
}

/* fuzz_manifest: a kind byte (0 job, 1 cluster, 2 calibration), then the file as it is. */
static void manifest_seed(int kind, const char *path, const char *name)
{
    size_t n;
    char *t = slurp(path, &n);
    unsigned char k = (unsigned char)kind;
    put_bin("manifest", name, &k, 1, t, n);
    free(t);
}

/* fuzz_manifest's kubeconfig: what tests/k8s/envtest.bash writes, a token user and a client
 * certificate's, the CA inline (base64 of a PEM's first line) */
static const char KUBECONFIG_SEED[] =
    "apiVersion: v1\nkind: Config\ncurrent-context: envtest\n"
    "clusters:\n"
    "- name: envtest\n  cluster:\n    server: https://127.0.0.1:6443/\n"
    "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n"
    "contexts:\n"
    "- name: envtest\n  context: {cluster: envtest, user: admin, namespace: team-a}\n"
    "- name: other\n  context: {cluster: envtest, user: robot}\n"
    "users:\n"
    "- name: admin\n  user:\n    client-certificate: admin.crt\n    client-key: admin.key\n"
    "- name: robot\n  user: {token: abc.def, tokenFile: token}\n";

/* fuzz_train_files' checkpoints hold this model (its TINY) */
static const struct gpt_config SEED_MODEL = {.layers = 2, .channels = 8, .heads = 2, .vocab = 16,
                                             .padded_vocab = 16, .max_seq = 8};

/* Stage [first, last) of SEED_MODEL written by ckpt_write (moments or not) into tmp; its bytes. */
static char *seed_ckpt(const char *tmp, int first, int last, int moments, size_t *len)
{
    size_t n = 0;
    struct gpt_stage *s = NULL;
    herr e = {0};
    if (gpt_stage_create(&s, &SEED_MODEL, first, last, 1, 1, 1, &e) != 0) {
        fprintf(stderr, "fuzz_seeds: %s\n", e.msg);
        exit(1);
    }
    n = gpt_stage_num_params(s);
    float *mv = calloc(2 * n, sizeof *mv);
    for (size_t i = 0; mv && i < 2 * n; i++)
        mv[i] = (float)(i % 7) * 1e-3f;
    struct ckpt_meta meta = {.c = SEED_MODEL, .first = first, .last = last, .step = 1,
                             .data_pos = 3, .rng = {1, 2, 3, 4}, .nparams = n,
                             .has_moments = moments};
    char path[512];
    if (!mv || ckpt_write(tmp, &meta, gpt_stage_params(s), moments ? mv : NULL,
                          moments ? mv + n : NULL, 1, path, sizeof path, &e) != 0) {
        fprintf(stderr, "fuzz_seeds: checkpoint: %s\n", e.msg);
        exit(1);
    }
    free(mv);
    gpt_stage_free(s);
    char *t = slurp(path, len);
    unlink(path);
    return t;
}

static void train_files_seeds(void)
{
    char tmp[] = "/tmp/holmes-fuzz-seeds.XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("fuzz_seeds: mkdtemp");
        exit(1);
    }
    size_t n, n2;
    unsigned char head[6] = {0, 0, 0, 0, 0, 0};
    char *t = seed_ckpt(tmp, 0, 2, 1, &n);
    put_bin("train_files", "ckpt-whole-moments", head, 2, t, n);
    free(t);
    t = seed_ckpt(tmp, 0, 2, 0, &n);
    put_bin("train_files", "ckpt-whole-params", head, 2, t, n);
    free(t);
    /* two files: their lengths' first part in bytes 2-3 (the first file's length, mod the rest) */
    t = seed_ckpt(tmp, 0, 1, 1, &n);
    char *t2 = seed_ckpt(tmp, 1, 2, 1, &n2);
    char *both = malloc(n + n2);
    if (!both)
        exit(1);
    memcpy(both, t, n);
    memcpy(both + n, t2, n2);
    head[1] = 4;
    head[2] = (unsigned char)(n & 0xff);
    head[3] = (unsigned char)(n >> 8);
    put_bin("train_files", "ckpt-two-stages", head, 4, both, n + n2);
    free(both);
    free(t);
    free(t2);

    /* llm.c: the tiny model as export writes it */
    struct gpt_stage *s = NULL;
    herr e = {0};
    char path[600];
    snprintf(path, sizeof path, "%s/gpt2.bin", tmp);
    if (gpt_stage_create(&s, &SEED_MODEL, 0, SEED_MODEL.layers, 1, 1, 1, &e) != 0 ||
        model_export_llmc(path, &SEED_MODEL, gpt_stage_params(s), &e) != 0) {
        fprintf(stderr, "fuzz_seeds: llm.c file: %s\n", e.msg);
        exit(1);
    }
    t = slurp(path, &n);
    unlink(path);
    /* safetensors: the same model as export writes it */
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if (model_export_safetensors(path, &SEED_MODEL, gpt_stage_params(s), &e) != 0) {
        fprintf(stderr, "fuzz_seeds: safetensors file: %s\n", e.msg);
        exit(1);
    }
    gpt_stage_free(s);
    size_t sn;
    char *st = slurp(path, &sn);
    unlink(path);
    head[0] = 6;
    put_bin("train_files", "safetensors-tiny", head, 2, st, sn);
    free(st);
    head[0] = 1;
    head[1] = 0;
    put_bin("train_files", "llmc-tiny", head, 2, t, n);
    free(t);

    /* data: B 2, T 8, 2 ranks (rank 1), vocabulary 16 (shard) or 256 (text) */
    int32_t hdr[256] = {DATALOADER_SHARD_MAGIC, 1, 200};
    uint16_t tok[200];
    for (int i = 0; i < 200; i++)
        tok[i] = (uint16_t)((i * 7) % 16);
    unsigned char shard[1024 + sizeof tok];
    memcpy(shard, hdr, 1024);
    memcpy(shard + 1024, tok, sizeof tok);
    unsigned char dhead[6] = {2, 1, 1, 7, 0x11, 0x00}; /* B 2, T 8, world 2 rank 1, vocab 16 */
    put_bin("train_files", "data-shard", dhead, 6, shard, sizeof shard);
    dhead[1] = 2;   /* text, global epochs */
    dhead[5] = 0x10; /* seed 16, vocabulary 256 */
    t = slurp("examples/data/corpus.txt", &n);
    put_bin("train_files", "data-text", dhead, 6, t, n > 4096 ? 4096 : n);
    free(t);

    const char names[] = "stage-0-2-step-000000001.ckpt\nstage-0-1-step-000000002.ckpt\n"
                         "stage-1-2-step-000000002.ckpt\nstage-0-2-step-000000010.ckpt.tmp\n"
                         "latest-step\nstage-0-2-step-1.ckpt";
    head[0] = 3;
    put_bin("train_files", "names", head, 2, names, sizeof names - 1);

    /* text for the BPE encoder: scripts, digits, whitespace runs, a contraction */
    static const char bpe_text[] = "The thing's 12 \xc3\xa9t\xc3\xa9, \xe6\x97\xa5\xe6\x9c\xac!!\n\n"
                                   "  abc xyz    <|endoftext|>\n\xd9\xa3 \xf0\x9f\x98\x80\t end\n";
    head[0] = 5;
    put_bin("train_files", "bpe-text", head, 2, bpe_text, sizeof bpe_text - 1);

    /* llm.c's tokenizer file: version 2, 4 tokens, the last the end of text */
    unsigned char tk[1024 + 32];
    uint32_t th[256] = {20240328u, 2, 4, 3};
    memcpy(tk, th, sizeof th);
    size_t tn = sizeof th;
    static const char *const pieces[] = {"a", " the", "\n", "<|endoftext|>"};
    for (int i = 0; i < 4; i++) {
        tk[tn++] = (unsigned char)strlen(pieces[i]);
        memcpy(tk + tn, pieces[i], strlen(pieces[i]));
        tn += strlen(pieces[i]);
    }
    head[0] = 4;
    put_bin("train_files", "tokenizer", head, 2, tk, tn);
    /* transformers' vocab.json (bytes_to_unicode's characters: \u0120 a space, \u010a a newline) */
    static const char vj[] = "{\"a\": 0, \"\\u0120the\": 1, \"\\u010a\": 2, \"<|endoftext|>\": 3}";
    put_bin("train_files", "tokenizer-vocab-json", head, 2, vj, sizeof vj - 1);

    /* multiple choice: HellaSwag's JSON lines (BPE, flag 1), and llm.c's eval file of two
     * examples (write_evalfile's layout: a context of 3 and 4 completions; a context of 9, the
     * model's 8 positions exceeded, and 2 completions) */
    static const char hs[] = "{\"ctx\": \"The thing's 12\", \"endings\": [\"abc\", \"xyz  end\", "
                             "\"\u00e9t\u00e9\", \"the\"], \"label\": 1}\n"
                             "{\"ctx\": \"abc\", \"endings\": [\"a\", \"b\"], \"label\": \"0\"}\n";
    head[0] = 7;
    head[1] = 1;
    put_bin("train_files", "choices-jsonl", head, 2, hs, sizeof hs - 1);
    static const uint16_t ev[] = {65535, 40, 0, 2, 4, 3, 1, 2, 3, 2, 4, 5, 1, 6, 3, 7, 8, 9, 1, 10,
                                  65535, 40, 1, 1, 2, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 11, 2, 12, 13};
    unsigned char evf[1024 + sizeof ev];
    int32_t eh[256] = {CHOICE_EVAL_MAGIC, 1, 2, 40};
    memcpy(evf, eh, sizeof eh);
    memcpy(evf + sizeof eh, ev, sizeof ev);
    head[1] = 0;
    put_bin("train_files", "choices-llmc", head, 2, evf, sizeof evf);
    rmdir(tmp);
}

/* Plans the job for its workers as the coordinator does; writes assign and start messages. */
static void plan_seeds(const char *yaml, const char *tag)
{
    struct tj_job *jobs = NULL;
    int n = 0;
    struct tj_errors te;
    memset(&te, 0, sizeof te);
    if (tj_load_file(yaml, &jobs, &n, &te) != 0 || n < 1) {
        fprintf(stderr, "fuzz_seeds: %s: %s\n", yaml, te.count ? te.msg[0] : "no job");
        exit(1);
    }
    struct tj_job *j = &jobs[0];
    int nw = j->spec.workers;
    struct coord_worker *w = calloc((size_t)nw, sizeof *w);
    struct plan_assignment *a = calloc((size_t)nw, sizeof *a);
    for (int i = 0; i < nw; i++) {
        struct proto_hello h = hello(j->name, i, j->spec.gpus_per_worker,
                                     i < nw / 2 ? NIC_INFINIBAND : NIC_ROCE,
                                     i < nw / 2 ? "ib-a" : "roce-b", i < nw / 2 ? 200 : 100);
        w[i].index = i;
        w[i].connected = 1;
        snprintf(w[i].pod, sizeof w[i].pod, "%s", h.pod);
        w[i].gpus = h.gpus;
        w[i].nic = h.nic;
        w[i].rank = -1;
        char name[64];
        snprintf(name, sizeof name, "hello-%s-%d", tag, i);
        put("coord_message", name, proto_hello_encode(&h, NULL));
    }
    struct coord_plan cp = {.job = j};
    herr e = {0};
    if (coord_plan_hook(&cp, w, nw, a, &e) != 0) {
        fprintf(stderr, "fuzz_seeds: plan %s: %s\n", yaml, e.msg);
        exit(1);
    }
    struct proto_peer *peers = calloc((size_t)nw * PLAN_MAX_LOCAL_RANKS, sizeof *peers);
    char *assign[64] = {0};
    int rank = 0;
    for (int i = 0; i < nw; i++) {
        char name[64];
        snprintf(name, sizeof name, "assign-%s-%d", tag, i);
        assign[i % 64] = proto_assign_encode(0, &a[i], NULL);
        put2("worker_message", name, assign[i % 64] ? strdup(assign[i % 64]) : NULL, NULL);
        int nr = a[i].nranks > 0 ? a[i].nranks : 1;
        cJSON *eps = cJSON_CreateArray();
        for (int k = 0; k < nr; k++, rank++) {
            char ep[PROTO_ENDPOINT_MAX];
            snprintf(ep, sizeof ep, "%s-worker-%d.%s:%d", j->name, i, j->name, 29500 + k);
            peers[rank].rank = rank;
            snprintf(peers[rank].endpoint, sizeof peers[rank].endpoint, "%s", ep);
            cJSON_AddItemToArray(eps, cJSON_CreateString(ep));
        }
        cJSON *ids = cJSON_CreateObject();
        cJSON_AddStringToObject(ids, "nccl-dp-0", "AgAXeP8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
        snprintf(name, sizeof name, "rendezvous-%s-%d", tag, i);
        const cJSON *first = cJSON_GetArrayItem(eps, 0);
        put("coord_message", name, proto_rendezvous_encode(0, rank - nr, first->valuestring,
                                                           nr > 1 ? eps : NULL, ids, NULL));
        cJSON_Delete(eps);
        cJSON_Delete(ids);
        plan_assignment_free(&a[i]);
    }
    char name[64];
    snprintf(name, sizeof name, "start-%s", tag);
    char *start = proto_start_encode(0, 0, peers, rank, NULL);
    for (int i = 0; i < nw && i < 64; i++) { /* an assignment, then the start it is read with */
        snprintf(name, sizeof name, "assign-start-%s-%d", tag, i);
        put2("worker_message", name, assign[i], start);
    }
    snprintf(name, sizeof name, "start-%s", tag);
    put("worker_message", name, start);
    snprintf(name, sizeof name, "start-resume-%s", tag);
    put("worker_message", name, proto_start_encode(2, 150, peers, rank, NULL));
    free(peers);
    coord_plan_free(&cp);
    free(a);
    free(w);
    for (int i = 0; i < n; i++)
        tj_job_free(&jobs[i]);
    free(jobs);
}

/* fuzz_nic_sysfs: per recorded tree, the case byte alone, and the case with records {0, entry,
 * length, bytes} that set the entries the discovery decodes most (a port's rate, link layer and
 * state, GIDs and their types, NUMA nodes, speeds, MTUs) to their own content: starting points
 * the fuzzer changes byte by byte. */
static void nic_sysfs_seeds(void)
{
    static const char *const ends[] = {"/rate", "/link_layer", "/state", "/phys_state", "/gids/0",
                                       "/gids/1", "/gids/3", "/gid_attrs/types/3", "/numa_node",
                                       "/speed", "/mtu", "/operstate", "/type", "ip-addr.txt"};
    for (int c = 0; c < FUZZ_SYSFS_NCASES; c++) {
        char root[256], name[64];
        snprintf(root, sizeof root, "tests/fixtures/sysfs/%s/sys", FUZZ_SYSFS_CASES[c]);
        struct fuzz_sysfs_list l;
        if (fuzz_sysfs_entries(root, &l) == 0) {
            fprintf(stderr, "fuzz_seeds: %s: no entries\n", root);
            exit(1);
        }
        unsigned char buf[8192], cb = (unsigned char)c;
        snprintf(name, sizeof name, "%s-as-recorded", FUZZ_SYSFS_CASES[c]);
        put_bin("nic_sysfs", name, &cb, 1, NULL, 0);
        size_t n = 1, records = 0;
        buf[0] = cb;
        for (int i = 0; i < l.n && records < 32; i++) {
            size_t len = strlen(l.rel[i]);
            int wanted = 0;
            for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
                size_t m = strlen(ends[k]);
                wanted |= len >= m && !strcmp(l.rel[i] + len - m, ends[k]);
            }
            char path[1200], text[256];
            snprintf(path, sizeof path, "%s/%s", root, l.rel[i]);
            struct stat st;
            if (!wanted || lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            FILE *f = fopen(path, "rb");
            size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
            if (f)
                fclose(f);
            if (n + 4 + got > sizeof buf)
                break;
            buf[n] = 0;
            buf[n + 1] = (unsigned char)(i & 0xff);
            buf[n + 2] = (unsigned char)(i >> 8);
            buf[n + 3] = (unsigned char)got;
            memcpy(buf + n + 4, text, got);
            n += 4 + got;
            records++;
        }
        snprintf(name, sizeof name, "%s-decoded-values", FUZZ_SYSFS_CASES[c]);
        put_bin("nic_sysfs", name, buf, n, NULL, 0);
        for (int i = 0; i < l.n; i++)
            free(l.rel[i]);
        free(l.rel);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR (run from the repository root)\n");
        return 2;
    }
    dir = argv[1];
    mkdir(dir, 0755);
    plan_seeds("examples/local-tiny.yaml", "tiny");
    plan_seeds("examples/local-gpus.yaml", "gpus");
    manifest_seed(0, "examples/local-tiny.yaml", "local-tiny");
    manifest_seed(0, "examples/local-gpus.yaml", "local-gpus");
    manifest_seed(0, "examples/gpt2-1.5b-ib-roce.yaml", "gpt2-1.5b-ib-roce");
    manifest_seed(0, "examples/gpt2-350m-three-fabrics.yaml", "gpt2-350m-three-fabrics");
    manifest_seed(1, "examples/clusters/three-fabrics.yaml", "cluster-three-fabrics");
    manifest_seed(1, "examples/clusters/mixed-generations.yaml", "cluster-mixed-generations");
    manifest_seed(1, "examples/clusters/uneven-5ib-3roce.yaml", "cluster-uneven-5ib-3roce");
    manifest_seed(2, "tests/fixtures/planner/hetero-3fab6-links.json", "calibration-hetero-3fab6");
    unsigned char kube_kind = 3;
    put_bin("manifest", "kubeconfig", &kube_kind, 1, KUBECONFIG_SEED, sizeof KUBECONFIG_SEED - 1);
    train_files_seeds();
    nic_sysfs_seeds();
    /* http_request: heads as Prometheus, the kubelet's probe and a browser send them */
    static const char *const heads[][2] = {
        {"prometheus", "GET /metrics HTTP/1.1\r\nHost: 10.0.0.5:8080\r\nUser-Agent: "
                       "Prometheus/2.53.0\r\nAccept: application/openmetrics-text;version=1.0.0,"
                       "text/plain;version=0.0.4;q=0.5\r\nAccept-Encoding: gzip\r\n"
                       "Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwcm9tIn0.c2ln\r\n"
                       "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"},
        {"probe", "GET /healthz HTTP/1.1\r\nHost: 10.0.0.5:8081\r\nUser-Agent: "
                  "kube-probe/1.35\r\nAccept: */*\r\nConnection: close\r\n\r\n"},
        {"browser", "GET /jobs?ns=team-a HTTP/1.1\r\nHost: localhost:8080\r\nAccept: "
                    "text/html\r\nauthorization:\tBearer  abc.def \r\n\r\n"},
        {"post", "POST /metrics HTTP/1.0\n\n"},
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
        put_bin("http_request", heads[i][0], heads[i][1], strlen(heads[i][1]), NULL, 0);

    struct proto_hello h = hello("team/gpt2", 3, 8, NIC_INFINIBAND, "ib-fe80000000000000-sm1", 400);
    h.running = 1; /* a worker resuming, with its measured rate */
    h.resume_attempt = 2;
    h.resume_rank = 24;
    h.resume_step = 1200;
    h.tflops = 312.5;
    h.tflops_measured = 1;
    put("coord_message", "hello-resume", proto_hello_encode(&h, NULL));
    struct proto_progress p;
    memset(&p, 0, sizeof p);
    p.rank = 3;
    p.stage = 1;
    p.nsteps = 3;
    for (int i = 0; i < 3; i++)
        p.steps[i] = (struct proto_step){.step = 41 + i, .has_loss = 1, .loss = 4.1 - 0.1 * i,
                                         .lr = 3e-4, .tokens_per_s = 51234.5, .step_ms = 812.4,
                                         .compute_ms = 600.1, .comm_ms = 150.2, .bubble_ms = 62.1,
                                         .has_eval = i == 2, .eval_loss = 3.95};
    put("coord_message", "progress", proto_progress_encode(&p, NULL));
    p.nsteps = 1;
    p.steps[0].has_loss = 0;
    put("coord_message", "progress-no-loss", proto_progress_encode(&p, NULL));
    p.steps[0].skipped = 1; /* training.maxNonFiniteSteps: a step skipped as not finite */
    put("coord_message", "progress-skipped", proto_progress_encode(&p, NULL));
    p.steps[0].skipped = 0;
    put("coord_message", "done", proto_done_encode(3, 300, NULL));
    put("coord_message", "error-worker", proto_error_encode(PROTO_ERR_WORKER, "rank 3: NCCL error: unhandled system error", NULL));
    put("coord_message", "error-preempted", proto_error_encode(PROTO_ERR_PREEMPTED, "received SIGTERM after step 41", NULL));
    put("coord_message", "notice", proto_notice_encode("CheckpointFallback", "checkpoint step 40 of stage 1 is corrupt: resumed from step 30", NULL));
    put("coord_message", "notice-nonfinite", proto_notice_encode("NonFiniteStep", "step 42 skipped: its global gradient norm is NaN (loss 4.1); no parameter changed (1 in a row, at most 3: spec.training.maxNonFiniteSteps)", NULL));
    put("worker_message", "stop-restart", proto_stop_encode(1, 1, "worker 2 (gpt2-worker-2) disconnected", NULL));
    put("worker_message", "stop-final", proto_stop_encode(3, 0, "the job is over", NULL));
    put("worker_message", "error-auth", proto_error_encode(PROTO_ERR_AUTH, "hello: unknown job or wrong token", NULL));
    put("worker_message", "error-plan", proto_error_encode(PROTO_ERR_PLAN, "planner: 3 stages need at least 3 workers", NULL));
    return 0;
}
