/* Placeholder until the worker command lands; replaced by its module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_worker(int argc, char **argv)
{
    if (cmd_worker_coord_wanted(argc, argv))
        return cmd_worker_coord(argc, argv);
    fprintf(stderr, "holmes-node worker: not built yet\n");
    return 2;
}
