#include <stddef.h>

#include "cli.h"
#include "cmd/commands.h"

static const struct cli_command commands[] = {
    {"nic", "discover RDMA and Ethernet NICs and GPUs; print the NIC report", cmd_nic},
    {"worker", "run one worker of a TrainingJob", cmd_worker},
    {"train", "train a model in one process (no coordinator)", cmd_train},
    {"export", "write a checkpoint set (any plan) as one llm.c GPT-2 checkpoint and/or safetensors",
     cmd_export},
    {"sample", "continue a prompt with a trained model (a checkpoint set or llm.c weights), on the CPU",
     cmd_sample},
    {"eval", "a trained model's held-out loss and multiple-choice accuracy (HellaSwag), on the CPU",
     cmd_eval},
    {"tokenize", "write text as llm.c token shards with GPT-2's BPE (a TrainingJob's data)",
     cmd_tokenize},
    {"engines", "list the training engines this binary has (cpu; cuda-fp32, cuda-bf16)", cmd_engines},
    {"rank", "(internal) one rank of a worker with several GPUs, started by worker", cmd_rank},
    {0, 0, 0},
};

int main(int argc, char **argv)
{
    return cli_dispatch("holmes-node", "Holmes worker runtime", commands, NULL, argc, argv);
}
