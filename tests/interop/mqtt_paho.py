"""MQTT interoperability with Eclipse Paho (paho-mqtt 2.x, transport="websockets").

Run by tests/it/mqtt.rs against a broker it started: python3 mqtt_paho.py PORT SCENARIO
(the v5_* scenarios, MQTT 5, also over TCP from tests/it/mqtt_tcp.rs:
python3 mqtt_paho.py PORT v5_... tcp).
Exits 0 on success; prints what failed otherwise. Every wait is bounded.
"""
import queue
import select
import sys
import time
import traceback

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



# MQTT 5. The v5_* scenarios take the transport as argv[3]: "websockets"
# (the default: PORT is the HTTP port, path /mqtt) or "tcp" (PORT is the
# MQTT TCP listener's).

from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

TRANSPORT = sys.argv[3] if len(sys.argv) > 3 and SCENARIO.startswith("v5_") else "websockets"
# Every v5 scenario runs on a broker with the default session.max_frame.
MAX_FRAME = 1 << 20


def client5(cid, will=None):
    """An MQTT 5 Paho client that never reconnects on its own (a
    reconnect would take the session over again) and records everything
    the broker says into queues."""
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=cid,
        transport=TRANSPORT,
        protocol=mqtt.MQTTv5,
        reconnect_on_failure=False,
    )
    if TRANSPORT == "websockets":
        c.ws_set_options(path="/mqtt")
    if will:
        c.will_set(*will)
    c.inbox = queue.Queue()
    c.connected = queue.Queue()
    c.subscribed = queue.Queue()
    c.unsubscribed = queue.Queue()
    c.acked = {}
    c.acks = queue.Queue()
    c.disconnected = queue.Queue()
    c.on_message = lambda cl, ud, msg: cl.inbox.put(msg)
    c.on_connect = lambda cl, ud, flags, rc, props: cl.connected.put((flags, rc, props))
    c.on_subscribe = lambda cl, ud, mid, rcs, props: cl.subscribed.put((mid, rcs))
    c.on_unsubscribe = lambda cl, ud, mid, rcs, props: cl.unsubscribed.put((mid, rcs))
    c.on_publish = lambda cl, ud, mid, rc, props: cl.acks.put((mid, rc))
    c.on_disconnect = lambda cl, ud, flags, rc, props: cl.disconnected.put(rc)
    return c


def start5(c, clean_start=True, expiry=None):
    """Connects (session expiry `expiry` when given) and returns the
    CONNACK's (flags, properties); it must accept."""
    props = None
    if expiry is not None:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = expiry
    c.connect("127.0.0.1", PORT, keepalive=30, clean_start=clean_start, properties=props)
    c.loop_start()
    flags, rc, cprops = c.connected.get(timeout=T)
    assert rc == 0, f"connect refused: {rc}"
    return flags, cprops


def stop5(c):
    c.disconnect()
    # The DISCONNECT is out once Paho reports the disconnection.
    c.disconnected.get(timeout=T)
    c.loop_stop()


def sub5(c, filt, qos=1, props=None, **options):
    """Subscribes and returns the SUBACK's reason codes (as ints)."""
    r, mid = c.subscribe(filt, options=SubscribeOptions(qos=qos, **options), properties=props)
    assert r == mqtt.MQTT_ERR_SUCCESS, r
    got, rcs = c.subscribed.get(timeout=T)
    assert got == mid, (got, mid)
    return [rc.value for rc in rcs]


def pub5(c, topic, payload, qos=1, retain=False, props=None):
    """Publishes and, at QoS 1, returns the PUBACK's reason code (int)."""
    info = c.publish(topic, payload, qos=qos, retain=retain, properties=props)
    assert info.rc == mqtt.MQTT_ERR_SUCCESS, info.rc
    if qos == 0:
        return None
    mid, rc = c.acks.get(timeout=T)
    assert mid == info.mid, (mid, info.mid)
    return rc.value


def until_unmatched(p, topic):
    """Publishes (QoS 1) to `topic` until the PUBACK says no matching
    subscribers (0x10): a session that ended at its client's DISCONNECT
    is gone once the server has processed it, which the client does not
    wait for."""
    deadline = time.monotonic() + T
    while pub5(p, topic, b"probe") != 0x10:
        assert time.monotonic() < deadline, f"{topic} still has a subscriber"
        time.sleep(0.05)


def publish_props(**kw):
    p = Properties(PacketTypes.PUBLISH)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def prop(m, name, default=None):
    return getattr(m.properties, name, default) if m.properties is not None else default


