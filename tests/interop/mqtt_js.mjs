// MQTT interoperability with MQTT.js (npm "mqtt" 5.x) over WebSocket.
// Run by tests/it/mqtt.rs against a broker it started: node mqtt_js.mjs PORT
// [secure CA JWT] (wss:// with the test CA, a password user and a JWT)
// or [v5 ws|tcp] (MQTT 5 over WebSocket, or over TCP with PORT the MQTT
// TCP listener's, from tests/it/mqtt_tcp.rs).
// Exits 0 on success; every wait is bounded.
import fs from "node:fs";
import mqtt from "mqtt";

const port = process.argv[2];
const url = `ws://127.0.0.1:${port}/mqtt`;
const wss = `wss://127.0.0.1:${port}/mqtt`;
const T = 10000;

function fail(why) {
  console.log(`mqtt.js failed: ${why}`);
  process.exit(1);
}
setTimeout(() => fail("timed out"), 4 * T).unref();

function connect(clientId, extra = {}) {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { clientId, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: T, ...extra });
    c.once("connect", () => resolve(c));
    c.once("error", reject);
  });
}

function next(c, timeout = T) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("no message")), timeout);
    c.once("message", (topic, payload, packet) => {
      clearTimeout(t);
      resolve({ topic, payload, packet });
    });
  });
}

// The CONNACK code a connection is refused with (0 if accepted).
function refusal(clientId, extra) {
  return new Promise((resolve) => {
    const c = mqtt.connect(wss, { clientId, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: T, ...extra });
    c.once("connect", () => { c.end(); resolve(0); });
    c.once("error", (e) => { c.end(true); resolve(e.code); });
  });
}

async function secure(ca, jwt) {
  const tls = { ca: fs.readFileSync(ca) };
  if ((await refusal("js-bad", { ...tls, username: "alice", password: "nope" })) !== 4) fail("wrong password: not CONNACK 4");
  if ((await refusal("js-none", tls)) !== 5) fail("no credentials: not CONNACK 5");
  const connectTo = (clientId, extra) => new Promise((resolve, reject) => {
    const c = mqtt.connect(wss, { clientId, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: T, ...tls, ...extra });
    c.once("connect", () => resolve(c));
    c.once("error", reject);
  });
  const alice = await connectTo("js-alice", { username: "alice", password: "wonderland" });
  const granted = await alice.subscribeAsync("secure/alice/#", { qos: 1 });
  if (granted[0].qos !== 1) fail(`alice's own filter: ${JSON.stringify(granted)}`);
  // MQTT.js rejects a subscription the SUBACK refuses (0x80).
  const refused = await alice.subscribeAsync("secure/#", { qos: 1 }).then(
    (g) => `granted ${JSON.stringify(g)}`,
    (e) => (e.message.includes("Subscribe error") ? "refused" : e.message),
  );
  if (refused !== "refused") fail(`an uncovered filter: ${refused}`);
  const device = await connectTo("js-jwt", { username: "ignored", password: jwt });
  await device.subscribeAsync("jwt/#", { qos: 1 });
  const got = next(device);
  await device.publishAsync("jwt/x", Buffer.from("token"), { qos: 1 });
  if ((await got).payload.toString() !== "token") fail("JWT round trip");
  for (const x of [alice, device]) await x.endAsync();
  console.log("mqtt.js secure ok");
  process.exit(0);
}

