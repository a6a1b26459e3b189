#!/usr/bin/env python3
"""One-way latency of a small message between two namespaces of the emulated network.

latency.py serve ADDRESS PORT    answers each 64-byte message with one of its own, until EOF
latency.py probe ADDRESS PORT N  N round trips over one TCP connection (TCP_NODELAY, 20 ms apart
                                 so that the shaper's bucket is full, as between the engine's
                                 messages); prints the median round trip / 2 in microseconds

bench-hetero runs it across the router before the scenarios: that is links.tcp_latency_us, a
property of the network measured directly rather than fitted to step times (docs/hetero.md,
"Calibration")."""
import socket, statistics, sys, time

MSG = 64


def recv_exact(c, n):
    buf = b""
    while len(buf) < n:
        d = c.recv(n - len(buf))
        if not d:
            return None
        buf += d
    return buf


def serve(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    s.settimeout(30)
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while recv_exact(c, MSG) is not None:
        c.sendall(bytes(MSG))


def probe(addr, port, n):
    for _ in range(100):  # the server may still be starting
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    else:
        sys.exit(f"latency.py: nothing listens on {addr}:{port}")
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtt = []
    for _ in range(n):
        time.sleep(0.02)
        t = time.monotonic()
        c.sendall(bytes(MSG))
        if recv_exact(c, MSG) is None:
            sys.exit("latency.py: the server closed the connection")
        rtt.append(time.monotonic() - t)
    c.close()
    print(f"{statistics.median(rtt) / 2 * 1e6:.1f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 5 and sys.argv[1] == "probe":
        probe(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