def v5_properties():
    """Properties round trip between two MQTT 5 clients; a request and
    its reply with the response topic and correlation data; PUBACK 0x10
    when nobody subscribed; the CONNACK's properties."""
    req, rep = client5("p5-requester"), client5("p5-replier")
    _, cprops = start5(req)
    assert cprops.TopicAliasMaximum == 64, cprops
    assert cprops.MaximumPacketSize == MAX_FRAME, cprops
    assert not hasattr(cprops, "AssignedClientIdentifier"), cprops
    start5(rep)
    assert sub5(rep, "v5/props/requests/#") == [1]
    assert sub5(req, "v5/props/replies/requester") == [1]
    props = publish_props(
        UserProperty=[("trace-id", "abc-123"), ("unit", "celsius")],
        ContentType="application/json",
        ResponseTopic="v5/props/replies/requester",
        CorrelationData=b"\x00\x01\xfe\xff",
        PayloadFormatIndicator=1,
        MessageExpiryInterval=300,
    )
    assert pub5(req, "v5/props/requests/1", b'{"t": 21.5}', props=props) == 0
    m = recv(rep)
    assert (m.topic, m.payload, m.qos) == ("v5/props/requests/1", b'{"t": 21.5}', 1)
    assert sorted(prop(m, "UserProperty", [])) == [("trace-id", "abc-123"), ("unit", "celsius")], m.properties
    assert prop(m, "ContentType") == "application/json", m.properties
    assert prop(m, "ResponseTopic") == "v5/props/replies/requester", m.properties
    assert prop(m, "CorrelationData") == b"\x00\x01\xfe\xff", m.properties
    assert prop(m, "PayloadFormatIndicator") == 1, m.properties
    # What is left of 300 s, rounded up: no more, and not much less.
    assert 290 <= prop(m, "MessageExpiryInterval", 0) <= 300, m.properties
    # The replier answers where the request said, with its correlation.
    reply = publish_props(CorrelationData=prop(m, "CorrelationData"), UserProperty=[("status", "ok")])
    assert pub5(rep, prop(m, "ResponseTopic"), b"ack", props=reply) == 0
    r = recv(req)
    assert (r.topic, r.payload) == ("v5/props/replies/requester", b"ack")
    assert prop(r, "CorrelationData") == b"\x00\x01\xfe\xff", r.properties
    assert prop(r, "UserProperty") == [("status", "ok")], r.properties
    # Without properties, a delivery carries none of them.
    assert pub5(req, "v5/props/requests/2", b"plain") == 0
    m = recv(rep)
    assert m.payload == b"plain"
    for name in ("UserProperty", "ContentType", "ResponseTopic", "CorrelationData", "MessageExpiryInterval"):
        assert prop(m, name) is None, (name, m.properties)
    # Nobody subscribed: accepted, reason 0x10.
    assert pub5(req, "v5/props/nobody", b"void") == 0x10
    # A UTF-8 payload format with a payload that is not UTF-8: 0x99.
    bad = publish_props(PayloadFormatIndicator=1)
    assert pub5(req, "v5/props/requests/3", b"\xff\xfe", props=bad) == 0x99
    none_within(rep, 0.5)
    stop5(req)
    stop5(rep)
    # An empty client id gets one assigned in the CONNACK.
    anon = client5("")
    _, cprops = start5(anon)
    assigned = getattr(cprops, "AssignedClientIdentifier", "")
    assert assigned != "", cprops
    assert sub5(anon, "v5/props/anon") == [1]
    assert pub5(anon, "v5/props/anon", b"me") == 0
    assert recv(anon).payload == b"me"
    stop5(anon)


