#include "nic_labels.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

int nic_label_value_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0)
        return 1;
    if (n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.')
            return 0;
    }
    return 1;
}

int nic_fabric_label(const char *fabric, char *out, size_t cap, herr *e)
{
    if (!fabric || !fabric[0])
        return herr_set(e, "fabric id: empty, no label can be derived");
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(fabric, strlen(fabric), md, &mdlen, EVP_sha256(), NULL) || mdlen < 8)
        return herr_set(e, "fabric id \"%s\": SHA-256 failed", fabric);
    /* Keep the class prefix ("ib", "roce", "eth") readable when it is label-safe. */
    char prefix[16] = "";
    size_t plen = strcspn(fabric, "-");
    if (plen > 0 && plen < sizeof prefix && fabric[plen] == '-') {
        memcpy(prefix, fabric, plen);
        prefix[plen] = '\0';
        for (size_t i = 0; i < plen; i++)
            if (!isalnum((unsigned char)prefix[i]))
                prefix[0] = '\0';
    }
    char hex[17];
    for (int i = 0; i < 8; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    int n = prefix[0] ? snprintf(out, cap, "%s-%s", prefix, hex) : snprintf(out, cap, "f-%s", hex);
    if (n < 0 || (size_t)n >= cap)
        return herr_set(e, "fabric label: buffer too small");
    return 0;
}

int nic_labels_from_summary(const struct nic_summary *s, struct nic_labels *out, herr *e)
{
    memset(out, 0, sizeof *out);
    snprintf(out->cls, sizeof out->cls, "%s", nic_class_name(s->cls));
    if (nic_fabric_label(s->fabric, out->fabric, sizeof out->fabric, e))
        return -1;
    if (!(s->gbps > 0) || s->gbps > 1e6)
        return herr_set(e, "summary.gbps: %g is not in (0, 1000000]", s->gbps);
    snprintf(out->gbps, sizeof out->gbps, "%.6g", s->gbps);
    if (!nic_label_value_valid(out->cls) || !nic_label_value_valid(out->fabric) ||
        !nic_label_value_valid(out->gbps))
        return herr_set(e, "labels: derived value is not a valid label value");
    return 0;
}

cJSON *nic_labels_to_json(const struct nic_labels *l)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, NIC_LABEL_CLASS, l->cls) ||
        !cJSON_AddStringToObject(o, NIC_LABEL_FABRIC, l->fabric) ||
        !cJSON_AddStringToObject(o, NIC_LABEL_GBPS, l->gbps)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
