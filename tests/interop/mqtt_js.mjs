// MQTT interoperability with MQTT.js (npm "mqtt" 5.x) over WebSocket.
// Run by tests/mqtt.rs against a broker it started: node mqtt_js.mjs PORT
// Exits 0 on success; every wait is bounded.
import mqtt from "mqtt";

const port = process.argv[2];
const url = `ws://127.0.0.1:${port}/mqtt`;
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