def v5_session():
    """Session expiry: a session with an interval keeps its subscription
    (and what was published meanwhile) while away; one with 0 ends at
    the disconnection; one past its interval is gone."""
    c = client5("p5-session")
    flags, _ = start5(c, clean_start=True, expiry=60)
    assert not flags.session_present
    assert sub5(c, "v5/session/#") == [1]
    stop5(c)
    p = client5("p5-session-pub")
    start5(p)
    # The session kept its subscription: a matching subscriber.
    assert pub5(p, "v5/session/a", b"while away") == 0
    # Back without clean start: the session is there, and the message
    # arrives without subscribing again. Expiry 0 this time.
    c = client5("p5-session")
    flags, _ = start5(c, clean_start=False, expiry=0)
    assert flags.session_present, "session present after coming back"
    m = recv(c)
    assert (m.topic, m.payload, m.qos) == ("v5/session/a", b"while away", 1)
    # Still subscribed while connected.
    assert pub5(p, "v5/session/b", b"live") == 0
    assert recv(c).payload == b"live"
    stop5(c)
    # Expiry 0: the session ends with the disconnection.
    until_unmatched(p, "v5/session/c")
    c = client5("p5-session")
    flags, _ = start5(c, clean_start=False)
    assert not flags.session_present, "the session with expiry 0 is gone"
    none_within(c, 0.5)
    stop5(c)
    # A short interval: the session is gone once it has passed.
    c = client5("p5-short")
    start5(c, clean_start=True, expiry=1)
    assert sub5(c, "v5/short/#") == [1]
    stop5(c)
    left = time.monotonic()
    assert pub5(p, "v5/short/a", b"kept") == 0
    until_unmatched(p, "v5/short/b")
    lasted = time.monotonic() - left
    assert lasted >= 0.9, f"the session ended {lasted:.2f} s after the disconnection, expiry 1 s"
    c = client5("p5-short")
    flags, _ = start5(c, clean_start=False)
    assert not flags.session_present, "the session outlived its 1 s"
    none_within(c, 0.5)
    stop5(c)
    stop5(p)


def v5_sub_options():
    """No local, retain as published, retain handling 0/1/2, subscription
    identifiers, and UNSUBACK's 0x11 and SUBACK's 0x8F."""
    a, b = client5("p5-opt-a"), client5("p5-opt-b")
    start5(a)
    start5(b)
    # No local: a's own publish does not come back; b's does.
    assert sub5(a, "v5/opt/nl/#", noLocal=True) == [1]
    # (0x10 or 0: the server MAY say it knows of no subscriber.)
    assert pub5(a, "v5/opt/nl/own", b"mine") in (0, 0x10)
    assert pub5(b, "v5/opt/nl/other", b"theirs") == 0
    m = recv(a)
    assert (m.topic, m.payload) == ("v5/opt/nl/other", b"theirs"), (m.topic, m.payload)
    # Retained message on the topic for the rest.
    assert pub5(b, "v5/opt/ret", b"kept", retain=True) == 0x10
    # Retain handling 2: no retained message on subscribing.
    assert sub5(a, "v5/opt/ret", retainHandling=2) == [1]
    assert pub5(b, "v5/opt/ret", b"live-2") == 0
    m = recv(a)
    assert m.payload == b"live-2", f"retain handling 2 sent {m.payload!r}"
    # Live deliveries carry retain 0 without retain as published...
    assert pub5(b, "v5/opt/ret", b"kept-2", retain=True) == 0
    m = recv(a)
    assert (m.payload, m.retain) == (b"kept-2", False), (m.payload, m.retain)
    assert a.unsubscribe("v5/opt/ret")[0] == mqtt.MQTT_ERR_SUCCESS
    _, rcs = a.unsubscribed.get(timeout=T)
    assert [rc.value for rc in rcs] == [0], rcs
    # ...and retain 1 with it; retain handling 0 sends the retained one.
    assert sub5(a, "v5/opt/ret", retainAsPublished=True, retainHandling=0) == [1]
    m = recv(a)
    assert (m.payload, m.retain) == (b"kept-2", True), (m.payload, m.retain)
    assert pub5(b, "v5/opt/ret", b"kept-3", retain=True) == 0
    m = recv(a)
    assert (m.payload, m.retain) == (b"kept-3", True), (m.payload, m.retain)
    # Retain handling 1: the retained message for a new subscription
    # only; subscribing again to an existing one sends none.
    assert sub5(b, "v5/opt/ret", retainHandling=1) == [1]
    assert recv(b).payload == b"kept-3"
    assert sub5(b, "v5/opt/ret", retainHandling=1) == [1]
    assert pub5(a, "v5/opt/ret", b"live-4") == 0
    got = recv(b).payload
    assert got == b"live-4", f"retain handling 1 resent {got!r}"
    assert recv(a).payload == b"live-4"
    # Subscription identifiers come back on the deliveries.
    sid = Properties(PacketTypes.SUBSCRIBE)
    sid.SubscriptionIdentifier = 4242
    assert sub5(a, "v5/opt/sid/+", props=sid) == [1]
    assert pub5(b, "v5/opt/sid/x", b"tagged") == 0
    m = recv(a)
    assert m.payload == b"tagged"
    assert prop(m, "SubscriptionIdentifier") == [4242], m.properties
    # A subscription without one: none on its deliveries.
    assert sub5(b, "v5/opt/plain") == [1]
    assert pub5(a, "v5/opt/plain", b"untagged") == 0
    m = recv(b)
    assert m.payload == b"untagged" and prop(m, "SubscriptionIdentifier") is None, m.properties
    # Unsubscribing what was never subscribed: 0x11; invalid filters
    # (Paho checks the wildcards itself) are refused with 0x8F.
    assert a.unsubscribe("v5/opt/never")[0] == mqtt.MQTT_ERR_SUCCESS
    _, rcs = a.unsubscribed.get(timeout=T)
    assert [rc.value for rc in rcs] == [0x11], rcs
    assert sub5(a, "$share/group-without-filter") == [0x8F]
    # Deeper than any [topics] max_levels allows (at most 1024).
    assert sub5(a, "/".join(["deep"] * 1100)) == [0x8F]
    # Clean up the retained message.
    pub5(b, "v5/opt/ret", b"", retain=True)
    stop5(a)
    stop5(b)


