/* Files of the unit tests: a test run in a fresh directory under /tmp (removed after, with what
 * it holds), and a small text file written. */
#ifndef HOLMES_FS_TESTUTIL_H
#define HOLMES_FS_TESTUTIL_H

#include <stddef.h>

/* Makes /tmp/holmes-NAME.XXXXXX (its path into dir, of cap bytes), runs each of tests (a NULL
 * ends them) and removes the directory. 0, or -1 with a FAIL line when it could not be made. */
int test_in_tmpdir(char *dir, size_t cap, const char *name, void (*const *tests)(void));
/* rm -rf of dir, said when it fails. */
void test_remove_tree(const char *dir);
/* text into path: 0, or -1. */
int test_write_file(const char *path, const char *text);

#endif
