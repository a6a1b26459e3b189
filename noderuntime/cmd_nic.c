/* Placeholder until the nic command lands; replaced by its module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_nic(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "holmes-node nic: not built yet\n");
    return 2;
}
