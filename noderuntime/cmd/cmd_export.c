/* holmes-node export: a checkpoint set (any plan) as one llm.c GPT-2 checkpoint and/or as
 * safetensors with GPT-2's tensor names (model_export.h). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "model_export.h"
#include "output_target.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-node export --checkpoint-dir DIR [--step N] [--llmc FILE]\n"
        "                          [--safetensors FILE] [--hf-dir DIR]\n"
        "Writes the model of a checkpoint set (whatever pipeline, data and tensor degrees wrote\n"
        "it: spec.training.checkpoint.path of a TrainingJob, or holmes-node train's\n"
        "--checkpoint-dir) as one file each:\n"
        "  --llmc FILE         llm.c's GPT-2 checkpoint (version 3, fp32, padded vocabulary):\n"
        "                      what llm.c and spec.training.initFrom load\n"
        "  --safetensors FILE  safetensors with GPT-2's tensor names (Hugging Face transformers'\n"
        "                      GPT2Model: wte.weight, h.0.attn.c_attn.weight [in, out], ...)\n"
        "  --hf-dir DIR        a Hugging Face model directory: DIR/model.safetensors (as above)\n"
        "                      and DIR/config.json (GPT2LMHeadModel), what transformers'\n"
        "                      from_pretrained(DIR) loads (DIR is made if need be)\n"
        "  --step N            the set of step N (default: the step DIR/latest-step names, else\n"
        "                      the newest set that covers every layer)\n"
        "Every file read is verified (CRC); parameters are copied, not recomputed.\n"
        "Exit status: 0 written, 1 failed, 2 usage.\n");
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"checkpoint-dir", 1, 0, 'd'}, {"step", 1, 0, 's'}, {"llmc", 1, 0, 'l'},
        {"safetensors", 1, 0, 't'}, {"hf-dir", 1, 0, 'H'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *dir = NULL, *llmc = NULL, *st = NULL, *hf = NULL;
    long step = -1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': dir = optarg; break;
        case 'l': llmc = optarg; break;
        case 't': st = optarg; break;
        case 'H': hf = optarg; break;
        case 's':
            if (cli_long("holmes-node export", "--step", optarg, 0, __LONG_MAX__, &step) != 0)
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !dir || (!llmc && !st && !hf)) {
        fprintf(stderr, "holmes-node export: %s\n", optind < argc ? "unexpected argument"
                        : !dir ? "--checkpoint-dir is required"
                               : "nothing to write: give --llmc FILE, --safetensors FILE and/or "
                                 "--hf-dir DIR");
        usage(stderr);
        return 2;
    }
    herr e = {0};
    char hf_st[4096], hf_cfg[4096];
    if (hf && (snprintf(hf_st, sizeof hf_st, "%s/model.safetensors", hf) >= (int)sizeof hf_st ||
               snprintf(hf_cfg, sizeof hf_cfg, "%s/config.json", hf) >= (int)sizeof hf_cfg)) {
        fprintf(stderr, "holmes-node export: --hf-dir %s: too long a path\n", hf);
        return 2;
    }
    /* each file is written whole and renamed over its target: never over what is read */
    const struct output_target out[] = {
        {"--llmc", llmc}, {"--safetensors", st}, {"--hf-dir", hf ? hf_st : NULL},
        {"--hf-dir", hf ? hf_cfg : NULL}};
    const struct output_input in[] = {{"--checkpoint-dir", dir, 1}};
    if (output_targets_check(out, 4, in, 1, &e) != 0) {
        fprintf(stderr, "holmes-node export: %s\n", e.msg);
        return 2;
    }
    struct gpt_config cfg;
    float *params = NULL;
    int64_t used;
    int rc = model_export_read(dir, step, &cfg, &params, &used, &e);
    if (rc == 0 && llmc)
        rc = model_export_llmc(llmc, &cfg, params, &e);
    if (rc == 0 && st)
        rc = model_export_safetensors(st, &cfg, params, &e);
    if (rc == 0 && hf && mkdir(hf, 0755) != 0 && errno != EEXIST)
        rc = herr_set_kind(&e, herr_kind_of_errno(errno), "--hf-dir %s: cannot make it: %s", hf,
                           strerror(errno));
    if (rc == 0 && hf)
        rc = model_export_safetensors(hf_st, &cfg, params, &e) ||
             model_export_hf_config(hf_cfg, &cfg, &e);
    free(params);
    if (rc != 0) {
        fprintf(stderr, "holmes-node export: %s\n", e.msg);
        return 1;
    }
    printf("exported step %" PRId64 " of %s (%d layers, %d channels, %d heads, vocab %d, %d "
           "positions)\n", used, dir, cfg.layers, cfg.channels, cfg.heads, cfg.vocab, cfg.max_seq);
    if (llmc)
        printf("  llm.c GPT-2 checkpoint: %s\n", llmc);
    if (st)
        printf("  safetensors (GPT-2 names): %s\n", st);
    if (hf)
        printf("  Hugging Face directory: %s (model.safetensors, config.json)\n", hf);
    return 0;
}
