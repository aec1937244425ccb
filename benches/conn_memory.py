#!/usr/bin/env python3
"""Broker memory per idle connection, for one or more wharf binaries in
one run (so that "before" and "after" share the machine's state).

For each binary it starts a broker (default config, an empty store in a
temporary directory, max_connections raised to fit), reads its resident
memory (VmRSS) idle, then for each protocol opens N connections that each
subscribe to a topic of their own and waits for every acknowledgement,
reads VmRSS again, closes them all and reads it 2 s and 10 s later
(compared with the broker after one connection came and went: that
pages in the code that serves one, which stays, as the binary's own
pages do); the
last two columns are the anonymous memory (heap, stacks: not the binary's
own pages, which serving touches once and keeps) idle and 10 s after, and
what the open connections added to it, per connection (all open minus
after one connection: the closest to what one more connection costs).
Connections come from several loopback source addresses (127.0.0.x), so
more than one address's port range can be used. No dependencies: raw
sockets, WebSocket and MQTT frames written by hand (this tool is a client
nobody else needs, so it stays small).

  benches/conn_memory.py --n 10000 target/release/wharf
  benches/conn_memory.py --n 10000 --protocols native,mqtt-ws,mqtt-tcp OLD NEW NEW+actix
  benches/conn_memory.py --n 100000 --sources 8 target/release/wharf

Run it as root for 100,000 connections (it raises its own open-file limit,
which the brokers it starts inherit).
"""
import argparse
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

IP_BIND_ADDRESS_NO_PORT = 24


def proc_kib(path, key):
    with open(path) as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def rss_kib(pid):
    return proc_kib(f"/proc/{pid}/status", "VmRSS:")


def anon_kib(pid):
    return proc_kib(f"/proc/{pid}/smaps_rollup", "Anonymous:")


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    def __init__(self, spec, n):
        # PATH, PATH+lean for [server] lean_websockets = true (the
        # default since 2026-11-25), PATH+actix for false; PATH+nopark for
        # [mqtt] park_after_ms = 0.
        exe, lean, park = spec, None, ""
        if exe.endswith("+nopark"):
            exe, park = exe[:-len("+nopark")], "park_after_ms = 0\n"
        for suffix, value in (("+lean", True), ("+actix", False)):
            if exe.endswith(suffix):
                exe, lean = exe[:-len(suffix)], value
        self.dir = tempfile.mkdtemp(prefix="wharf-conn-memory-")
        self.http, self.mqtt = free_port(), free_port()
        config = os.path.join(self.dir, "bench.toml")
        with open(config, "w") as f:
            # Room for every connection; nothing else differs from the
            # defaults (idle connections never hit the rate limit, and
            # the silent ones must not be closed while measured).
            f.write(f"[server]\nmax_connections = {n + 1000}\n"
                    + ("" if lean is None else f"lean_websockets = {str(lean).lower()}\n")
                    + "[session]\nidle_timeout_s = 7200\nping_interval_s = 3600\n"
                    + "[mqtt]\n" + park)
        self.proc = subprocess.Popen(
            [exe, "serve", "--bind", f"127.0.0.1:{self.http}",
             "--mqtt-bind", f"127.0.0.1:{self.mqtt}", "--config", config,
             "--data-dir", os.path.join(self.dir, "data")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, RUST_LOG="warn,wharf::server=info"))
        for line in self.proc.stderr:
            if "listening on" in line:
                break
        else:
            sys.exit(f"{exe} did not start")
        # Keep reading its output so that it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def recv_exact(s, buf, n):
    while len(buf) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return buf


def read_ws_frame(s, buf):
    """One server frame (unmasked): returns (payload, rest)."""
    buf = recv_exact(s, buf, 2)
    n, at = buf[1] & 0x7F, 2
    if n == 126:
        buf = recv_exact(s, buf, 4)
        n, at = struct.unpack(">H", buf[2:4])[0], 4
    elif n == 127:
        buf = recv_exact(s, buf, 10)
        n, at = struct.unpack(">Q", buf[2:10])[0], 10
    buf = recv_exact(s, buf, at + n)
    return buf[at:at + n], buf[at + n:]


def ws_frame(opcode, payload):
    """A client frame, masked with a zero key (RFC 6455 allows any key)."""
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    else:
        head = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack(">H", n)
    return head + b"\0\0\0\0" + payload


def ws_upgrade(s, path, protocol=None):
    extra = f"Sec-WebSocket-Protocol: {protocol}\r\n" if protocol else ""
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               f"Sec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("upgrade refused")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    if b" 101 " not in head.split(b"\r\n", 1)[0]:
        raise ConnectionError(head.decode(errors="replace"))
    return rest


def mqtt_str(text):
    b = text.encode()
    return struct.pack(">H", len(b)) + b


def mqtt_packet(kind, body):
    n, length = len(body), b""
    while True:
        byte, n = n % 128, n // 128
        length += bytes([byte | (0x80 if n else 0)])
        if not n:
            break
    return bytes([kind]) + length + body


def mqtt_connect(i):
    # MQTT 3.1.1, clean session, keep-alive 0 (none).
    return mqtt_packet(0x10, mqtt_str("MQTT") + bytes([4, 0x02, 0, 0]) + mqtt_str(f"idle-{i}"))


# What each connection subscribes to: a topic of its own (`own`, the
# default), one topic for all (`shared`: what a connection costs apart
# from its topic), or nothing (`none`: the connection alone).
SUBSCRIBE = "own"
SETTLE = 2.0


def topic(i):
    return f"idle/{i if SUBSCRIBE == 'own' else 'all'}/#"


def mqtt_subscribe(i):
    return mqtt_packet(0x82, b"\0\x01" + mqtt_str(topic(i)) + b"\0")


