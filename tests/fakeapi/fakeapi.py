#!/usr/bin/python3
"""A fake kube-apiserver for Holmes tests (standard library only).

Behaves like kube-apiserver for every request the operator makes: per-object
resourceVersion from one global counter, LIST (label/field selectors, limit/continue),
WATCH as chunked streams (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR 410 when the asked
version is older than the kept history), JSON merge patch, status subresource, 409 on
stale resourceVersion or existing name, Status bodies for 401/404/409/422, cascade
deletion through ownerReferences, bearer-token auth.

Test control (no auth) under /_fake/:
  POST /_fake/faults   {"status":500|429,"count":N,"match":"substr of path?query",
                        "userAgent":"substr","retryAfter":1,
                        "delayMs":N,"splitEvents":true,"dropWatches":true,
                        "watchDelayMs":N (watch events sent N ms late: caches lag)}
  POST /_fake/compact  forget the event history (next WATCH from an old version gets 410)
  POST /_fake/kubelet  {"namespace":..,"selector":..,"phase":"Running","ready":true,
                        "reason":..,"message":..,"unschedulable":"msg"} sets pod status
  POST /_fake/reviews  {"users": {TOKEN: {"username": .., "groups": [..]}},
                        "allow": ["USER VERB /path", "USER VERB GROUP/RESOURCE NS|*"]}
                        what TokenReview and SubjectAccessReview answer
  GET  /_fake/stats    request counters
  POST /_fake/reset-stats
Usage: fakeapi.py [--port N] [--port-file F] [--kubeconfig F [--namespace NS]] [--token T]
                  [--history N] [--kubelet]
--kubeconfig writes a kubeconfig for a client of this server (its token, NS as the context's
namespace, default holmes-system) before the port file.
"""
import argparse
import base64
import bisect
import gc
import json
import random
import re
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

RESOURCES = {
    # (group, resource): (version, kind, namespaced, has status subresource)
    ("", "pods"): ("v1", "Pod", True, True),
    ("", "secrets"): ("v1", "Secret", True, False),
    ("", "services"): ("v1", "Service", True, True),
    ("", "events"): ("v1", "Event", True, False),
    ("", "configmaps"): ("v1", "ConfigMap", True, False),
    ("holmes.dev", "trainingjobs"): ("v1alpha1", "TrainingJob", True, True),
    ("coordination.k8s.io", "leases"): ("v1", "Lease", True, False),
    # reviews: answered, never stored (see review())
    ("authentication.k8s.io", "tokenreviews"): ("v1", "TokenReview", False, False),
    ("authorization.k8s.io", "subjectaccessreviews"): ("v1", "SubjectAccessReview", False, False),
}
REVIEWS = {"tokenreviews", "subjectaccessreviews"}
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch  # the patch is a fresh parse of the request body: no copy needed
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def parse_label_selector(sel):
    """Returns a predicate over a labels dict; raises ValueError on a bad selector."""
    reqs = []
    if not sel:
        return lambda labels: True
    parts = re.findall(r"[^,(]+(?:\([^)]*\))?", sel)
    for p in parts:
        p = p.strip()
        if not p:
            continue
        m = re.match(r"^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$", p)
        if m:
            vals = {v.strip() for v in m.group(3).split(",")}
            if m.group(2) == "in":
                reqs.append(lambda l, k=m.group(1), vs=vals: l.get(k) in vs)
            else:
                reqs.append(lambda l, k=m.group(1), vs=vals: l.get(k) not in vs)
            continue
        m = re.match(r"^([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)$", p)
        if m:
            k, op, v = m.groups()
            if op == "!=":
                reqs.append(lambda l, k=k, v=v: l.get(k) != v)
            else:
                reqs.append(lambda l, k=k, v=v: l.get(k) == v)
            continue
        m = re.match(r"^(!?)([\w./-]+)$", p)
        if m:
            if m.group(1):
                reqs.append(lambda l, k=m.group(2): k not in l)
            else:
                reqs.append(lambda l, k=m.group(2): k in l)
            continue
        raise ValueError("unable to parse requirement: %r" % p)
    return lambda labels: all(r(labels) for r in reqs)


