/* The manifests the tests read: every .yaml and .json file of a folder (tests/manifests/valid,
 * tests/manifests/invalid, examples), in name order. */
#ifndef HOLMES_MANIFEST_TESTUTIL_H
#define HOLMES_MANIFEST_TESTUTIL_H

/* Calls fn for each file of dir whose name ends in .yaml or .json, in name order (the first 512).
 * The number of files, or -1 when dir cannot be read. */
int for_each_manifest(const char *dir, void (*fn)(const char *path));

#endif
