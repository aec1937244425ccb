#!/usr/bin/env python3
# Memory after a load: opens N native WebSocket connections to a running
# Wharf broker, each subscribing to a topic of its own, holds them, closes
# them all, then samples the broker's VmRSS and AnonHugePages (MiB) every
# 10 s for WATCH seconds. No dependencies (raw sockets).
#
#   benches/idle_memory.py PORT N WATCH BROKER_PID
#   e.g. benches/idle_memory.py 7878 10000 240 "$(pgrep -f 'wharf serve')"
import socket, sys, time, os, base64
port, n, watch, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def rss():
    kb = anon_huge = 0
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"): kb = int(l.split()[1])
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for l in f:
                if l.startswith("AnonHugePages:"): anon_huge = int(l.split()[1])
    except OSError: pass
    return kb // 1024, anon_huge // 1024
def frame(text):
    b = text.encode()
    assert len(b) < 126
    return bytes([0x81, 0x80 | len(b), 0, 0, 0, 0]) + b
print("start", rss(), flush=True)
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    s.sendall(frame('{"op":"subscribe","id":"s","filter":"idle/%d/#"}' % i))
    socks.append(s)
time.sleep(2)
print("open", n, rss(), flush=True)
for s in socks: s.close()
socks = []
t0 = time.time()
while time.time() - t0 < watch:
    time.sleep(10)
    print(f"t+{int(time.time()-t0)}s", rss(), flush=True)
