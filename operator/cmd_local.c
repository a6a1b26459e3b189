/* Placeholder until the local command lands; replaced by its module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_local(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "holmes-operator local: not built yet\n");
    return 2;
}
