/* Placeholder until the validate command lands; replaced by its module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_validate(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "holmes-operator validate: not built yet\n");
    return 2;
}
