/* Placeholder until the run command lands; replaced by its module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_run(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "holmes-operator run: not built yet\n");
    return 2;
}
