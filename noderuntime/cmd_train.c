/* Placeholder until the train command lands; replaced by its module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_train(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "holmes-node train: not built yet\n");
    return 2;
}
