// Integration tests against real brokers ($WHARF_BIN, else
// ../../target/debug/wharf), in Node with the `ws` package as WebSocket.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { WharfClient, WharfError } from '../dist/wharf.js';
import {
  ROOT,
  hs256,
  httpRequest,
  sha256,
  sleep,
  startBroker,
  trackingWebSocket,
  waitFor,
  within,
} from './helpers.mjs';

const fast = { backoff: { initialMs: 50, maxMs: 500 }, requestTimeoutMs: 5000, connectTimeoutMs: 5000 };

function client(broker, options = {}) {
  const tracking = trackingWebSocket();
  const c = new WharfClient(broker.ws, { WebSocket: tracking.WebSocket, ...fast, ...options });
  c.sockets = tracking;
  return c;
}

/** Publishes `from..to` (as text numbers) to `topic`, each confirmed before the next. */
async function publishRange(c, topic, from, to) {
  for (let i = from; i <= to; i++) await c.publish(topic, String(i));
}

function assertExactly(got, from, to) {
  const want = Array.from({ length: to - from + 1 }, (_, i) => from + i);
  const missing = want.filter((n) => !got.includes(n));
  const seen = new Set();
  const dups = got.filter((n) => (seen.has(n) ? true : (seen.add(n), false)));
  assert.deepEqual({ missing: missing.slice(0, 10), dups: dups.slice(0, 10) }, { missing: [], dups: [] });
  assert.deepEqual(got, want, 'in order');
}

