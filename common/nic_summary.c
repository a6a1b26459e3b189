#include "nic_summary.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *nic_class_name(enum nic_class c)
{
    switch (c) {
    case NIC_INFINIBAND: return "infiniband";
    case NIC_ROCE: return "roce";
    case NIC_ETHERNET: return "ethernet";
    }
    return "unknown";
}

int nic_class_parse(const char *s, enum nic_class *out)
{
    if (!s)
        return -1;
    if (strcmp(s, "infiniband") == 0 || strcmp(s, "ib") == 0)
        *out = NIC_INFINIBAND;
    else if (strcmp(s, "roce") == 0)
        *out = NIC_ROCE;
    else if (strcmp(s, "ethernet") == 0 || strcmp(s, "eth") == 0 || strcmp(s, "socket") == 0)
        *out = NIC_ETHERNET;
    else
        return -1;
    return 0;
}

/* Copies an optional string member into dst; a present non-string is an error. */
static int opt_string(const cJSON *obj, const char *key, char *dst, size_t cap, const char *where,
                      herr *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v))
        return herr_set(e, "%s.%s: must be a string", where, key);
    if (strlen(v->valuestring) >= cap)
        return herr_set(e, "%s.%s: longer than %zu characters", where, key, cap - 1);
    snprintf(dst, cap, "%s", v->valuestring);
    return 0;
}

int nic_summary_from_json(const cJSON *j, const char *where, struct nic_summary *out, herr *e)
{
    char path[256];
    memset(out, 0, sizeof *out);
    out->gid_index = -1;
    if (!cJSON_IsObject(j))
        return herr_set(e, "%s: must be an object (a NIC report or {class, fabric, gbps})", where);
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(j, "summary");
    if (sum) {
        if (!cJSON_IsObject(sum))
            return herr_set(e, "%s.summary: must be an object", where);
        snprintf(path, sizeof path, "%s.summary", where);
        j = sum;
    } else {
        snprintf(path, sizeof path, "%s", where);
    }

    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "class");
    if (!cls)
        return herr_set(e, "%s.class: required (infiniband, roce or ethernet)", path);
    if (!cJSON_IsString(cls) || nic_class_parse(cls->valuestring, &out->cls) != 0)
        return herr_set(e, "%s.class: must be one of infiniband, roce, ethernet", path);

    const cJSON *fab = cJSON_GetObjectItemCaseSensitive(j, "fabric");
    if (!fab)
        return herr_set(e, "%s.fabric: required (the fabric id)", path);
    if (!cJSON_IsString(fab) || fab->valuestring[0] == '\0')
        return herr_set(e, "%s.fabric: must be a non-empty string", path);
    if (opt_string(j, "fabric", out->fabric, sizeof out->fabric, path, e))
        return -1;

    const cJSON *gbps = cJSON_GetObjectItemCaseSensitive(j, "gbps");
    if (!gbps)
        return herr_set(e, "%s.gbps: required (usable bandwidth in Gb/s)", path);
    if (!cJSON_IsNumber(gbps) || !isfinite(gbps->valuedouble) || gbps->valuedouble <= 0 ||
        gbps->valuedouble > 1e6)
        return herr_set(e, "%s.gbps: must be a number in (0, 1000000]", path);
    out->gbps = gbps->valuedouble;

    /* NCCL settings: either flat keys or the "nccl" env object discovery prints. */
    if (opt_string(j, "ib_hca", out->ib_hca, sizeof out->ib_hca, path, e) ||
        opt_string(j, "socket_ifname", out->socket_ifname, sizeof out->socket_ifname, path, e))
        return -1;
    const cJSON *gid = cJSON_GetObjectItemCaseSensitive(j, "gid_index");
    if (gid) {
        if (!cJSON_IsNumber(gid) || gid->valuedouble < 0 || gid->valuedouble > 255 ||
            gid->valuedouble != (int)gid->valuedouble)
            return herr_set(e, "%s.gid_index: must be an integer in [0, 255]", path);
        out->gid_index = (int)gid->valuedouble;
    }
    const cJSON *nccl = cJSON_GetObjectItemCaseSensitive(j, "nccl");
    if (nccl) {
        char npath[300];
        snprintf(npath, sizeof npath, "%s.nccl", path);
        if (!cJSON_IsObject(nccl))
            return herr_set(e, "%s: must be an object of NCCL_* settings", npath);
        if (opt_string(nccl, "NCCL_IB_HCA", out->ib_hca, sizeof out->ib_hca, npath, e) ||
            opt_string(nccl, "NCCL_SOCKET_IFNAME", out->socket_ifname, sizeof out->socket_ifname,
                       npath, e))
            return -1;
        char gidbuf[16] = "";
        if (opt_string(nccl, "NCCL_IB_GID_INDEX", gidbuf, sizeof gidbuf, npath, e))
            return -1;
        if (gidbuf[0]) {
            char *end;
            long g = strtol(gidbuf, &end, 10);
            if (*end || g < 0 || g > 255)
                return herr_set(e, "%s.NCCL_IB_GID_INDEX: must be an integer in [0, 255]", npath);
            out->gid_index = (int)g;
        }
    }
    return 0;
}

cJSON *nic_summary_to_json(const struct nic_summary *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON *nccl = cJSON_AddObjectToObject(o, "nccl");
    int ok = cJSON_AddStringToObject(o, "class", nic_class_name(s->cls)) &&
             cJSON_AddStringToObject(o, "fabric", s->fabric) &&
             cJSON_AddNumberToObject(o, "gbps", s->gbps) && nccl;
    if (ok && s->ib_hca[0])
        ok = cJSON_AddStringToObject(nccl, "NCCL_IB_HCA", s->ib_hca) != NULL;
    if (ok && s->gid_index >= 0) {
        char g[16];
        snprintf(g, sizeof g, "%d", s->gid_index);
        ok = cJSON_AddStringToObject(nccl, "NCCL_IB_GID_INDEX", g) != NULL;
    }
    if (ok && s->socket_ifname[0])
        ok = cJSON_AddStringToObject(nccl, "NCCL_SOCKET_IFNAME", s->socket_ifname) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
