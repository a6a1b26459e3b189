/* Kubernetes Node labels derived from a NIC summary:
 *   holmes.dev/nic-class   infiniband | roce | ethernet
 *   holmes.dev/fabric      <class prefix>-<16 hex digits of SHA-256(fabric id)>, e.g. "ib-3f9c..."
 *   holmes.dev/nic-gbps    usable Gb/s, e.g. "200" or "2.5"
 * Every value is a valid label value (<= 63 chars of [A-Za-z0-9._-], alphanumeric at both ends). */
#ifndef HOLMES_NIC_LABELS_H
#define HOLMES_NIC_LABELS_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "nic_summary.h"

#define NIC_LABEL_CLASS "holmes.dev/nic-class"
#define NIC_LABEL_FABRIC "holmes.dev/fabric"
#define NIC_LABEL_GBPS "holmes.dev/nic-gbps"

struct nic_labels {
    char cls[16];
    char fabric[64];
    char gbps[32];
};

/* True when s is a valid Kubernetes label value (empty is valid). */
int nic_label_value_valid(const char *s);
/* The label-safe digest of a fabric id. Returns 0, or -1 for an empty id. */
int nic_fabric_label(const char *fabric, char *out, size_t cap, herr *e);
int nic_labels_from_summary(const struct nic_summary *s, struct nic_labels *out, herr *e);
/* {"holmes.dev/nic-class": ..., ...}; NULL on OOM. */
cJSON *nic_labels_to_json(const struct nic_labels *l);

#endif