def v5_takeover():
    """A second connection with the same client id: the first gets
    DISCONNECT 0x8E, the second has the session."""
    first = client5("p5-taken")
    start5(first, expiry=60)
    assert sub5(first, "v5/take/#") == [1]
    second = client5("p5-taken")
    flags, _ = start5(second, clean_start=False, expiry=60)
    assert flags.session_present, "the second connection resumed the session"
    rc = first.disconnected.get(timeout=T)
    assert rc.value == 0x8E, f"the first connection was told {rc}"
    first.loop_stop()
    # The subscription went along with the session.
    p = client5("p5-take-pub")
    start5(p)
    assert pub5(p, "v5/take/x", b"to the new one") == 0
    m = recv(second)
    assert m.payload == b"to the new one"
    none_within(first, 0.3)
    # End the session: expiry 0 in the DISCONNECT.
    end = Properties(PacketTypes.DISCONNECT)
    end.SessionExpiryInterval = 0
    second.disconnect(properties=end)
    second.disconnected.get(timeout=T)
    second.loop_stop()
    until_unmatched(p, "v5/take/y")
    c = client5("p5-taken")
    flags, _ = start5(c, clean_start=False)
    assert not flags.session_present, "the session ended with expiry 0"
    stop5(c)
    stop5(p)


def v5_will():
    """Will delay: sent after the delay; not sent when the client comes
    back in time; DISCONNECT 0x04 sends the will, a plain one does not."""
    watcher = client5("p5-will-watch")
    start5(watcher)
    assert sub5(watcher, "v5/will/#") == [1]
    delay = Properties(PacketTypes.WILLMESSAGE)
    delay.WillDelayInterval = 1
    delay.UserProperty = ("why", "gone")
    dying = client5("p5-will-dying", will=("v5/will/dying", b"late", 1, False, delay))
    start5(dying, expiry=60)
    dying._sock_close()
    dying.loop_stop()
    dropped = time.monotonic()
    m = recv(watcher)
    waited = time.monotonic() - dropped
    assert (m.topic, m.payload) == ("v5/will/dying", b"late")
    assert prop(m, "UserProperty") == [("why", "gone")], m.properties
    assert 0.8 <= waited <= 3.0, f"the will came {waited:.2f} s after the drop (delay 1 s)"
    # Back within the delay: no will. The delay leaves a loaded machine
    # room to reconnect, and the reconnection is timed, so that a slow
    # one is told apart from a will sent in spite of it.
    delay5 = Properties(PacketTypes.WILLMESSAGE)
    delay5.WillDelayInterval = 4
    back = client5("p5-will-back", will=("v5/will/back", b"never", 1, False, delay5))
    start5(back, expiry=60)
    back._sock_close()
    back.loop_stop()
    dropped = time.monotonic()
    back = client5("p5-will-back")
    flags, _ = start5(back, clean_start=False, expiry=60)
    back_in = time.monotonic() - dropped
    assert back_in < 3.0, f"the client took {back_in:.2f} s to come back (will delay 4 s)"
    none_within(watcher, 5.0)
    stop5(back)
    # DISCONNECT with reason 0x04 sends the will; reason 0 does not.
    w = client5("p5-will-04", will=("v5/will/04", b"asked for", 1, False))
    start5(w)
    w.disconnect(reasoncode=mqtt.ReasonCode(PacketTypes.DISCONNECT, identifier=0x04))
    w.disconnected.get(timeout=T)
    w.loop_stop()
    m = recv(watcher)
    assert (m.topic, m.payload) == ("v5/will/04", b"asked for")
    polite = client5("p5-will-00", will=("v5/will/00", b"not this", 1, False))
    start5(polite)
    stop5(polite)
    none_within(watcher, 0.7)
    stop5(watcher)


