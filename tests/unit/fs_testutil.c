#include "fs_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_remove_tree(const char *dir)
{
    char cmd[512];
    if (strchr(dir, '\'') || (size_t)snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", dir) >= sizeof cmd ||
        system(cmd) != 0)
        printf("note: could not remove %s\n", dir);
}

int test_in_tmpdir(char *dir, size_t cap, const char *name, void (*const *tests)(void))
{
    if ((size_t)snprintf(dir, cap, "/tmp/holmes-%s.XXXXXX", name) >= cap || !mkdtemp(dir)) {
        printf("FAIL setup: cannot make a directory /tmp/holmes-%s.XXXXXX\n", name);
        return -1;
    }
    for (; *tests; tests++)
        (*tests)();
    test_remove_tree(dir);
    return 0;
}

int test_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}
