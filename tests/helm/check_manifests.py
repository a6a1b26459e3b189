#!/usr/bin/python3
"""Checks on the manifests `helm template` renders (tests/integration/helm.sh runs it).

  check_manifests.py wellformed MANIFESTS       every document is a named Kubernetes object
  check_manifests.py security MANIFESTS         no privileged or root containers
  check_manifests.py rbac MANIFESTS CALLS SA    the rules bound to ServiceAccount SA allow every
                                                API call in CALLS and nothing more
  check_manifests.py summary MANIFESTS          one line per object, image, arg, env and rule

CALLS has one API call per line, as `holmes-operator run --print-api-calls` prints them:
`<verb> <group|core> <resource>[/<subresource>]`; blank lines and # comments are skipped.
Exit status: 0 when the check passes, 1 with one line per problem on stdout, 2 on bad input.
Runs with Debian's /usr/bin/python3 and python3-yaml.
"""
import re
import sys

import yaml

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace",
                  "PriorityClass", "StorageClass"}
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet"}
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


class BadInput(Exception):
    pass


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput(f"{path}: not readable as YAML: {exc}") from exc
    return docs


def ident(doc):
    md = doc.get("metadata") or {}
    ns = md.get("namespace")
    return f"{doc.get('kind')}/{(ns + '/') if ns else ''}{md.get('name')}"


def wellformed(docs):
    problems, seen = [], set()
    if not docs:
        return ["no documents rendered"]
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            problems.append(f"document {i}: not a mapping")
            continue
        for key in ("apiVersion", "kind", "metadata"):
            if key not in doc:
                problems.append(f"document {i} ({doc.get('kind')}): missing {key}")
        md = doc.get("metadata") or {}
        name = md.get("name", "")
        if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
            problems.append(f"{ident(doc)}: metadata.name '{name}' is not a DNS-1123 subdomain")
        kind = doc.get("kind")
        if kind in CLUSTER_SCOPED and "namespace" in md:
            problems.append(f"{ident(doc)}: cluster-scoped {kind} has a namespace")
        if kind not in CLUSTER_SCOPED and not md.get("namespace"):
            problems.append(f"{ident(doc)}: namespaced {kind} has no metadata.namespace")
        for k, v in (md.get("labels") or {}).items():
            if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
                problems.append(f"{ident(doc)}: label {k}={v!r} is not a valid label value")
        key = ident(doc)
        if key in seen:
            problems.append(f"{key}: rendered twice")
        seen.add(key)
        if kind in WORKLOADS:
            spec = doc.get("spec") or {}
            sel = ((spec.get("selector") or {}).get("matchLabels")) or {}
            labels = (((spec.get("template") or {}).get("metadata") or {}).get("labels")) or {}
            if not sel:
                problems.append(f"{key}: spec.selector.matchLabels is empty")
            for k, v in sel.items():
                if labels.get(k) != v:
                    problems.append(f"{key}: selector {k}={v} does not match the pod template labels")
            for c in pod_spec(doc).get("containers") or []:
                if not c.get("image"):
                    problems.append(f"{key}: container {c.get('name')} has no image")
                if not (c.get("resources") or {}).get("limits"):
                    problems.append(f"{key}: container {c.get('name')} has no resource limits")
    return problems


def pod_spec(doc):
    if doc.get("kind") == "Pod":
        return doc.get("spec") or {}
    return (((doc.get("spec") or {}).get("template") or {}).get("spec")) or {}


def security(docs):
    problems = []
    for doc in docs:
        if doc.get("kind") not in WORKLOADS | {"Pod"}:
            continue
        ps = pod_spec(doc)
        psc = ps.get("securityContext") or {}
        for flag in ("hostPID", "hostIPC"):
            if ps.get(flag):
                problems.append(f"{ident(doc)}: {flag} is set")
        for c in (ps.get("containers") or []) + (ps.get("initContainers") or []):
            where = f"{ident(doc)} container {c.get('name')}"
            sc = c.get("securityContext") or {}
            if sc.get("privileged"):
                problems.append(f"{where}: privileged")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation is not false")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: readOnlyRootFilesystem is not true")
            if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
                problems.append(f"{where}: runAsNonRoot is not set")
            if sc.get("runAsUser", psc.get("runAsUser")) == 0:
                problems.append(f"{where}: runs as uid 0")
            caps = sc.get("capabilities") or {}
            if caps.get("add"):
                problems.append(f"{where}: adds capabilities {caps['add']}")
            if "ALL" not in (caps.get("drop") or []):
                problems.append(f"{where}: does not drop ALL capabilities")
    return problems