def v5_refusals():
    """Reason codes of refusals, on a broker whose one user sensor
    (password s3cret) may publish and subscribe under sensors/sensor/:
    CONNACK 0x86, 0x87 and 0x8C (enhanced authentication), SUBACK and
    PUBACK 0x87."""

    def connack(cid, login=None, method=None):
        c = client5(cid)
        if login:
            c.username_pw_set(*login)
        props = None
        if method:
            props = Properties(PacketTypes.CONNECT)
            props.AuthenticationMethod = method
        c.connect("127.0.0.1", PORT, keepalive=30, properties=props)
        c.loop_start()
        try:
            _, rc, _ = c.connected.get(timeout=T)
        finally:
            c.loop_stop()
        return rc.value

    assert connack("p5-bad", ("sensor", "nope")) == 0x86
    assert connack("p5-none") == 0x87
    assert connack("p5-enhanced", ("sensor", "s3cret"), "SCRAM-SHA-256") == 0x8C
    s = client5("p5-sensor")
    s.username_pw_set("sensor", "s3cret")
    start5(s)
    assert sub5(s, "sensors/sensor/#") == [1]
    assert sub5(s, "sensors/#") == [0x87]
    assert pub5(s, "elsewhere/x", b"no") == 0x87
    assert pub5(s, "sensors/sensor/t", b"yes") == 0
    m = recv(s)
    assert (m.topic, m.payload) == ("sensors/sensor/t", b"yes")
    none_within(s, 0.3)
    stop5(s)


def v5_flow():
    """The client's limits: receive maximum (at most that many QoS 1
    deliveries unacknowledged; Paho acks by hand here) and maximum packet
    size (a larger message is not sent to it, the next one is)."""
    p = client5("p5-flow-pub")
    start5(p)
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id="p5-flow",
        transport=TRANSPORT,
        protocol=mqtt.MQTTv5,
        reconnect_on_failure=False,
        manual_ack=True,
    )
    if TRANSPORT == "websockets":
        c.ws_set_options(path="/mqtt")
    c.inbox, c.connected, c.subscribed = queue.Queue(), queue.Queue(), queue.Queue()
    c.on_message = lambda cl, ud, msg: cl.inbox.put(msg)
    c.on_connect = lambda cl, ud, flags, rc, props: cl.connected.put(rc)
    c.on_subscribe = lambda cl, ud, mid, rcs, props: cl.subscribed.put([rc.value for rc in rcs])
    limits = Properties(PacketTypes.CONNECT)
    limits.ReceiveMaximum = 2
    limits.MaximumPacketSize = 256
    c.connect("127.0.0.1", PORT, keepalive=30, properties=limits)
    c.loop_start()
    assert c.connected.get(timeout=T) == 0
    c.subscribe("v5/flow/#", 1)
    assert c.subscribed.get(timeout=T) == [1]
    for i in range(5):
        assert pub5(p, f"v5/flow/{i}", f"m{i}".encode()) == 0
    first = [recv(c), recv(c)]
    assert [m.payload for m in first] == [b"m0", b"m1"]
    none_within(c, 0.7)
    # Each acknowledgement lets one more through.
    c.ack(first[0].mid, 1)
    m2 = recv(c)
    assert m2.payload == b"m2", m2.payload
    none_within(c, 0.3)
    for m in (first[1], m2):
        c.ack(m.mid, 1)
    rest = [recv(c), recv(c)]
    assert [m.payload for m in rest] == [b"m3", b"m4"]
    for m in rest:
        c.ack(m.mid, 1)
    # Over 256 bytes: not sent to this client; the small one after it is.
    assert pub5(p, "v5/flow/big", b"x" * 400) == 0
    assert pub5(p, "v5/flow/small", b"fits") == 0
    m = recv(c)
    assert (m.topic, m.payload) == ("v5/flow/small", b"fits"), (m.topic, len(m.payload))
    c.ack(m.mid, 1)
    c.disconnect()
    c.loop_stop()
    stop5(p)


