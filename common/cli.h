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

#endif
