/* holmes-node engines: the training engines this binary has, one per line (cpu; cuda-fp32 and
 * cuda-bf16 in the CUDA build), so a launcher can tell before it starts GPU ranks. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "engine.h"

int cmd_engines(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: holmes-node engines\n"
               "Prints the training engines this binary has, one per line: cpu (fp32), and in a\n"
               "CUDA build (make cuda) cuda-fp32 and cuda-bf16.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "holmes-node engines: unexpected argument %s (see --help)\n", argv[1]);
        return 2;
    }
    static const struct {
        enum engine_kind kind;
        enum dtype precision;
        const char *name;
    } all[] = {{ENGINE_CPU, DTYPE_FP32, "cpu"},
               {ENGINE_CUDA, DTYPE_FP32, "cuda-fp32"},
               {ENGINE_CUDA, DTYPE_BF16, "cuda-bf16"}};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char why[256];
        if (engine_available(all[i].kind, all[i].precision, why, sizeof why))
            printf("%s\n", all[i].name);
    }
    return 0;
}