describe('against a broker', { timeout: 120_000 }, () => {
  let broker;
  const open = [];
  const make = (options) => {
    const c = client(broker, options);
    open.push(c);
    return c;
  };
  before(async () => {
    broker = await startBroker();
  });
  after(async () => {
    await Promise.all(open.map((c) => c.close()));
    await broker?.cleanup();
  });

  test('connects, and publishes and subscribes text, bytes and headers', async () => {
    const c = make({ clientId: 'js-it-1' });
    const w = await within(5000, c.connect(), 'connect');
    assert.equal(w.clientId, 'js-it-1');
    assert.equal(w.version, 1);
    assert.ok(w.limits.maxPayload > 0);
    const got = [];
    const sub = c.subscribe('plain/a', (m) => got.push(m));
    const info = await sub.ready;
    assert.equal(info.epoch, '', 'no history on plain/#');
    assert.equal(info.gap, false);
    await c.publish('plain/a', 'héllo', { headers: { unit: 'C' } });
    await c.publish('plain/a', new Uint8Array([0, 1, 2, 255]));
    await c.publish('plain/a', new TextEncoder().encode('valid utf-8 bytes'));
    await waitFor('three messages', () => got.length === 3);
    assert.equal(got[0].text(), 'héllo');
    assert.deepEqual(got[0].headers, { unit: 'C' });
    assert.equal(got[0].topic, 'plain/a');
    assert.equal(got[1].binary, true);
    assert.deepEqual(got[1].payload, new Uint8Array([0, 1, 2, 255]));
    // Valid UTF-8 sent as bytes comes back as text.
    assert.equal(got[2].binary, false);
    assert.equal(got[2].text(), 'valid utf-8 bytes');
    assert.ok(got[1].seq > got[0].seq);
    const rtt = await c.ping();
    assert.ok(rtt >= 0);
    await sub.unsubscribe();
    await c.publish('plain/a', 'after');
    await sleep(100);
    assert.equal(got.length, 3);
  });

  test('a wildcard subscription, and a retained message first', async () => {
    const c = make();
    await c.connect();
    await c.publish('plain/r/1', 'kept', { retain: true });
    const got = [];
    const sub = c.subscribe('plain/r/+', (m) => got.push(m));
    assert.equal(sub.recovering, false);
    await sub.ready;
    await c.publish('plain/r/2', 'live');
    await waitFor('two messages', () => got.length === 2);
    assert.deepEqual(got.map((m) => [m.topic, m.text(), m.retained]), [['plain/r/1', 'kept', true], ['plain/r/2', 'live', false]]);
  });

  test('typed errors carry the broker codes', async () => {
    const c = make();
    await c.connect();
    const ended = [];
    const sub = c.subscribe('a/#/b', { recover: false, onEnded: (e) => ended.push(e.code) });
    await assert.rejects(sub.ready, (e) => e instanceof WharfError && e.code === 'invalid_filter' && /last level/.test(e.message));
    assert.deepEqual(ended, ['invalid_filter']);
    await assert.rejects(c.publish('a/+', 'x'), (e) => e instanceof WharfError && e.code === 'invalid_topic' && typeof e.rid === 'number');
    await assert.rejects(c.enqueue('q', 'x', { priority: 12 }), (e) => e.code === 'invalid_field');
    // The connection stays up after errors.
    await c.publish('plain/ok', 'x');
    assert.equal(c.state, 'connected');
  });

  test('recovery after the socket is cut twice: every message once, in order', async () => {
    const sub = make();
    const pub = make();
    await Promise.all([sub.connect(), pub.connect()]);
    const got = [];
    const infos = [];
    const s = sub.subscribe('chat/cut', { onMessage: (m) => got.push(Number(m.text())), onRecovery: (i) => infos.push(i) });
    assert.equal((await s.ready).gap, false);
    const N = 3000;
    const publishing = publishRange(pub, 'chat/cut', 1, N);
    await waitFor('500 received', () => got.length >= 500);
    sub.sockets.last().terminate();
    await waitFor('1500 received', () => got.length >= 1500);
    sub.sockets.last().terminate();
    await within(20_000, publishing, 'publishing');
    await waitFor(`${N} received`, () => got.length >= N, 15_000);
    await sleep(100);
    assertExactly(got, 1, N);
    assert.equal(infos.length, 3);
    assert.deepEqual(infos.slice(1).map((i) => [i.resumed, i.recovered, i.gap]), [[true, true, false], [true, true, false]]);
    assert.equal(s.position.offset, infos[0].offset + N);
    assert.equal(sub.sockets.sockets.length, 3);
  });

  test('not recovered: an epoch the topic does not have is an explicit gap', async () => {
    const c = make();
    await c.connect();
    await c.publish('chat/epoch', 'one');
    const infos = [];
    const s = c.subscribe('chat/epoch', { recover: { epoch: 'feedfeedfeed', offset: 1 }, onRecovery: (i) => infos.push(i) });
    const info = await s.ready;
    assert.equal(info.recovered, false);
    assert.equal(info.resumed, true);
    assert.equal(info.gap, true);
    assert.match(info.reason, /epoch/);
    assert.notEqual(info.epoch, 'feedfeedfeed');
    assert.deepEqual(s.position, { epoch: info.epoch, offset: info.offset });
    // Resuming from that position later recovers what came meanwhile.
    const got = [];
    await s.unsubscribe();
    await c.publish('chat/epoch', 'two');
    const s2 = c.subscribe('chat/epoch', { recover: s.position, onMessage: (m) => got.push(m.text()) });
    const info2 = await s2.ready;
    assert.deepEqual([info2.recovered, info2.replayed, info2.gap], [true, 1, false]);
    await waitFor('the missed message', () => got.length === 1);
    assert.deepEqual(got, ['two']);
  });

  test('a request in flight when the connection drops rejects with closed', async () => {
    const c = make();
    await c.connect();
    const p = c.publish('plain/x', 'maybe');
    c.sockets.last().terminate();
    await assert.rejects(p, (e) => e instanceof WharfError && e.code === 'closed');
    await waitFor('reconnected', () => c.state === 'connected', 5000);
    await c.publish('plain/x', 'surely');
  });

  test('queues: enqueue, ack, nack with redelivery, reject to the dead-letter queue', async () => {
    const c = make();
    await c.connect();
    const q = 'js/orders';
    const seqs = [];
    for (const body of ['a', 'b', 'c']) seqs.push((await c.enqueue(q, body, { headers: { t: body } })).seq);
    assert.deepEqual(seqs.map((s) => s - seqs[0]), [0, 1, 2]);
    const seen = [];
    const consumer = c.consume(q, { prefetch: 10 }, async (d) => {
      seen.push([d.text(), d.count]);
      if (d.text() === 'a') await d.ack();
      else if (d.text() === 'b' && d.count === 1) await d.nack({ delayMs: 0 });
      else if (d.text() === 'b') await d.ack();
      else await d.reject();
    });
    await consumer.ready;
    await waitFor('four deliveries', () => seen.length === 4);
    assert.deepEqual(
      seen.sort((x, y) => (x[0] + x[1]).localeCompare(y[0] + y[1])),
      [['a', 1], ['b', 1], ['b', 2], ['c', 1]],
    );
    const dlq = [];
    const dead = c.consume(`${q}.dlq`, {}, (d) => {
      dlq.push([d.text(), d.headers['dead-letter-reason']]);
      d.ack();
    });
    await dead.ready;
    await waitFor('the dead letter', () => dlq.length === 1);
    assert.deepEqual(dlq, [['c', 'rejected']]);
    await consumer.cancel();
    await dead.cancel();
  });

  test('a consumer comes back after a reconnect; unacked deliveries come again', async () => {
    const c = make();
    await c.connect();
    const q = 'js/redeliver';
    await c.enqueue(q, 'job');
    const got = [];
    let acked = false;
    const consumer = c.consume(q, { prefetch: 1 }, async (d) => {
      got.push(d);
      if (d.count > 1) {
        await d.ack();
        acked = true;
      }
    });
    await waitFor('a delivery', () => got.length === 1);
    c.sockets.last().terminate();
    await waitFor('the redelivery', () => got.length === 2, 10_000);
    assert.equal(got[1].count, 2);
    assert.equal(got[1].seq, got[0].seq);
    await assert.rejects(got[0].ack(), (e) => e.code === 'stale_delivery');
    await waitFor('acked', () => acked);
    await consumer.cancel();
  });

  test('GET /client.js, when the broker serves it, is dist/wharf.js', async (t) => {
    const r = await httpRequest(broker.port, 'GET', '/client.js');
    if (r.status === 404) {
      t.skip('this broker build does not serve /client.js yet');
      return;
    }
    assert.equal(r.status, 200);
    assert.equal(r.body, readFileSync(join(ROOT, 'dist/wharf.js'), 'utf8'));
  });
});