def open_native(s, i, broker):
    rest = ws_upgrade(s, "/ws")
    if SUBSCRIBE == "none":
        s.sendall(ws_frame(1, b'{"op":"ping","rid":1}'))
    else:
        s.sendall(ws_frame(1, ('{"op":"subscribe","id":"s","filter":"%s","rid":1}' % topic(i)).encode()))
    reply, _ = read_ws_frame(s, rest)
    if b"error" in reply:
        raise ConnectionError(reply)


def open_mqtt_ws(s, i, broker):
    rest = ws_upgrade(s, "/mqtt", "mqtt")
    s.sendall(ws_frame(2, mqtt_connect(i)))
    connack, rest = read_ws_frame(s, rest)
    if SUBSCRIBE == "none":
        if connack[:1] != b"\x20":
            raise ConnectionError(connack)
        return
    s.sendall(ws_frame(2, mqtt_subscribe(i)))
    suback, _ = read_ws_frame(s, rest)
    if connack[:1] != b"\x20" or suback[:1] != b"\x90":
        raise ConnectionError((connack, suback))


def open_mqtt_tcp(s, i, broker):
    s.sendall(mqtt_connect(i))
    connack = recv_exact(s, b"", 4)
    if SUBSCRIBE == "none":
        if connack[:1] != b"\x20":
            raise ConnectionError(connack)
        return
    s.sendall(mqtt_subscribe(i))
    suback = recv_exact(s, connack[4:], 5)
    if connack[:1] != b"\x20" or suback[:1] != b"\x90":
        raise ConnectionError((connack, suback))


PROTOCOLS = {
    "native": (open_native, "http"),
    "mqtt-ws": (open_mqtt_ws, "http"),
    "mqtt-tcp": (open_mqtt_tcp, "mqtt"),
}


def measure(exe, protocol, n, sources):
    broker = Broker(exe, n)
    try:
        time.sleep(1)
        idle = rss_kib(broker.proc.pid)
        idle_anon = anon_kib(broker.proc.pid)
        opener, port_of = PROTOCOLS[protocol]
        port = getattr(broker, port_of)
        # One connection first, opened and closed: the code that serves a
        # connection is paged in once and stays (the binary's own pages),
        # which no later connection costs.
        s = socket.socket()
        s.settimeout(30)
        s.connect(("127.0.0.1", port))
        opener(s, n, broker)
        s.close()
        time.sleep(2)
        warm = rss_kib(broker.proc.pid)
        warm_anon = anon_kib(broker.proc.pid)
        socks = []
        for i in range(n):
            s = socket.socket()
            s.settimeout(30)
            s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind((f"127.0.0.{1 + i % sources}", 0))
            s.connect(("127.0.0.1", port))
            opener(s, i, broker)
            socks.append(s)
        time.sleep(SETTLE)
        full = rss_kib(broker.proc.pid)
        full_anon = anon_kib(broker.proc.pid)
        for s in socks:
            s.close()
        socks = []
        time.sleep(2)
        after2 = rss_kib(broker.proc.pid)
        time.sleep(8)
        after10 = rss_kib(broker.proc.pid)
        anon = (idle_anon, anon_kib(broker.proc.pid), full_anon - warm_anon)
        return idle, warm, full, after2, after10, anon
    finally:
        broker.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="+",
                    help="wharf binaries to compare; PATH+lean and PATH+actix set [server] lean_websockets to true and false, "
                         "PATH+nopark [mqtt] park_after_ms = 0")
    ap.add_argument("--n", type=int, default=10000, help="connections per protocol")
    ap.add_argument("--sources", type=int, default=4, help="loopback source addresses")
    ap.add_argument("--protocols", default="native,mqtt-ws,mqtt-tcp")
    ap.add_argument("--subscribe", choices=["own", "shared", "none"], default="own",
                    help="each connection subscribes to a topic of its own, to one topic for all, or to none")
    ap.add_argument("--rounds", type=int, default=1, help="times each binary is measured, alternating")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds between the last connection's subscription and the measurement "
                         "(quiet MQTT/TCP connections are parked after [mqtt] park_after_ms, 1 s, "
                         "and their writer's second: use 5 to see them parked)")
    args = ap.parse_args()
    global SUBSCRIBE, SETTLE
    SUBSCRIBE = args.subscribe
    SETTLE = args.settle
    # This process holds N client sockets, each broker (which inherits
    # the limit) N server sockets plus its own files: a limit each.
    want = args.n + 1024
    raise_nofile(want)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        # The brokers inherit this process's limit: neither side would get
        # its N descriptors.
        sys.exit(f"the open-file limit is {soft}, {args.n} connections need about {want}: "
                 "raise the hard limit (ulimit -Hn, as root) and run again")
    print("| binary | protocol | subscribes to | connections | idle broker | after one connection "
          "| all open | per connection | 2 s after close | 10 s after close (vs after one) "
          "| anonymous: idle, 10 s after close | anonymous per connection (all open minus after one) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for _ in range(args.rounds):
        for protocol in args.protocols.split(","):
            for exe in args.binaries:
                idle, warm, full, a2, a10, anon = measure(exe, protocol, args.n, args.sources)
                mib = lambda k: f"{k / 1024:.1f} MiB"
                print(f"| {exe} | {protocol} | {args.subscribe} | {args.n:,} | {mib(idle)} | {mib(warm)} "
                      f"| {mib(full)} | {(full - idle) / args.n:.1f} KiB | {mib(a2)} "
                      f"| {mib(a10)} ({(a10 - warm) / warm * 100:+.0f}%) "
                      f"| {mib(anon[0])}, {mib(anon[1])} | {anon[2] * 1024 / args.n:,.0f} B |", flush=True)


if __name__ == "__main__":
    main()
