/* The subcommands of holmes-node; each lives in noderuntime/cmd/cmd_<name>.c. */
#ifndef HOLMES_NODE_COMMANDS_H
#define HOLMES_NODE_COMMANDS_H
int cmd_nic(int argc, char **argv);    /* NIC discovery report */
int cmd_worker(int argc, char **argv); /* one worker of a distributed job */
int cmd_train(int argc, char **argv);  /* single-process training on this machine */
/* `worker --coordinator URL` (cmd_worker_coord.c): cmd_worker hands over when wanted. */
int cmd_worker_coord_wanted(int argc, char **argv);
int cmd_worker_coord(int argc, char **argv);
#endif