describe('broker restarts', { timeout: 120_000 }, () => {
  test('SIGTERM keeps the epoch (recovered, queued publishes sent); SIGKILL renews it (a gap is reported)', async () => {
    const broker = await startBroker();
    const sub = client(broker);
    const pub = client(broker);
    try {
      await Promise.all([sub.connect(), pub.connect()]);
      const got = [];
      const infos = [];
      const s = sub.subscribe('chat/restart', { onMessage: (m) => got.push(m.text()), onRecovery: (i) => infos.push(i) });
      await s.ready;
      await publishRange(pub, 'chat/restart', 1, 100);
      await waitFor('100 received', () => got.length === 100);
      const epoch = s.position.epoch;

      await broker.stop('SIGTERM');
      await waitFor('both clients see the loss', () => sub.state !== 'connected' && pub.state !== 'connected');
      // Made while the broker is down: waits in the outbox.
      const queued = pub.publish('chat/restart', '101');
      await broker.restart();
      await within(10_000, queued, 'the queued publish');
      await waitFor('101 received', () => got.length === 101, 10_000);
      assert.deepEqual(got, Array.from({ length: 101 }, (_, i) => String(i + 1)));
      assert.deepEqual([infos[1].recovered, infos[1].gap, infos[1].epoch], [true, false, epoch]);

      // A crash: the history may have lost messages, so a new epoch.
      await broker.stop('SIGKILL');
      await broker.restart();
      await waitFor('resubscribed', () => infos.length === 3, 10_000);
      assert.equal(infos[2].recovered, false);
      assert.equal(infos[2].gap, true);
      assert.notEqual(infos[2].epoch, epoch);
      await waitFor('the publisher is back', () => pub.state === 'connected', 10_000);
      await pub.publish('chat/restart', 'after the crash');
      await waitFor('the new message', () => got.at(-1) === 'after the crash', 5000);
      assert.equal(got.length, 102);
    } finally {
      await sub.close();
      await pub.close();
      await broker.cleanup();
    }
  });
});

