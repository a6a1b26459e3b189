/* common/base64: what Kubernetes stores round-trips; whitespace is ignored; text that is not
 * base64 is refused naming the field. */
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "test.h"

int main(void)
{
    static const char *const texts[] = {"", "a", "ab", "abc", "-----BEGIN CERTIFICATE-----\nMIIB\n"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char *enc = base64_encode(texts[i]);
        size_t n = 99;
        herr e = {0};
        char *dec = enc ? base64_decode(enc, &n, "t", &e) : NULL;
        char name[64];
        snprintf(name, sizeof name, "round trip of %zu bytes", strlen(texts[i]));
        CHECK(name, dec && n == strlen(texts[i]) && strcmp(dec, texts[i]) == 0 &&
                        strlen(enc) % 4 == 0);
        free(enc);
        free(dec);
    }
    herr e = {0};
    char *dec = base64_decode(" aGVs\nbG8=\t", NULL, "t", &e);
    CHECK_STR("whitespace ignored, no length asked", dec, "hello");
    free(dec);
    CHECK("a length not a multiple of 4 refused, naming the field",
          base64_decode("aGVsbG8", NULL, "data.token", &e) == NULL &&
              strstr(e.msg, "data.token: not valid base64") != NULL);
    CHECK("characters outside the alphabet refused", base64_decode("aG!s", NULL, "x", &e) == NULL &&
                                                         strstr(e.msg, "x: not valid base64"));
    TEST_MAIN_END();
}
