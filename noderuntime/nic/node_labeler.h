/* Patches this Node's holmes.dev NIC labels from inside the cluster (the Helm chart's
 * DaemonSet runs `holmes-node nic --label-node`): a JSON merge patch
 * {"metadata":{"labels":{...}}} sent with libcurl to PATCH /api/v1/nodes/<NODE_NAME>. */
#ifndef HOLMES_NODE_LABELER_H
#define HOLMES_NODE_LABELER_H

#include <limits.h>

#include "error.h"
#include "nic_labels.h"

struct node_labeler_cfg {
    char api_url[512];      /* "https://10.96.0.1:443" */
    char node[254];         /* Node name (a DNS subdomain) */
    char token[8192];       /* service-account bearer token; "" sends none */
    char ca_file[PATH_MAX]; /* CA bundle; "" uses the system store */
};

/* True when s is a valid Node name (RFC 1123 subdomain, <= 253 chars). */
int node_name_valid(const char *s);
/* From NODE_NAME, KUBERNETES_SERVICE_HOST/PORT and the service-account token and ca.crt in
 * sa_dir (NULL: KUBE_SA_DIR, common/kube_config.h). HOLMES_KUBE_API_URL, when set, replaces the
 * host/port pair (out-of-cluster use and tests). Errors name the missing variable or file. */
int node_labeler_config_from_env(const char *sa_dir, struct node_labeler_cfg *c, herr *e);
/* The merge-patch body for labels; caller frees. NULL on OOM. */
char *node_labeler_patch_body(const struct nic_labels *l);
/* Sends the patch; fails with the HTTP status and the API server's message. */
int node_labeler_patch(const struct node_labeler_cfg *c, const struct nic_labels *l, herr *e);

#endif
