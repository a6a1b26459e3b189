/* Subcommand dispatch shared by both binaries. */
#ifndef HOLMES_CLI_H
#define HOLMES_CLI_H

struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
};

/* Handles --version/--help, finds the subcommand and runs it. Returns the exit status. */
int cli_dispatch(const char *prog, const char *about, const struct cli_command *cmds,
                 const char *default_cmd, int argc, char **argv);
/* True when argv holds -h or --help before any "--". */
int cli_wants_help(int argc, char **argv);

/* A command-line value: an integer, or a finite number, in [lo, hi]. 0, or -1 after printing
 * "CMD: FLAG must be an integer in [lo, hi] (got "s")" to stderr. */
int cli_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
int cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, float *out);
int cli_double(const char *cmd, const char *flag, const char *s, double lo, double hi,
               double *out);

#endif
