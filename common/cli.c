#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "version.h"

static void usage(FILE *f, const char *prog, const char *about, const struct cli_command *cmds)
{
    fprintf(f, "%s %s: %s\n\nUsage: %s COMMAND [ARGS]\n\nCommands:\n", prog, HOLMES_VERSION, about,
            prog);
    for (const struct cli_command *c = cmds; c->name; c++)
        fprintf(f, "  %-10s %s\n", c->name, c->summary);
    fprintf(f, "\nOptions:\n  --help     this text\n  --version  print the version\n\n"
               "'%s COMMAND --help' describes each command.\n", prog);
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    }
    return 0;
}

int cli_dispatch(const char *prog, const char *about, const struct cli_command *cmds,
                 const char *default_cmd, int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("%s %s\n", prog, HOLMES_VERSION);
        return 0;
    }
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "help") == 0)) {
        usage(stdout, prog, about, cmds);
        return 0;
    }
    const char *name = argc >= 2 ? argv[1] : default_cmd;
    if (!name) {
        usage(stderr, prog, about, cmds);
        return 2;
    }
    for (const struct cli_command *c = cmds; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return argc >= 2 ? c->run(argc - 1, argv + 1) : c->run(1, (char *[]){(char *)name, NULL});
    fprintf(stderr, "%s: unknown command '%s' (see '%s --help')\n", prog, name, prog);
    return 2;
}

int cli_long(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s must be an integer in [%ld, %ld] (got \"%s\")\n", cmd, flag, lo, hi,
                s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_double(const char *cmd, const char *flag, const char *s, double lo, double hi,
               double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s must be a number in [%g, %g] (got \"%s\")\n", cmd, flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, float *out)
{
    double v;
    if (cli_double(cmd, flag, s, lo, hi, &v) != 0)
        return -1;
    *out = (float)v;
    return 0;
}
