/* Placeholder until the plan command lands; replaced by its module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_plan(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "holmes-operator plan: not built yet\n");
    return 2;
}
