# Bad input to the coordinator, bounded (docs/protocol.md, "Limits"): while a job trains under
# `holmes-operator local` (simulated workers), 1,000 idle connections are opened to its
# coordinator (raw TCP that never speaks, WebSocket upgrades that never say hello, a slow
# handshake trickling bytes), and messages over the limit before hello (16 KiB: a hello is a few).
# The running job keeps stepping through all of it and succeeds; the oversized messages are
# refused with the limit named; the coordinator's memory grows by a bounded amount.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-flood.XXXXXX)
lp=""; fp=""
trap '[ -n "$fp" ] && kill "$fp" 2>/dev/null; [ -n "$lp" ] && kill "$lp" 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
if [ "$(ulimit -n)" -lt 2200 ]; then
    echo "SKIP coord_flood: needs 2,200 file descriptors (ulimit -Hn is $(ulimit -Hn))"
    exit 0
fi
name=it-flood-$$
example_job "$tmp/job.yaml" "$name" 450 "$tmp/ckpt"
( cd "$REPO" && exec timeout 150 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 20 \
      --run-dir "$tmp/run" --quiet >"$tmp/out" 2>&1 ) &
lp=$!
wait_for 60 grep -q "Running: rendezvous complete" "$tmp/out"
port=$(grep -o 'coordinator ws://127\.0\.0\.1:[0-9]*/' "$tmp/out" | grep -o '[0-9]*/$' | tr -d /)
page=$(grep -o 'http://127\.0\.0\.1:[0-9]*/jobs' "$tmp/out" | head -1)
api=${page%/jobs}/api/jobs
opid=$(pgrep -P "$lp" -x holmes-operator || echo "$lp")
[ -n "$port" ] && pass "the job runs; its coordinator is on port $port" || { fail "the job runs" "$(tail "$tmp/out")"; exit 1; }
step() { curl -sf "$api" | jq '[.jobs[0].points.step[]?] | max // 0'; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$opid/status"; }
rss0=$(rss_kb)

# the flood: 1,000 idle connections held open, a trickling handshake, two oversized messages
/usr/bin/python3 - "$port" "$tmp" <<'PYEOF' &
import base64, os, socket, struct, sys, time
port, tmp = int(sys.argv[1]), sys.argv[2]
def upgrade(s):
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: holmes.v1\r\n\r\n" % key).encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            return False
        got += chunk
    return got.startswith(b"HTTP/1.1 101")
def frame(payload, fin=True, op=1):
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | op])
    if n < 126: head += bytes([0x80 | n])
    elif n < 65536: head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else: head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
def read_close(s, t=5):
    s.settimeout(t)
    data = b""
    try:
        while True:
            c = s.recv(65536)
            if not c: break
            data += c
    except OSError:
        pass
    return data
held, upgraded = [], 0
for i in range(1000):
    s = socket.create_connection(("127.0.0.1", port))
    if i % 2:  # answered within 5 s though hundreds of silent connections came before it
        s.settimeout(5)
        try: upgraded += upgrade(s)
        except OSError: pass
        s.settimeout(None)
    held.append(s)
open(tmp + "/flood.open", "w").write("%d %d\n" % (len(held), upgraded))
# a newcomer's handshake while the flood is held: it does not wait for the idle ones to time out
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(5)
try: ok = upgrade(s)
except OSError: ok = False
open(tmp + "/newcomer.txt", "w").write("upgraded\n" if ok else "no answer\n")
held.append(s)
# a handshake that trickles in a byte at a time
slow = socket.create_connection(("127.0.0.1", port))
for b in b"GET / HTTP/1.1\r\nHost: x\r\n":
    try: slow.send(bytes([b]))
    except OSError: break
    time.sleep(0.05)
# over the limit before hello (16 KiB), in fragments; and over the protocol's 1 MiB limit
s = socket.create_connection(("127.0.0.1", port)); upgrade(s)
s.sendall(frame(b"{" + b" " * 20000, fin=False) + frame(b"}", op=0))
open(tmp + "/prehello.txt", "wb").write(read_close(s))
s = socket.create_connection(("127.0.0.1", port)); upgrade(s)
try: s.sendall(frame(b'{"v":1,"type":"hello","pad":"' + b"x" * (1100 * 1024) + b'"}'))
except OSError: pass
open(tmp + "/big.txt", "wb").write(read_close(s))
open(tmp + "/flood.sent", "w").write("ok\n")
time.sleep(60)
PYEOF
fp=$!
check "1,000 idle connections opened" wait_for 60 test -s "$tmp/flood.open"
check "... every other one a WebSocket upgrade, each answered though the silent ones before it wait" \
    grep -qx "1000 500" "$tmp/flood.open"
echo "# flood: $(cat "$tmp/flood.open" 2>/dev/null) (connections, upgraded)"
s0=$(step)
check "a new WebSocket handshake is answered while the flood is held (within 5 s)" grep -qx upgraded "$tmp/newcomer.txt"
check "oversized messages sent" wait_for 30 test -s "$tmp/flood.sent"
check "a message over the limit before hello is refused, naming the limit" grep -qa "larger than the limit of 16384 bytes before hello" "$tmp/prehello.txt"
check "a 1.1 MiB message is refused, naming the limit (its rest read and dropped, not kept)" grep -qa "larger than the limit" "$tmp/big.txt"
sleep 2
s1=$(step)
rss1=$(rss_kb)
check "the running job keeps stepping during the flood ($s0 -> $s1)" test "${s1:-0}" -gt "${s0:-0}"
grow=$(( (${rss1:-0} - ${rss0:-0}) / 1024 ))
echo "# coordinator RSS: $((rss0 / 1024)) MiB before, $((rss1 / 1024)) MiB with the flood open"
check "the flood costs bounded memory (+${grow} MiB, at most 128)" test "$grow" -le 128
wait "$lp"; rc=$?; lp=""
check "the job succeeds" test "$rc" = 0
grep -q "Succeeded" "$tmp/out" && pass "... its summary says Succeeded" || fail "... its summary says Succeeded" "$(tail -5 "$tmp/out")"
if grep -rqE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$tmp/out" "$tmp/run" 2>/dev/null; then
    fail "no sanitizer report" "$(grep -rhE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$tmp/out" "$tmp/run" | head -3)"
else
    pass "no sanitizer report"
fi