describe('authentication', { timeout: 120_000 }, () => {
  const secret = 'a-test-secret-that-is-long-enough-for-hs256';
  let broker;
  before(async () => {
    broker = await startBroker({
      config: `[auth]
max_failures = 100

[[auth.tokens]]
name = "tester"
token_sha256 = "${sha256('good-token')}"
[auth.tokens.allow]
publish = ["chat/#"]
subscribe = ["chat/#"]

[auth.jwt]
leeway_s = 0
[[auth.jwt.keys]]
algorithm = "HS256"
secret = "${secret}"

[[history]]
filter = "chat/#"
size = 100
`,
    });
  });
  after(async () => {
    await broker?.cleanup();
  });

  test('a wrong token: connect rejects with unauthorized and the client stops', async () => {
    const c = client(broker, { token: 'wrong-token' });
    const disconnects = [];
    c.on('disconnected', (i) => disconnects.push(i));
    await assert.rejects(within(5000, c.connect(), 'connect'), (e) => e instanceof WharfError && e.code === 'unauthorized');
    assert.equal(c.state, 'closed');
    assert.equal(disconnects.at(-1).willReconnect, false);
    assert.equal(disconnects.at(-1).code, 4401);
    await sleep(200);
    assert.equal(c.sockets.sockets.length, 1, 'no retry');
  });

  test('no token at all is unauthorized too', async () => {
    const c = client(broker);
    const first = await within(15_000, c.connect().then(() => null, (e) => e), 'connect');
    // Anonymous clients are refused at their first frame (or at the
    // hello timeout): the client sends hello at once.
    assert.equal(first?.code, 'unauthorized');
  });

  test('the right token connects; what it may not do is forbidden', async () => {
    const c = client(broker, { token: 'good-token' });
    try {
      await within(5000, c.connect(), 'connect');
      await c.publish('chat/auth', 'ok');
      await assert.rejects(c.publish('other/x', 'no'), (e) => e.code === 'forbidden');
      const s = c.subscribe('other/y');
      await assert.rejects(s.ready, (e) => e.code === 'forbidden');
      assert.equal(c.state, 'connected');
    } finally {
      await c.close();
    }
  });

  test('a JWT from getToken is refreshed before it expires: the session lives on', async () => {
    let minted = 0;
    const getToken = () => {
      minted++;
      const now = Math.floor(Date.now() / 1000);
      return hs256({ sub: 'js-jwt', iat: now, exp: now + 3, wharf: { publish: ['chat/#'], subscribe: ['chat/#'] } }, secret);
    };
    const c = client(broker, { getToken });
    const disconnects = [];
    const errors = [];
    c.on('disconnected', (i) => disconnects.push(i));
    c.on('error', (e) => errors.push(e));
    try {
      await within(5000, c.connect(), 'connect');
      const got = [];
      const s = c.subscribe('chat/jwt', (m) => got.push(m.text()));
      await s.ready;
      // Three token lifetimes.
      await sleep(7000);
      assert.deepEqual(disconnects, []);
      assert.deepEqual(errors, []);
      assert.ok(minted >= 3, `minted ${minted}`);
      await c.publish('chat/jwt', 'still here');
      await waitFor('the message', () => got.length === 1);
    } finally {
      await c.close();
    }
  });

  test('a static JWT that expires: the broker ends the session and the client stops', async () => {
    const now = Math.floor(Date.now() / 1000);
    const token = hs256({ sub: 'js-jwt', iat: now, exp: now + 2, wharf: { publish: ['chat/#'] } }, secret);
    const c = client(broker, { token });
    const disconnects = [];
    const errors = [];
    c.on('disconnected', (i) => disconnects.push(i));
    c.on('error', (e) => errors.push(e.code));
    await within(5000, c.connect(), 'connect');
    await waitFor('the end', () => c.state === 'closed', 8000);
    assert.equal(disconnects[0].code, 4403);
    assert.equal(disconnects[0].willReconnect, true);
    assert.equal(disconnects.at(-1).willReconnect, false);
    assert.ok(errors.every((e) => e === 'unauthorized'), errors.join());
  });
});
