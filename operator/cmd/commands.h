/* The subcommands of holmes-operator; each lives in operator/cmd/cmd_<name>.c. */
#ifndef HOLMES_OPERATOR_COMMANDS_H
#define HOLMES_OPERATOR_COMMANDS_H
int cmd_run(int argc, char **argv);      /* the controller: watch TrainingJobs in a cluster */
int cmd_validate(int argc, char **argv); /* offline manifest check */
int cmd_plan(int argc, char **argv);     /* the planner on a cluster file */
int cmd_local(int argc, char **argv);    /* a whole job on this machine */
#endif
