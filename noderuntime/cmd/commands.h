/* The subcommands of holmes-node; each lives in noderuntime/cmd/cmd_<name>.c. */
#ifndef HOLMES_NODE_COMMANDS_H
#define HOLMES_NODE_COMMANDS_H
#include <stdio.h>
int cmd_nic(int argc, char **argv);    /* NIC discovery report */
int cmd_worker(int argc, char **argv); /* one worker of a distributed job */
int cmd_train(int argc, char **argv);  /* single-process training on this machine */
int cmd_rank(int argc, char **argv);   /* one rank process of a worker with several GPUs */
int cmd_engines(int argc, char **argv); /* the training engines this binary has */
int cmd_export(int argc, char **argv);  /* a checkpoint set as one llm.c / safetensors model */
int cmd_sample(int argc, char **argv);  /* text from a trained model (sampler.h) */
int cmd_tokenize(int argc, char **argv); /* text into llm.c token shards (bpe.h) */
int cmd_eval(int argc, char **argv);     /* held-out loss, multiple choice (choice_eval.h) */
/* `worker --coordinator URL` (cmd_worker_coord.c): cmd_worker hands over when wanted. */
int cmd_worker_coord_wanted(int argc, char **argv);
int cmd_worker_coord(int argc, char **argv);
/* the coordinator mode's part of `holmes-node worker --help` (which cmd_worker.c prints) */
void cmd_worker_coord_usage(FILE *f);
#endif
