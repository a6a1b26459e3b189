#include <stddef.h>

#include "cli.h"
#include "cmd/commands.h"

static const struct cli_command commands[] = {
    {"run", "run the controller and coordinator against a Kubernetes cluster", cmd_run},
    {"validate", "check TrainingJob manifests offline", cmd_validate},
    {"plan", "plan a job on a cluster description and show the placement", cmd_plan},
    {"local", "run a TrainingJob on this machine, workers as local processes", cmd_local},
    {0, 0, 0},
};

int main(int argc, char **argv)
{
    return cli_dispatch("holmes-operator", "Kubernetes operator for heterogeneous-fabric training",
                        commands, NULL, argc, argv);
}