def parse_field_selector(sel):
    reqs = []
    if not sel:
        return lambda obj: True
    for p in sel.split(","):
        m = re.match(r"^(metadata\.name|metadata\.namespace|status\.phase)\s*(==|=|!=)\s*(.*)$", p)
        if not m:
            raise ValueError("field label not supported: %s" % p)
        path, op, v = m.groups()
        a, b = path.split(".")

        def get(obj, a=a, b=b):
            return (obj.get(a) or {}).get(b)
        if op == "!=":
            reqs.append(lambda o, g=get, v=v: g(o) != v)
        else:
            reqs.append(lambda o, g=get, v=v: g(o) == v)
    return lambda obj: all(r(obj) for r in reqs)


class Store:
    def __init__(self, history):
        # The store lock guards objects and the event history (and wakes watchers). It is
        # held only for store work: counters and faults have their own lock, and watchers
        # filter and serialize outside it.
        self.lock = threading.Condition(threading.RLock())
        # One condition per resource on the same lock: a write wakes only the watchers of
        # its resource, not every watch stream.
        self.conds = {}
        self.meta_lock = threading.Lock()  # stats and faults
        self.rv = 100
        self.objects = {}          # (group, resource, ns, name) -> obj
        self.events = []           # (rv, group, resource, ns, type, obj)
        self.event_rvs = []        # rv of each event, for bisect
        self.history = history
        self.oldest = self.rv      # events with rv > oldest are kept
        self.drop_gen = 0
        self.faults = {}
        self.review_users, self.review_allow = {}, set()
        self.stats = {}
        # Indexes, so that a create or delete costs O(its own dependents), not O(all objects):
        self.by_uid = {}           # uid -> key
        self.dependents = {}       # owner uid -> {key: None} (insertion-ordered set)
        self.counts = {}           # resource -> number of objects (for /_fake/stats)

    # Stored objects are never mutated in place: a write stores a new top-level dict (and a
    # new dict for each level it changes), sharing unchanged subtrees with the old version.
    # Watch events, LIST and GET answers can then hold references instead of deep copies.
    def put(self, key, obj):
        old = self.objects.get(key)
        if old is not None:
            self.unindex(key, old)
        else:
            self.counts[key[1]] = self.counts.get(key[1], 0) + 1
        self.objects[key] = obj
        self.by_uid[obj["metadata"]["uid"]] = key
        for uid in owner_uids(obj):
            self.dependents.setdefault(uid, {})[key] = None

    def remove(self, key):
        obj = self.objects.pop(key)
        self.unindex(key, obj)
        self.counts[key[1]] -= 1
        if not self.counts[key[1]]:
            del self.counts[key[1]]
        return obj

    def unindex(self, key, obj):
        if self.by_uid.get(obj["metadata"]["uid"]) == key:
            del self.by_uid[obj["metadata"]["uid"]]
        for uid in owner_uids(obj):
            deps = self.dependents.get(uid)
            if deps is not None:
                deps.pop(key, None)
                if not deps:
                    del self.dependents[uid]

    def cond(self, group, resource):
        """The condition watchers of (group, resource) wait on. Call with the lock held."""
        c = self.conds.get((group, resource))
        if c is None:
            c = self.conds[(group, resource)] = threading.Condition(self.lock._lock)
        return c

    def wake_all(self):
        """Wakes every watcher (compaction, dropped streams). Call with the lock held."""
        for c in self.conds.values():
            c.notify_all()

    def next_rv(self):
        self.rv += 1
        return self.rv

    def record(self, g, r, ns, typ, obj):
        """Appends a watch event; returns obj serialized (the write's answer reuses it)."""
        # Stored objects are never mutated in place, so the event keeps a reference and
        # the serialized line every watcher sends.
        rv = int(obj["metadata"]["resourceVersion"])
        data = json.dumps(obj)
        line = ('{"type": "%s", "object": %s}\n' % (typ, data)).encode()
        self.events.append((rv, g, r, ns, typ, obj, line))
        self.event_rvs.append(rv)
        if len(self.events) > self.history + self.history // 8:
            drop = len(self.events) - self.history
            self.oldest = self.events[drop - 1][0]
            del self.events[:drop]
            del self.event_rvs[:drop]
        self.cond(g, r).notify_all()
        return data

    def events_after(self, cursor):
        return self.events[bisect.bisect_right(self.event_rvs, cursor):]

    def compact(self):
        with self.lock:
            self.events.clear()
            self.event_rvs.clear()
            self.oldest = self.rv
            self.wake_all()