def read_calls(path):
    calls = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise BadInput(f"{path}: {exc}") from exc
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or parts[0] not in VERBS or not re.match(r"^[a-z0-9.-]+$", parts[1]) \
                or not re.match(r"^[a-z0-9]+(/[a-z0-9]+)?$", parts[2]):
            raise BadInput(f"{path}:{n}: '{line}' is not '<verb> <group|core> <resource>[/<subresource>]'"
                           f" (verbs: {', '.join(sorted(VERBS))})")
        calls.append((parts[0], "" if parts[1] == "core" else parts[1], parts[2]))
    if not calls:
        raise BadInput(f"{path}: no API calls listed")
    return calls


def bound_rules(docs, sa):
    """(role id, rule) for every rule bound to ServiceAccount `sa` (name or namespace/name)."""
    roles = {(d["kind"], (d["metadata"].get("namespace") or ""), d["metadata"]["name"]): d
             for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    sa_ns, _, sa_name = sa.rpartition("/")
    out, problems = [], []
    for b in docs:
        if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa_name
                   and (not sa_ns or s.get("namespace") == sa_ns) for s in b.get("subjects") or []):
            continue
        ref = b.get("roleRef") or {}
        ns = b["metadata"].get("namespace", "") if ref.get("kind") == "Role" else ""
        role = roles.get((ref.get("kind"), ns, ref.get("name")))
        if role is None:
            problems.append(f"{ident(b)}: binds {ref.get('kind')} {ref.get('name')}, which the chart does not define")
            continue
        for rule in role.get("rules") or []:
            out.append((ident(role), rule))
    return out, problems


def grants(rule, verb, group, resource):
    return ((verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
            and (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (resource in rule.get("resources", []) or "*" in rule.get("resources", [])))


def rbac(docs, calls, sa):
    rules, problems = bound_rules(docs, sa)
    if not rules and not problems:
        return [f"no Role or ClusterRole is bound to ServiceAccount {sa}"]
    for verb, group, resource in calls:
        if not any(grants(r, verb, group, resource) for _, r in rules):
            problems.append(f"not allowed: {verb} {group or 'core'} {resource}"
                            f" (the operator makes this call; no rule bound to {sa} grants it)")
    for role, r in rules:
        if r.get("nonResourceURLs"):
            problems.append(f"{role}: rule {r} uses nonResourceURLs, which this check does not model")
            continue
        # a rule with resourceNames grants the call on those objects only: less than the call,
        # never more, so it is checked like any other rule
        for group in r.get("apiGroups", []):
            for resource in r.get("resources", []):
                for verb in r.get("verbs", []):
                    if "*" in (group, resource, verb):
                        problems.append(f"{role} grants more than needed: wildcard in"
                                        f" {verb} {group or 'core'} {resource}")
                    elif (verb, group, resource) not in calls:
                        problems.append(f"{role} grants more than needed: {verb} {group or 'core'}"
                                        f" {resource} (no API call uses it)")
    return problems


def summary(docs):
    lines = []
    for doc in docs:
        lines.append(f"object {ident(doc)}")
        for c in (pod_spec(doc).get("containers") or []) if doc.get("kind") in WORKLOADS else []:
            lines.append(f"image {ident(doc)} {c.get('name')} {c.get('image')}")
            for a in (c.get("command") or []) + (c.get("args") or []):
                lines.append(f"arg {ident(doc)} {c.get('name')} {' '.join(str(a).split())}")
            for e in c.get("env") or []:
                lines.append(f"env {ident(doc)} {c.get('name')} {e.get('name')}")
        if doc.get("kind") == "Deployment":
            lines.append(f"replicas {ident(doc)} {doc['spec'].get('replicas')}")
        for r in doc.get("rules") or []:
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for v in r.get("verbs", []):
                        lines.append(f"rule {ident(doc)} {v} {g or 'core'} {res}")
    return lines


def main(argv):
    usage = "usage: check_manifests.py wellformed|security|summary MANIFESTS | rbac MANIFESTS CALLS SA"
    if len(argv) < 3:
        print(usage, file=sys.stderr)
        return 2
    try:
        docs = load(argv[2])
        if argv[1] == "wellformed" and len(argv) == 3:
            problems = wellformed(docs)
        elif argv[1] == "security" and len(argv) == 3:
            problems = security(docs)
        elif argv[1] == "rbac" and len(argv) == 5:
            problems = rbac(docs, read_calls(argv[3]), argv[4])
        elif argv[1] == "summary" and len(argv) == 3:
            print("\n".join(summary(docs)))
            return 0
        else:
            print(usage, file=sys.stderr)
            return 2
    except BadInput as exc:
        print(f"check_manifests: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
