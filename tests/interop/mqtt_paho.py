"""MQTT interoperability with Eclipse Paho (paho-mqtt 2.x, transport="websockets").

Run by tests/mqtt.rs against a broker it started: python3 mqtt_paho.py PORT SCENARIO
Exits 0 on success; prints what failed otherwise. Every wait is bounded.
"""
import queue
import sys
import time

import paho.mqtt.client as mqtt

PORT = int(sys.argv[1])
SCENARIO = sys.argv[2]
T = 10.0


def client(cid, clean=True, will=None, ca=None, login=None, transport="websockets"):
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=cid,
        transport=transport,
        clean_session=clean,
        protocol=mqtt.MQTTv311,
    )
    if transport == "websockets":
        c.ws_set_options(path="/mqtt")
    if ca:
        c.tls_set(ca_certs=ca)
    if login:
        c.username_pw_set(*login)
    if will:
        c.will_set(*will)
    c.inbox = queue.Queue()
    c.connected = queue.Queue()
    c.subscribed = queue.Queue()
    c.on_subscribe = lambda cl, ud, mid, rcs, props: cl.subscribed.put((mid, rcs))
    c.on_message = lambda cl, ud, msg: cl.inbox.put(msg)
    c.on_connect = lambda cl, ud, flags, rc, props: cl.connected.put((flags, rc))
    return c


def start(c):
    c.connect("127.0.0.1", PORT, keepalive=30)
    c.loop_start()
    flags, rc = c.connected.get(timeout=T)
    assert rc == 0, f"connect refused: {rc}"
    return flags


def recv(c, timeout=T):
    return c.inbox.get(timeout=timeout)


def none_within(c, secs):
    try:
        m = c.inbox.get(timeout=secs)
    except queue.Empty:
        return
    raise AssertionError(f"unexpected message {m.topic} {m.payload!r}")


def sub(c, filt, qos):
    r, mid = c.subscribe(filt, qos)
    assert r == mqtt.MQTT_ERR_SUCCESS
    # Wait for the SUBACK, not a while.
    got, rcs = c.subscribed.get(timeout=T)
    assert got == mid, (got, mid)
    assert not rcs[0].is_failure, rcs


def qos_round_trips():
    a, b = client("paho-a"), client("paho-b")
    start(a)
    start(b)
    sub(b, "interop/qos/+", 2)
    for qos in (0, 1, 2):
        info = a.publish(f"interop/qos/{qos}", f"payload-{qos}".encode(), qos=qos)
        info.wait_for_publish(timeout=T)
        assert info.is_published(), f"QoS {qos} publish not acknowledged"
        m = recv(b)
        assert m.topic == f"interop/qos/{qos}", m.topic
        assert m.payload == f"payload-{qos}".encode(), m.payload
        assert m.qos == qos, (m.qos, qos)
    # Binary payload, byte for byte.
    blob = bytes(range(256))
    a.publish("interop/qos/bin", blob, qos=1).wait_for_publish(timeout=T)
    assert recv(b).payload == blob
    a.disconnect()
    b.disconnect()


def wildcards_and_dollar_topics():
    a, b = client("paho-w1"), client("paho-w2")
    start(a)
    start(b)
    sub(b, "interop/wild/#", 0)
    sub(b, "#", 0)
    a.publish("interop/wild/x/y", b"1", qos=1).wait_for_publish(timeout=T)
    topics = sorted([recv(b).topic, recv(b).topic])
    assert topics == ["interop/wild/x/y", "interop/wild/x/y"], topics
    # "#" must not match $-topics.
    a.publish("$SYS/interop", b"hidden", qos=1).wait_for_publish(timeout=T)
    none_within(b, 0.5)
    a.disconnect()
    b.disconnect()


def retained():
    a = client("paho-r1")
    start(a)
    a.publish("interop/retained", b"last value", qos=1, retain=True).wait_for_publish(timeout=T)
    a.disconnect()
    b = client("paho-r2")
    start(b)
    sub(b, "interop/retained", 1)
    m = recv(b)
    assert m.payload == b"last value" and m.retain, (m.payload, m.retain)
    b.disconnect()


def will_on_abrupt_disconnect():
    watcher = client("paho-watch")
    start(watcher)
    sub(watcher, "interop/will", 1)
    dying = client("paho-dying", will=("interop/will", b"gone", 1, False))
    start(dying)
    time.sleep(0.2)
    # Drop the socket without DISCONNECT.
    dying._sock_close()
    dying.loop_stop()
    m = recv(watcher)
    assert m.payload == b"gone", m.payload
    # A clean DISCONNECT publishes no will.
    polite = client("paho-polite", will=("interop/will", b"not this", 1, False))
    start(polite)
    polite.disconnect()
    polite.loop_stop()
    none_within(watcher, 0.7)
    watcher.disconnect()