def v5_keepalive():
    """A client that falls silent (keep-alive 1 s, its loop not run) gets
    DISCONNECT 0x8D after 1.5 keep-alives."""
    c = client5("p5-silent")
    c.connect("127.0.0.1", PORT, keepalive=1)
    deadline = time.monotonic() + T
    while c.connected.empty():
        assert time.monotonic() < deadline, "no CONNACK"
        c.loop(0.1)
    _, rc, _ = c.connected.get()
    assert rc == 0, rc
    # From here on nothing is sent: wait for the server to speak.
    silent = time.monotonic()
    readable, _, _ = select.select([c.socket()], [], [], T)
    waited = time.monotonic() - silent
    assert readable, "the server never cut the silent client"
    assert 1.2 <= waited <= 4.0, f"cut after {waited:.2f} s (keep-alive 1 s)"
    while c.disconnected.empty() and time.monotonic() < deadline:
        c.loop_read()
    rc = c.disconnected.get(timeout=1)
    assert rc.value == 0x8D, f"DISCONNECT said {rc}"


def v5_shutdown():
    """Prints "connected", then the broker is stopped by the test: the
    client gets DISCONNECT 0x8B."""
    c = client5("p5-shutdown")
    start5(c)
    print("connected", flush=True)
    rc = c.disconnected.get(timeout=T)
    assert rc.value == 0x8B, f"DISCONNECT said {rc}"
    c.loop_stop()


def v5_persistent_options():
    """No local and retain as published hold for a persistent session's
    subscription (session expiry > 0) as for a clean one."""
    p = client5("p5-popt-pub")
    start5(p)
    c = client5("p5-popt")
    start5(c, expiry=60)
    assert sub5(c, "v5/popt/nl/#", noLocal=True) == [1]
    assert sub5(c, "v5/popt/rap/#", retainAsPublished=True) == [1]
    pub5(c, "v5/popt/nl/own", b"own")
    assert pub5(p, "v5/popt/nl/other", b"other") == 0
    m = recv(c)
    assert (m.topic, m.payload) == ("v5/popt/nl/other", b"other"), f"no local: got {m.topic} {m.payload!r} first"
    assert pub5(p, "v5/popt/rap/t", b"kept", retain=True) == 0
    m = recv(c)
    assert (m.payload, m.retain) == (b"kept", True), f"retain as published: {m.payload!r} retain={m.retain}"
    pub5(p, "v5/popt/rap/t", b"", retain=True)
    end = Properties(PacketTypes.DISCONNECT)
    end.SessionExpiryInterval = 0
    c.disconnect(properties=end)
    c.disconnected.get(timeout=T)
    c.loop_stop()
    stop5(p)


def v5_takeover_will():
    """A connection with a delayed will taken over by a new connection
    with Clean Start 1: the old session ends, so its will is sent (MQTT 5
    §3.1.3.2.2: unless the new connection has Clean Start 0)."""
    watcher = client5("p5-tw-watch")
    start5(watcher)
    assert sub5(watcher, "v5/tw/#") == [1]
    delay = Properties(PacketTypes.WILLMESSAGE)
    delay.WillDelayInterval = 30
    old = client5("p5-tw", will=("v5/tw/old", b"session ended", 1, False, delay))
    start5(old, expiry=60)
    new = client5("p5-tw")
    start5(new, clean_start=True)
    assert old.disconnected.get(timeout=T).value == 0x8E
    old.loop_stop()
    try:
        m = recv(watcher, timeout=5)
    except queue.Empty:
        raise AssertionError("the taken-over session's will was not sent") from None
    assert (m.topic, m.payload) == ("v5/tw/old", b"session ended")
    stop5(new)
    stop5(watcher)


SCENARIOS = {
    "tcp": tcp,
    "secure": secure,
    "qos": qos_round_trips,
    "wildcards": wildcards_and_dollar_topics,
    "retained": retained,
    "will": will_on_abrupt_disconnect,
    "persist1": persistent_session_part1,
    "persist2": persistent_session_part2,
    "v5_properties": v5_properties,
    "v5_session": v5_session,
    "v5_sub_options": v5_sub_options,
    "v5_takeover": v5_takeover,
    "v5_will": v5_will,
    "v5_refusals": v5_refusals,
    "v5_flow": v5_flow,
    "v5_keepalive": v5_keepalive,
    "v5_shutdown": v5_shutdown,
    "v5_persistent_options": v5_persistent_options,
    "v5_takeover_will": v5_takeover_will,
}

if __name__ == "__main__":
    try:
        SCENARIOS[SCENARIO]()
    except Exception as e:  # noqa: BLE001 - report anything
        print(f"{SCENARIO} failed: {type(e).__name__}: {e}")
        traceback.print_exc()
        sys.exit(1)
    print(f"{SCENARIO} ok")