def owner_uids(obj):
    refs = obj["metadata"].get("ownerReferences")
    if not isinstance(refs, list):
        return []
    return [r.get("uid") for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)]


def with_metadata(obj):
    """A shallow copy of obj with its own metadata dict, ready to edit."""
    new = dict(obj)
    new["metadata"] = dict(obj.get("metadata") or {})
    return new


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Headers(dict):
    """Request headers by lower-case name, with the case-insensitive get() of the stdlib's."""

    def get(self, name, default=None):
        return dict.get(self, name.lower(), default)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakeapi/1"

    def parse_request(self):
        """The request line and headers. Replaces the stdlib's, whose email-package header
        parser cost more CPU than everything else a request does. Same behaviour for what
        clients send here: HTTP/1.1 keep-alive (HTTP/1.0 or "Connection: close" closes),
        "Expect: 100-continue", 400 on a malformed request line or header."""
        self.command = None
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split()
        if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1"):
            self.send_error(400, "Bad request line %r" % self.requestline)
            return False
        self.command, self.path, self.request_version = words
        headers = Headers()
        while True:
            line = self.rfile.readline(65537)
            if len(line) > 65536 or len(headers) > 100:
                self.send_error(431, "Request header fields too large")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, sep, value = str(line, "iso-8859-1").partition(":")
            if not sep or not name.strip():
                self.send_error(400, "Bad header line %r" % line[:100])
                return False
            headers[name.strip().lower()] = value.strip()
        self.headers = headers
        conn = headers.get("Connection", "").lower()
        self.close_connection = conn == "close" or (self.request_version == "HTTP/1.0" and conn != "keep-alive")
        if headers.get("Expect", "").lower() == "100-continue" and self.request_version == "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("fakeapi: " + (fmt % args) + "\n")

    def setup(self):
        super().setup()
        # No Nagle: headers and body must not wait for the client's delayed ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # ---- plumbing
    def send_json(self, code, obj, headers=None, raw=None):
        """Answers obj as JSON (raw: obj already serialized)."""
        data = (raw if raw is not None else json.dumps(obj)).encode()
        self.log_request(code)
        head = ["HTTP/1.1 %d %s" % (code, self.responses.get(code, ("",))[0]),
                "Content-Type: application/json", "Content-Length: %d" % len(data)]
        head += ["%s: %s" % kv for kv in (headers or {}).items()]
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as ex:
            raise ApiError(400, "BadRequest", "the request body is not JSON: %s" % ex)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        st = self.server.store
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            if url.path.startswith("/_fake/"):
                return self.control(method, url.path, q)
            if url.path in ("/healthz", "/readyz", "/version"):
                return self.send_json(200, {"gitVersion": "v1.30.0-fake"})
            route = self.route(url.path)
            verb = self.verb(method, route, q)
            key = "%s %s %s%s" % (verb, route[0] or "core", route[1], "/" + route[4] if route[4] else "")
            with st.meta_lock:
                st.stats[key] = st.stats.get(key, 0) + 1
                st.stats["total"] = st.stats.get("total", 0) + 1
            if self.fault(self.path):
                return
            if self.server.token and self.headers.get("Authorization") != "Bearer " + self.server.token:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self.serve_api(method, verb, route, q)
        except ApiError as ex:
            self.close_connection = method != "GET" and ex.code >= 500
            try:
                self.read_rest()
            except Exception:
                pass
            self.send_json(ex.code, status_body(ex.code, ex.reason, ex.message, ex.details))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def read_rest(self):
        pass

    def fault(self, path):
        """Applies injected faults. Returns True when the request was answered by one."""
        st = self.server.store
        with st.meta_lock:
            f = dict(st.faults)
        delay = f.get("delayMs")
        if delay:
            time.sleep(delay / 1000.0)
        agent_ok = not f.get("userAgent") or f["userAgent"] in (self.headers.get("User-Agent") or "")
        if f.get("status") and agent_ok and (not f.get("match") or f["match"] in path):
            with st.meta_lock:
                cnt = st.faults.get("count", 0)
                if cnt <= 0:
                    return False
                st.faults["count"] = cnt - 1
                st.stats["faults"] = st.stats.get("faults", 0) + 1
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            code = f["status"]
            headers = {}
            if code == 429:
                headers["Retry-After"] = str(f.get("retryAfter", 1))
                self.send_json(429, status_body(429, "TooManyRequests", "too many requests, please try again later"), headers)
            else:
                self.send_json(code, status_body(code, "InternalError", "injected fault %d" % code))
            return True
        return False

    def control(self, method, path, q):
        st = self.server.store
        body = self.read_body() if method == "POST" else None
        if path == "/_fake/faults":
            faults = dict(body or {})
            drop = faults.pop("dropWatches", False)
            with st.meta_lock:
                st.faults = faults
            if drop:
                with st.lock:
                    st.drop_gen += 1
                    st.wake_all()
            return self.send_json(200, {"ok": True})
        if path == "/_fake/compact":
            st.compact()
            return self.send_json(200, {"ok": True, "resourceVersion": str(st.rv)})
        if path == "/_fake/stats":
            with st.lock:
                counts = dict(st.counts)
                rv, watches = st.rv, self.server.watches
            with st.meta_lock:
                stats = dict(st.stats)
            return self.send_json(200, dict(stats, resourceVersion=rv, watches=watches, objects=counts))
        if path == "/_fake/reset-stats":
            with st.meta_lock:
                st.stats = {}
            return self.send_json(200, {"ok": True})
        if path == "/_fake/kubelet":
            return self.send_json(200, {"updated": self.kubelet(body or {})})
        if path == "/_fake/reviews":
            with st.meta_lock:
                st.review_users = dict((body or {}).get("users") or {})
                st.review_allow = set((body or {}).get("allow") or [])
            return self.send_json(200, {"ok": True})
        raise ApiError(404, "NotFound", "no control endpoint %s" % path)

    def review(self, resource, body):
        """TokenReview / SubjectAccessReview from the users and grants /_fake/reviews set."""
        st = self.server.store
        spec = body.get("spec") or {}
        with st.meta_lock:
            users, allow = st.review_users, st.review_allow
        if resource == "tokenreviews":
            user = users.get(spec.get("token"))
            status = {"authenticated": True, "user": user} if user else \
                {"authenticated": False, "error": "invalid bearer token"}
        else:
            nra, ra = spec.get("nonResourceAttributes"), spec.get("resourceAttributes") or {}
            who = spec.get("user", "")
            if nra:
                keys = ["%s %s %s" % (who, nra.get("verb"), nra.get("path"))]
            else:
                gr = "%s/%s" % (ra.get("group", ""), ra.get("resource", ""))
                keys = ["%s %s %s *" % (who, ra.get("verb"), gr)]
                if ra.get("namespace"):
                    keys.append("%s %s %s %s" % (who, ra.get("verb"), gr, ra["namespace"]))
            ok = any(k in allow for k in keys)
            status = {"allowed": ok, "reason": "granted by the fake" if ok else "no grant"}
        return dict(body, status=status)

    def kubelet(self, b):
        st = self.server.store
        sel = parse_label_selector(b.get("selector", ""))
        n = 0
        with st.lock:
            for key, obj in list(st.objects.items()):
                if key[1] != "pods" or (b.get("namespace") and key[2] != b["namespace"]):
                    continue
                if not sel(obj["metadata"].get("labels") or {}):
                    continue
                if b.get("name") and key[3] != b["name"]:
                    continue
                new = with_metadata(obj)
                status = {"phase": b.get("phase", "Running")}
                conds = []
                if b.get("unschedulable"):
                    status["phase"] = "Pending"
                    conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "message": b["unschedulable"], "lastTransitionTime": now()})
                else:
                    conds.append({"type": "PodScheduled", "status": "True"})
                    conds.append({"type": "Ready", "status": "True" if b.get("ready") else "False"})
                status["conditions"] = conds
                for k in ("reason", "message"):
                    if b.get(k):
                        status[k] = b[k]
                new["status"] = status
                new["metadata"]["resourceVersion"] = str(st.next_rv())
                st.put(key, new)
                st.record(key[0], key[1], key[2], "MODIFIED", new)
                n += 1
        return n

    # ---- routing
    def route(self, path):
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
            group, rest = "", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, rest = parts[1], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (group, resource) not in RESOURCES:
            raise ApiError(404, "NotFound", "the server could not find the requested resource (%s %s)" % (group or "core", resource))
        if sub and sub != "status":
            raise ApiError(404, "NotFound", "subresource %s not supported" % sub)
        if sub and not RESOURCES[(group, resource)][3]:
            raise ApiError(404, "NotFound", "%s has no status subresource" % resource)
        return (group, resource, ns, name, sub)

    def verb(self, method, route, q):
        if method == "GET":
            if route[3]:
                return "get"
            return "watch" if q.get("watch") in ("1", "true") else "list"
        return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]

    # ---- the API
    def serve_api(self, method, verb, route, q):
        group, resource, ns, name, sub = route
        st = self.server.store
        if verb == "watch":
            return self.watch(route, q)
        if verb == "list":
            return self.list(route, q)
        if verb == "create":
            body = self.read_body()
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body must be a JSON object")
            if resource in REVIEWS:
                return self.send_json(201, self.review(resource, body))
            obj, raw = self.create(route, body)
            return self.send_json(201, obj, raw=raw)
        key = (group, resource, ns, name)
        if verb == "get":
            with st.lock:
                obj = st.objects.get(key)
                if not obj:
                    raise self.not_found(resource, name)
                return self.send_json(200, obj)
        if verb == "delete":
            self.read_body()
            with st.lock:
                obj = st.objects.get(key)
                if not obj:
                    raise self.not_found(resource, name)
                self.delete_locked(key)
            return self.send_json(200, obj)
        if verb in ("patch", "update"):
            body = self.read_body()
            if verb == "patch":
                ctype = self.headers.get("Content-Type", "")
                if ctype != "application/merge-patch+json":
                    raise ApiError(415, "UnsupportedMediaType", "the fake server supports only application/merge-patch+json, not %s" % ctype)
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body must be a JSON object")
            with st.lock:
                old = st.objects.get(key)
                if not old:
                    raise self.not_found(resource, name)
                want_rv = (body.get("metadata") or {}).get("resourceVersion")
                if want_rv is not None and want_rv != old["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been modified; please apply your changes to the latest version and try again' % (resource, name),
                                   {"name": name, "kind": resource})
                if verb == "patch":
                    new = merge_patch(old, body)
                    if not isinstance(new.get("metadata"), dict):
                        new["metadata"] = {}
                else:
                    new = body
                    if not isinstance(new.get("metadata"), dict):
                        new["metadata"] = {}
                    for k in ("uid", "creationTimestamp", "generation"):
                        if k in old["metadata"]:
                            new["metadata"][k] = old["metadata"][k]
                has_status = RESOURCES[(group, resource)][3]
                if sub == "status":
                    # Only status changes on /status.
                    kept = dict(old)
                    kept["status"] = new.get("status", {})
                    new = kept
                elif has_status:
                    new["status"] = old.get("status", {})
                    if "status" not in old:
                        new.pop("status")
                new = with_metadata(new)
                md = new["metadata"]
                md["name"], md["namespace"], md["uid"] = name, ns, old["metadata"]["uid"]
                if new.get("spec") != old.get("spec"):
                    md["generation"] = old["metadata"].get("generation", 1) + 1
                if new == old:
                    return self.send_json(200, old)
                md["resourceVersion"] = str(st.next_rv())
                st.put(key, new)
                raw = st.record(group, resource, ns, "MODIFIED", new)
                return self.send_json(200, new, raw=raw)
        raise ApiError(405, "MethodNotAllowed", "%s not allowed" % method)

    def not_found(self, resource, name):
        return ApiError(404, "NotFound", '%s "%s" not found' % (resource, name), {"name": name, "kind": resource})

    def create(self, route, body):
        group, resource, ns, name, sub = route
        if name or sub:
            raise ApiError(405, "MethodNotAllowed", "POST is allowed only on a collection")
        if not ns:
            raise ApiError(404, "NotFound", "create needs a namespace")
        st = self.server.store
        md = body.setdefault("metadata", {})
        if md.get("generateName") and not md.get("name"):
            md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
        name = md.get("name")
        causes = []
        if not name:
            causes.append({"field": "metadata.name", "message": "Required value: name or generateName is required"})
        elif not NAME_RE.match(name) or len(name) > 253:
            causes.append({"field": "metadata.name", "message": "Invalid value: %r: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'" % name})
        if md.get("namespace") not in (None, ns):
            causes.append({"field": "metadata.namespace", "message": "does not match the namespace of the request"})
        if resource == "pods":
            cs = (body.get("spec") or {}).get("containers")
            if not cs:
                causes.append({"field": "spec.containers", "message": "Required value"})
            else:
                for i, c in enumerate(cs):
                    if not c.get("name"):
                        causes.append({"field": "spec.containers[%d].name" % i, "message": "Required value"})
                    if not c.get("image"):
                        causes.append({"field": "spec.containers[%d].image" % i, "message": "Required value"})
        if causes:
            raise ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (RESOURCES[(group, resource)][1], name,
                                                                        "; ".join(c["field"] + ": " + c["message"] for c in causes)),
                           {"name": name, "kind": resource, "causes": causes})
        version, kind, _, has_status = RESOURCES[(group, resource)]
        with st.lock:
            key = (group, resource, ns, name)
            if key in st.objects:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (resource, name), {"name": name, "kind": resource})
            obj = body  # parsed from this request: ours to keep
            obj["apiVersion"] = (group + "/" + version) if group else version
            obj["kind"] = kind
            md = obj["metadata"]
            md["namespace"] = ns
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now()
            md["generation"] = 1
            md.pop("resourceVersion", None)
            if has_status and resource != "pods":
                obj.pop("status", None)
            if resource == "pods":
                obj["status"] = {"phase": "Pending"}
            if resource == "secrets" and "stringData" in obj:
                data = obj.setdefault("data", {})
                for k, v in obj.pop("stringData").items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
            md["resourceVersion"] = str(st.next_rv())
            st.put(key, obj)
            raw = st.record(group, resource, ns, "ADDED", obj)
            # Garbage collection: an object whose owners are all gone is collected at once.
            refs = md.get("ownerReferences") or []
            if refs and not any(uid in st.by_uid for uid in owner_uids(obj)):
                self.delete_locked(key)
            return obj, raw

    def delete_locked(self, key):
        st = self.server.store
        obj = st.remove(key)
        gone = with_metadata(obj)
        gone["metadata"]["resourceVersion"] = str(st.next_rv())
        st.record(key[0], key[1], key[2], "DELETED", gone)
        uid = obj["metadata"]["uid"]
        # Cascade (background propagation, done at once): dependents owned by uid.
        for k2 in list(st.dependents.get(uid, ())):
            if k2 in st.objects:
                self.delete_locked(k2)

    def matching(self, route, q):
        group, resource, ns, _, _ = route
        try:
            lsel = parse_label_selector(q.get("labelSelector", ""))
            fsel = parse_field_selector(q.get("fieldSelector", ""))
        except ValueError as ex:
            raise ApiError(400, "BadRequest", str(ex))

        def ok(g, r, n, obj):
            return (g == group and r == resource and (ns is None or n == ns)
                    and lsel(obj["metadata"].get("labels") or {}) and fsel(obj))
        return ok

    def list(self, route, q):
        st = self.server.store
        ok = self.matching(route, q)
        limit = int(q.get("limit") or 0)
        cont = q.get("continue")
        with st.lock:
            if cont:
                try:
                    c = json.loads(base64.b64decode(cont))
                    start_after, list_rv = tuple(c["k"]), c["rv"]
                except Exception:
                    raise ApiError(400, "BadRequest", "invalid continue token")
                if list_rv < st.oldest:
                    raise ApiError(410, "Expired", "The provided continue parameter is too old")
            else:
                start_after, list_rv = None, st.rv
                # LIST at a resourceVersion: the current state satisfies "not older than" (the
                # default match); a version from the future is refused like kube-apiserver does.
                want = q.get("resourceVersion")
                if want and want != "0":
                    if not want.isdigit():
                        raise ApiError(400, "BadRequest", "invalid resourceVersion %r" % want)
                    if int(want) > st.rv:
                        raise ApiError(504, "Timeout", "Too large resource version: %s, current: %d" % (want, st.rv))
                    if q.get("resourceVersionMatch") == "Exact" and int(want) != st.rv:
                        raise ApiError(410, "Expired", "resourceVersion %s is not the current state" % want)
            keys = sorted(k for k, o in st.objects.items() if ok(k[0], k[1], k[2], o))
            if start_after:
                keys = [k for k in keys if k > start_after]
            items = [st.objects[k] for k in (keys[:limit] if limit else keys)]
            md = {"resourceVersion": str(list_rv)}
            if limit and len(keys) > limit:
                md["continue"] = base64.b64encode(json.dumps({"k": list(keys[limit - 1]), "rv": list_rv}).encode()).decode()
                md["remainingItemCount"] = len(keys) - limit
        version, kind, _, _ = RESOURCES[(route[0], route[1])]
        self.send_json(200, {"kind": kind + "List", "apiVersion": (route[0] + "/" + version) if route[0] else version,
                             "metadata": md, "items": items})

    def watch(self, route, q):
        st = self.server.store
        ok = self.matching(route, q)
        rv = q.get("resourceVersion") or ""
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true")
        timeout = float(q.get("timeoutSeconds") or 1800)
        deadline = time.time() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        with st.lock:
            self.server.watches += 1
            drop_gen = st.drop_gen
            pending = []
            if rv in ("", "0"):
                # Synthetic ADDED for current state, then changes.
                for k in sorted(st.objects):
                    o = st.objects[k]
                    if ok(k[0], k[1], k[2], o):
                        pending.append(("ADDED", o))
                cursor = st.rv
            else:
                cursor = int(rv)
                if cursor < st.oldest:
                    pending.append(("ERROR", status_body(410, "Expired", "too old resource version: %d (%d)" % (cursor, st.oldest))))
                    cursor = None
        last_bookmark = time.time()
        try:
            while True:
                self.send_events([obj if isinstance(obj, bytes) else
                                  (json.dumps({"type": typ, "object": obj}) + "\n").encode()
                                  for typ, obj in pending])
                if cursor is None:
                    break
                pending = []
                with st.lock:
                    while True:
                        if st.drop_gen != drop_gen:
                            raise ConnectionAbortedError()
                        new = st.events_after(cursor)
                        if new or time.time() >= deadline:
                            break
                        if bookmarks and time.time() - last_bookmark >= self.server.bookmark_s:
                            break
                        if cursor < st.oldest:
                            break
                        st.cond(route[0], route[1]).wait(0.2)
                    expired = cursor < st.oldest and not new
                    if expired:
                        pending.append(("ERROR", status_body(410, "Expired", "too old resource version: %d (%d)" % (cursor, st.oldest))))
                        cursor = None
                    elif new:
                        cursor = new[-1][0]
                    store_rv = st.rv
                if expired:
                    continue
                # Filtering outside the store lock: the history entries are immutable.
                for e in new:
                    if ok(e[1], e[2], e[3], e[5]):
                        pending.append((e[4], e[6]))
                if not new and time.time() >= deadline:
                    break
                if not pending and bookmarks and time.time() - last_bookmark >= self.server.bookmark_s:
                    version, kind, _, _ = RESOURCES[(route[0], route[1])]
                    pending.append(("BOOKMARK", {"kind": kind, "apiVersion": version,
                                                 "metadata": {"resourceVersion": str(store_rv)}}))
                    cursor = max(cursor, store_rv)
                    last_bookmark = time.time()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except ConnectionAbortedError:
            # Dropped by fault injection: cut the stream without the final chunk.
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            with st.lock:
                self.server.watches -= 1

    def send_events(self, lines):
        """Sends watch event lines: all in one chunk and one write, or (fault splitEvents)
        each split across several chunks."""
        if not lines:
            return
        st = self.server.store
        with st.meta_lock:
            split = st.faults.get("splitEvents")
            lag = st.faults.get("watchDelayMs")
        if lag:
            time.sleep(lag / 1000.0)
        if not split:
            data = b"".join(lines)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            return
        for data in lines:
            self.send_event(data)

    def send_event(self, data):
        """One event split across several chunks at random offsets, flushing each."""
        cuts = sorted(random.sample(range(1, len(data)), min(3, len(data) - 1)))
        prev = 0
        for c in cuts + [len(data)]:
            self.wfile.write(b"%x\r\n%s\r\n" % (c - prev, data[prev:c]))
            self.wfile.flush()
            prev = c
            time.sleep(0.002)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--kubeconfig")
    ap.add_argument("--namespace", default="holmes-system")
    ap.add_argument("--token", default="")
    ap.add_argument("--history", type=int, default=100000)
    ap.add_argument("--bookmark-seconds", type=float, default=1.0)
    ap.add_argument("--kubelet", action="store_true", help="unused; pods stay Pending until /_fake/kubelet")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    # Stored objects are plain JSON trees without cycles: reference counting frees them, and
    # the cyclic collector's full passes over 10^5 objects would stall every request.
    gc.disable()
    srv = Server(("127.0.0.1", a.port), Handler)
    srv.store = Store(a.history)
    srv.token = a.token
    srv.kubelet = a.kubelet
    srv.verbose = a.verbose
    srv.watches = 0
    srv.bookmark_s = a.bookmark_seconds
    port = srv.server_address[1]
    if a.kubeconfig:
        with open(a.kubeconfig, "w") as f:
            f.write('apiVersion: v1\nkind: Config\ncurrent-context: fake\n'
                    'clusters: [{name: fake, cluster: {server: "http://127.0.0.1:%d"}}]\n'
                    'contexts: [{name: fake, context: {cluster: fake, user: u, namespace: %s}}]\n'
                    'users: [{name: u, user: {token: "%s"}}]\n' % (port, a.namespace, a.token))
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        import os
        os.rename(a.port_file + ".tmp", a.port_file)
    print("fakeapi listening on 127.0.0.1:%d" % port, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