def persistent_session_part1():
    # Subscribe with a persistent session, then leave.
    c = client("paho-persistent", clean=False)
    start(c)
    sub(c, "interop/persist/#", 1)
    c.disconnect()
    c.loop_stop()
    # Published while it is away: more than one prefetch window (100), so
    # a re-subscribe that lost the backlog could not go unnoticed.
    p = client("paho-publisher")
    start(p)
    for i in range(150):
        p.publish(f"interop/persist/{i}", f"m{i}".encode(), qos=1).wait_for_publish(timeout=T)
    p.disconnect()


def persistent_session_part2():
    # After a broker restart: the session and its messages are there.
    c = client("paho-persistent", clean=False)
    flags = start(c)
    assert flags.session_present, "session present after the restart"
    # Clients usually subscribe again on every connect: that must keep
    # what was kept.
    c.subscribe("interop/persist/#", 1)
    got = [recv(c).payload for _ in range(150)]
    assert got == [f"m{i}".encode() for i in range(150)], got
    c.disconnect()
    c.loop_stop()
    # A clean session forgets it: a persistent one after it starts empty.
    c2 = client("paho-persistent", clean=True)
    start(c2)
    c2.disconnect()
    c2.loop_stop()
    c3 = client("paho-persistent", clean=False)
    flags = start(c3)
    assert not flags.session_present, "the clean session forgot the old one"
    c3.disconnect()


def connect_code(c):
    """Connects and returns the CONNACK's code (0 accepted); MQTT 3.1.1
    codes 4 and 5 come back as Paho's reason codes 134 and 135."""
    c.connect("127.0.0.1", PORT, keepalive=30)
    c.loop_start()
    try:
        _, rc = c.connected.get(timeout=T)
    finally:
        c.loop_stop()
    return rc.value


def secure():
    """wss:// with the test CA (argv[3]); a password user alice/wonderland
    who may publish and subscribe under secure/alice/; a JWT (argv[4])
    as the password, subscribing under jwt/."""
    ca, jwt = sys.argv[3], sys.argv[4]
    code = connect_code(client("paho-bad", ca=ca, login=("alice", "nope")))
    assert code in (4, 134), f"wrong password: CONNACK {code}"
    code = connect_code(client("paho-none", ca=ca))
    assert code in (5, 135), f"no credentials: CONNACK {code}"
    alice = client("paho-alice", ca=ca, login=("alice", "wonderland"))
    start(alice)
    sub(alice, "secure/alice/#", 1)
    # A filter her permissions do not cover: refused in the SUBACK.
    r, mid = alice.subscribe("secure/#", 1)
    got, rcs = alice.subscribed.get(timeout=T)
    assert got == mid and rcs[0].is_failure, rcs
    info = alice.publish("secure/alice/t", b"pw", qos=1)
    info.wait_for_publish(timeout=T)
    assert recv(alice).payload == b"pw"
    device = client("paho-jwt", ca=ca, login=("ignored", jwt))
    start(device)
    sub(device, "jwt/#", 1)
    info = device.publish("jwt/a", b"token", qos=1)
    info.wait_for_publish(timeout=T)
    assert recv(device).payload == b"token"
    for c in (alice, device):
        c.disconnect()
        c.loop_stop()


def tcp():
    """MQTT over plain TCP (PORT is the TCP listener's): QoS 0, 1 and 2."""
    a, b = client("tcp-a", transport="tcp"), client("tcp-b", transport="tcp")
    start(a)
    start(b)
    sub(b, "interop/tcp/+", 2)
    for qos in (0, 1, 2):
        info = a.publish(f"interop/tcp/{qos}", f"tcp-{qos}".encode(), qos=qos)
        info.wait_for_publish(timeout=T)
        assert info.is_published(), f"QoS {qos} publish not acknowledged"
        m = recv(b)
        assert (m.topic, m.payload, m.qos) == (f"interop/tcp/{qos}", f"tcp-{qos}".encode(), qos)
    for c in (a, b):
        c.disconnect()
        c.loop_stop()


SCENARIOS = {
    "tcp": tcp,
    "secure": secure,
    "qos": qos_round_trips,
    "wildcards": wildcards_and_dollar_topics,
    "retained": retained,
    "will": will_on_abrupt_disconnect,
    "persist1": persistent_session_part1,
    "persist2": persistent_session_part2,
}

if __name__ == "__main__":
    try:
        SCENARIOS[SCENARIO]()
    except Exception as e:  # noqa: BLE001 - report anything
        print(f"{SCENARIO} failed: {type(e).__name__}: {e}")
        sys.exit(1)
    print(f"{SCENARIO} ok")
