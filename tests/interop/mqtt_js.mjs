// MQTT interoperability with MQTT.js (npm "mqtt" 5.x) over WebSocket.
// Run by tests/mqtt.rs against a broker it started: node mqtt_js.mjs PORT
// [secure CA JWT] (wss:// with the test CA, a password user and a JWT).
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
