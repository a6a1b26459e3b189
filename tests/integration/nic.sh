# holmes-node nic end to end: this machine (no RDMA in CI), recorded trees, emulation, labels,
# --label-node against a one-shot local HTTP listener, and bad input.
source "$(dirname "$0")/lib.bash"
FIX=$REPO/tests/fixtures/sysfs
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# This machine, through libibverbs.
out=$("$NODE" nic --json 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && pass "nic on this machine exits 0" || fail "nic on this machine exits 0" "rc=$rc $(cat "$tmp/err")"
if ! ls /sys/class/infiniband/* >/dev/null 2>&1; then
    grep -q '"note":.*no RDMA devices found' <<<"$out" && pass "no RDMA said plainly" || fail "no RDMA said plainly" "$out"
    grep -q '"class":.*"ethernet"' <<<"$out" && pass "ethernet only" || fail "ethernet only" "$out"
fi
"$NODE" nic >"$tmp/text" 2>/dev/null && grep -q '^summary: class ' "$tmp/text" && pass "text report" || fail "text report" "$(cat "$tmp/text")"

# A recorded tree, through --sysfs and through SYSFS_PATH (libibverbs honours it too).
"$NODE" nic --json --quiet --sysfs "$FIX/cx5-roce-100g/sys" >"$tmp/cx5.json" &&
    /usr/bin/python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a!=b)' \
        "$tmp/cx5.json" "$FIX/cx5-roce-100g/expected.json" && pass "--sysfs report equals expected" || fail "--sysfs report equals expected"
SYSFS_PATH=$FIX/gpu-pcie-switch/sys "$NODE" nic --quiet >"$tmp/gpu.txt" 2>&1
grep -q 'gpu 0000:03:00.0 numa 0 nearest mlx5_0 (pcie-switch)' "$tmp/gpu.txt" && pass "SYSFS_PATH tree" || fail "SYSFS_PATH tree" "$(cat "$tmp/gpu.txt")"

# The text summary: NCCL_IB_HCA's value ("=dev:port", NCCL's exact-name form) quoted, so the line
# never reads NCCL_IB_HCA==...
txt=$("$NODE" nic --quiet --sysfs "$FIX/cx6-hdr-ib/sys")
grep -q "NCCL_IB_HCA='=mlx5_0:1'" <<<"$txt" && ! grep -q 'NCCL_IB_HCA==' <<<"$txt" \
    && pass "text summary: NCCL_IB_HCA='=mlx5_0:1', no double =" || fail "text summary: NCCL_IB_HCA quoted" "$txt"

# No RDMA through libibverbs (SYSFS_PATH): the reason from sysfs, not libibverbs' errno text.
txt=$(SYSFS_PATH=$FIX/plain-ethernet/sys "$NODE" nic --quiet 2>&1)
grep -q "^RDMA: no RDMA devices found: $FIX/plain-ethernet/sys/class/infiniband does not exist (no RDMA NIC, or its kernel driver is not loaded)" <<<"$txt" \
    && ! grep -q 'Function not implemented' <<<"$txt" \
    && pass "no RDMA: says class/infiniband does not exist, not the errno text" \
    || fail "no RDMA: says class/infiniband does not exist, not the errno text" "$txt"
cp -r "$FIX/plain-ethernet/sys" "$tmp/empty-ib" && mkdir -p "$tmp/empty-ib/class/infiniband"
txt=$(SYSFS_PATH=$tmp/empty-ib "$NODE" nic --quiet 2>&1)
grep -q "^RDMA: no RDMA devices found: $tmp/empty-ib/class/infiniband lists none" <<<"$txt" \
    && pass "no RDMA: an empty class/infiniband is said so" || fail "no RDMA: an empty class/infiniband is said so" "$txt"
if ! ls /sys/class/infiniband/* >/dev/null 2>&1; then
    txt=$("$NODE" nic --quiet 2>&1)
    grep -q '^RDMA: no RDMA devices found: /sys/class/infiniband ' <<<"$txt" && ! grep -q 'libibverbs: ' <<<"$txt" \
        && pass "no RDMA on this machine: the reason, not libibverbs' errno" \
        || fail "no RDMA on this machine: the reason, not libibverbs' errno" "$txt"
fi

# Labels.
labels=$("$NODE" nic --print-labels --quiet --sysfs "$FIX/cx6-hdr-ib/sys")
grep -qx 'holmes.dev/nic-class=infiniband' <<<"$labels" && grep -qx 'holmes.dev/nic-gbps=200' <<<"$labels" &&
    grep -Eqx 'holmes.dev/fabric=ib-[0-9a-f]{16}' <<<"$labels" && pass "--print-labels" || fail "--print-labels" "$labels"

# Emulation.
out=$("$NODE" nic --json --emulate 'roce:roce-10.1.0.0/16:100')
grep -q '"emulated":.*true' <<<"$out" && grep -q '"fabric":.*"roce-10.1.0.0/16"' <<<"$out" && pass "--emulate" || fail "--emulate" "$out"
"$NODE" nic --emulate 'warp:x:1' 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'CLASS "warp"' "$tmp/err" && pass "--emulate bad class" || fail "--emulate bad class" "rc=$rc $(cat "$tmp/err")"

# Bad input.
"$NODE" nic --bogus 2>/dev/null; [ $? -eq 2 ] && pass "unknown option exits 2" || fail "unknown option exits 2"
"$NODE" nic --sysfs "$tmp/none" 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "$tmp/none: not a directory" "$tmp/err" && pass "--sysfs missing tree" || fail "--sysfs missing tree" "$(cat "$tmp/err")"
"$NODE" nic --help | grep -q -- '--label-node' && pass "nic --help" || fail "nic --help"

# --label-node against a one-shot HTTP listener that records the request.
cat >"$tmp/srv.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_PATCH(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        open(sys.argv[2], "w").write(self.command + " " + self.path + "\n" + self.headers["Authorization"] + "\n" + body.decode())
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_port))
s.handle_request()
PY
/usr/bin/python3 "$tmp/srv.py" "$tmp/port" "$tmp/req" & srv=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
mkdir -p "$tmp/sa"; echo "tok-xyz" >"$tmp/sa/token"
NODE_NAME=worker-3 HOLMES_SA_DIR=$tmp/sa HOLMES_KUBE_API_URL=http://127.0.0.1:$(cat "$tmp/port") \
    "$NODE" nic --label-node --quiet --sysfs "$FIX/e810-irdma-roce/sys" 2>"$tmp/err"; rc=$?
wait $srv
[ $rc -eq 0 ] && pass "--label-node exits 0" || fail "--label-node exits 0" "rc=$rc $(cat "$tmp/err")"
head -1 "$tmp/req" | grep -qx 'PATCH /api/v1/nodes/worker-3' && sed -n 2p "$tmp/req" | grep -qx 'Bearer tok-xyz' &&
    grep -q '"holmes.dev/nic-class":"roce"' "$tmp/req" && pass "--label-node request" || fail "--label-node request" "$(cat "$tmp/req" 2>&1)"
NODE_NAME= "$NODE" nic --label-node --quiet --sysfs "$FIX/e810-irdma-roce/sys" 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'NODE_NAME' "$tmp/err" && pass "--label-node without NODE_NAME" || fail "--label-node without NODE_NAME" "$(cat "$tmp/err")"

# record.sh: a recorded tree reads like its source (a fixture, and this machine).
SYSFS=$FIX/gpu-pcie-switch/sys "$FIX/record.sh" "$tmp/rec-gpu" >/dev/null &&
    "$NODE" nic --json --quiet --sysfs "$tmp/rec-gpu/sys" >"$tmp/rec-gpu.json" &&
    /usr/bin/python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))!=json.load(open(sys.argv[2])))' \
        "$tmp/rec-gpu.json" "$FIX/gpu-pcie-switch/expected.json" && pass "record.sh round trip (fixture)" || fail "record.sh round trip (fixture)"
if ! ls /sys/class/infiniband/* >/dev/null 2>&1; then
    "$FIX/record.sh" "$tmp/rec-live" >/dev/null && "$NODE" nic --json --quiet --sysfs "$tmp/rec-live/sys" >"$tmp/rec-live.json" &&
        "$NODE" nic --json --quiet >"$tmp/live.json" &&
        /usr/bin/python3 -c 'import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); [x.pop("rdma") for x in (a,b)]; sys.exit(a!=b)' \
            "$tmp/rec-live.json" "$tmp/live.json" && pass "record.sh round trip (this machine)" || fail "record.sh round trip (this machine)"
fi