// MQTT 5: user properties, topic aliases both ways, subscription
// identifiers, message expiry (live and for a session that was away),
// PUBACK reason codes.
async function v5(transport) {
  const base = transport === "tcp" ? `mqtt://127.0.0.1:${port}` : url;
  const connect5 = (clientId, extra = {}) => new Promise((resolve, reject) => {
    const c = mqtt.connect(base, { clientId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: T, ...extra });
    // Deliveries queue up until taken (a resumed session's may come
    // right after the CONNACK); PUBACK reason codes by packet id.
    c.inbox = [];
    c.waiters = [];
    c.pubacks = new Map();
    c.on("message", (topic, payload, packet) => {
      const m = { topic, payload, packet };
      const w = c.waiters.shift();
      if (w) w(m); else c.inbox.push(m);
    });
    c.on("packetreceive", (p) => {
      if (p.cmd === "puback") c.pubacks.set(p.messageId, p.reasonCode ?? 0);
    });
    c.once("connect", (connack) => { c.connack = connack; resolve(c); });
    c.once("error", reject);
  });
  const recv = (c, timeout = T) => {
    if (c.inbox.length) return Promise.resolve(c.inbox.shift());
    return new Promise((resolve, reject) => {
      const w = (m) => { clearTimeout(t); resolve(m); };
      const t = setTimeout(() => {
        c.waiters.splice(c.waiters.indexOf(w), 1);
        reject(new Error(`${c.options.clientId}: no message within ${timeout} ms`));
      }, timeout);
      c.waiters.push(w);
    });
  };
  const noneWithin = async (c, ms) => {
    const m = await recv(c, ms).catch(() => null);
    if (m) fail(`${c.options.clientId}: unexpected ${m.topic} ${m.payload}`);
  };
  // QoS 1 publish; the PUBACK's reason code.
  const pub = async (c, topic, payload, properties = {}, more = {}) => {
    const sent = await c.publishAsync(topic, Buffer.from(payload), { qos: 1, properties, ...more });
    const code = c.pubacks.get(sent.messageId);
    if (code === undefined) fail(`no PUBACK seen for ${topic}`);
    c.pubacks.delete(sent.messageId);
    return code;
  };
  const expect = (what, got, want) => {
    if (JSON.stringify(got) !== JSON.stringify(want)) {
      fail(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    }
  };

  // The subscriber lets the server use up to 10 topic aliases.
  const sub = await connect5("js5-sub", { properties: { topicAliasMaximum: 10 } });
  expect("CONNACK topic alias maximum", sub.connack.properties?.topicAliasMaximum, 64);
  expect("CONNACK maximum packet size", sub.connack.properties?.maximumPacketSize, 1 << 20);
  const publisher = await connect5("js5-pub");
  const granted = await sub.subscribeAsync("js5/#", { qos: 1, properties: { subscriptionIdentifier: 77 } });
  expect("SUBACK", granted.map((g) => g.qos), [1]);

  // User properties, content type, message expiry, subscription
  // identifier.
  const props = {
    userProperties: { region: "eu-west", tenant: "acme" },
    contentType: "text/plain",
    messageExpiryInterval: 120,
  };
  expect("PUBACK with a subscriber", await pub(publisher, "js5/a", "hello", props), 0);
  let m = await recv(sub);
  expect("topic and payload", [m.topic, m.payload.toString()], ["js5/a", "hello"]);
  expect("user properties", m.packet.properties?.userProperties, { region: "eu-west", tenant: "acme" });
  expect("content type", m.packet.properties?.contentType, "text/plain");
  expect("subscription identifier", m.packet.properties?.subscriptionIdentifier, 77);
  const left = m.packet.properties?.messageExpiryInterval;
  if (!(left >= 110 && left <= 120)) fail(`message expiry interval ${left}, published with 120`);

  // Server to client aliases: the first delivery on a topic names it and
  // its alias, the next has the alias alone (MQTT.js fills the topic in).
  const first = m.packet.properties?.topicAlias;
  if (!(first >= 1 && first <= 10)) fail(`no topic alias within 1..10 on the first delivery: ${first}`);
  expect("first delivery's topic", m.packet.topic.toString(), "js5/a");
  expect("PUBACK", await pub(publisher, "js5/a", "again"), 0);
  m = await recv(sub);
  expect("aliased delivery", [m.topic, m.payload.toString(), m.packet.topic.toString()], ["js5/a", "again", ""]);
  expect("aliased delivery's alias", m.packet.properties?.topicAlias, first);

  // Client to server aliases: the publisher registers alias 3 for a topic,
  // then publishes with the alias alone.
  expect("PUBACK (alias registered)", await pub(publisher, "js5/alias/long/topic/name", "one", { topicAlias: 3 }), 0);
  m = await recv(sub);
  expect("registered alias", [m.topic, m.payload.toString()], ["js5/alias/long/topic/name", "one"]);
  expect("PUBACK (alias alone)", await pub(publisher, "", "two", { topicAlias: 3 }), 0);
  m = await recv(sub);
  expect("publish by alias", [m.topic, m.payload.toString()], ["js5/alias/long/topic/name", "two"]);
  // MQTT.js's own aliasing (autoUseTopicAlias) agrees with the server.
  const auto = await connect5("js5-auto", { autoUseTopicAlias: true, autoAssignTopicAlias: true });
  for (const n of ["1", "2", "3"]) {
    expect(`auto alias ${n}`, await pub(auto, "js5/auto", n), 0);
    m = await recv(sub);
    expect(`auto alias ${n} delivered`, [m.topic, m.payload.toString()], ["js5/auto", n]);
  }

  // Nobody subscribed: 0x10.
  expect("PUBACK without subscribers", await pub(publisher, "elsewhere/x", "void"), 0x10);

  // Message expiry: a session away (expiry 60) keeps what is published
  // meanwhile; what expires before it comes back is not delivered, the
  // rest comes with what is left of its interval.
  const away = await connect5("js5-away", { clean: false, properties: { sessionExpiryInterval: 60 } });
  await away.subscribeAsync("js5expiry/#", { qos: 1 });
  await away.endAsync();
  expect("PUBACK to a session away", await pub(publisher, "js5expiry/short", "expires", { messageExpiryInterval: 1 }), 0);
  expect("PUBACK to a session away", await pub(publisher, "js5expiry/long", "lasts", { messageExpiryInterval: 60 }), 0);
  await new Promise((r) => setTimeout(r, 2200));
  const back = await connect5("js5-away", { clean: false, properties: { sessionExpiryInterval: 0 } });
  expect("session present", back.connack.sessionPresent, true);
  m = await recv(back);
  expect("what had not expired", [m.topic, m.payload.toString()], ["js5expiry/long", "lasts"]);
  const rest = m.packet.properties?.messageExpiryInterval;
  if (!(rest >= 50 && rest <= 58)) fail(`remaining expiry ${rest}, published with 60 over 2 s ago`);
  await noneWithin(back, 500);

  for (const x of [sub, publisher, auto, back]) await x.endAsync();
  console.log(`mqtt.js v5 ${transport} ok`);
  process.exit(0);
}

if (process.argv[3] === "v5") {
  await v5(process.argv[4] ?? "ws").catch((e) => fail(e.stack ?? e.message));
}

if (process.argv[3] === "secure") {
  await secure(process.argv[4], process.argv[5]).catch((e) => fail(e.message));
}

try {
  const a = await connect("js-a");
  const b = await connect("js-b");
  await b.subscribeAsync("js/+/x", { qos: 2 });
  for (const qos of [0, 1, 2]) {
    const got = next(b);
    await a.publishAsync(`js/${qos}/x`, Buffer.from(`v${qos}`), { qos });
    const m = await got;
    if (m.topic !== `js/${qos}/x` || m.payload.toString() !== `v${qos}` || m.packet.qos !== qos) {
      fail(`QoS ${qos}: got ${m.topic} ${m.payload} qos ${m.packet.qos}`);
    }
  }
  // Binary payload, byte for byte.
  const blob = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  const gotBlob = next(b);
  await a.publishAsync("js/bin/x", blob, { qos: 1 });
  if (!(await gotBlob).payload.equals(blob)) fail("binary payload changed");
  // Retained, delivered on subscribe with the retain flag.
  await a.publishAsync("js/retained", Buffer.from("kept"), { qos: 1, retain: true });
  const c = await connect("js-c");
  const gotRetained = next(c);
  await c.subscribeAsync("js/retained", { qos: 1 });
  const r = await gotRetained;
  if (r.payload.toString() !== "kept" || !r.packet.retain) fail("retained message");
  for (const x of [a, b, c]) await x.endAsync();
  console.log("mqtt.js ok");
  process.exit(0);
} catch (e) {
  fail(e.message);
}
