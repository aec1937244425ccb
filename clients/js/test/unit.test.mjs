// Unit tests without a broker: payload encoding, backoff, JWT times, the
// recovery tracker, and the client against an in-memory WebSocket.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  RecoveryTracker,
  WharfClient,
  WharfError,
  backoffDelay,
  base64ToBytes,
  bytesToBase64,
  decodePayload,
  encodePayload,
  jwtTimes,
  Message,
  refreshDelayMs,
} from '../dist/wharf.js';
import { hs256, sleep, waitFor } from './helpers.mjs';

describe('payloads', () => {
  test('base64 matches Buffer for every length and byte', () => {
    for (let n = 0; n < 70; n++) {
      const bytes = new Uint8Array(n);
      for (let i = 0; i < n; i++) bytes[i] = (i * 89 + n * 7) & 255;
      const b64 = Buffer.from(bytes).toString('base64');
      assert.equal(bytesToBase64(bytes), b64, `length ${n}`);
      assert.deepEqual(base64ToBytes(b64), bytes, `length ${n}`);
      assert.deepEqual(base64ToBytes(b64.replace(/=+$/, '')), bytes, `unpadded, length ${n}`);
    }
    const all = new Uint8Array(256).map((_, i) => i);
    assert.equal(bytesToBase64(all), Buffer.from(all).toString('base64'));
    const big = new Uint8Array(100_003).map((_, i) => (i * 31) & 255);
    assert.equal(bytesToBase64(big), Buffer.from(big).toString('base64'));
  });

  test('invalid base64 is a protocol error', () => {
    for (const bad of ['a', 'ab!c', 'abc===', 'é===']) {
      assert.throws(() => base64ToBytes(bad), (e) => e instanceof WharfError && e.code === 'protocol', bad);
    }
  });

  test('encodePayload: text as is, bytes as base64', () => {
    assert.deepEqual(encodePayload('héllo'), { payload: 'héllo' });
    assert.deepEqual(encodePayload(new Uint8Array([0, 1, 2, 255])), { payload: 'AAEC/w==', encoding: 'base64' });
    assert.deepEqual(encodePayload(new Uint8Array([0, 1, 2, 255]).buffer), { payload: 'AAEC/w==', encoding: 'base64' });
    const view = new DataView(new Uint8Array([9, 0, 1, 2, 255, 9]).buffer, 1, 4);
    assert.deepEqual(encodePayload(view), { payload: 'AAEC/w==', encoding: 'base64' });
    assert.deepEqual(encodePayload(Buffer.from('hi')), { payload: 'aGk=', encoding: 'base64' });
    assert.throws(() => encodePayload(42), TypeError);
  });

  test('decodePayload and Message reading', () => {
    assert.deepEqual(decodePayload('AAEC/w==', 'base64'), new Uint8Array([0, 1, 2, 255]));
    assert.deepEqual(decodePayload('hé'), new Uint8Array([0x68, 0xc3, 0xa9]));
    const bin = new Message({ op: 'message', sub: 's', topic: 't', seq: 3, payload: '/w==', encoding: 'base64' });
    assert.equal(bin.binary, true);
    assert.deepEqual(bin.payload, new Uint8Array([255]));
    assert.equal(bin.text(), '\ufffd');
    const text = new Message({ op: 'message', sub: 's', topic: 't', seq: 4, payload: '{"a":1}', headers: { k: 'v' }, retained: true });
    assert.equal(text.binary, false);
    assert.deepEqual(text.json(), { a: 1 });
    assert.equal(text.seq, 4);
    assert.equal(text.retained, true);
    assert.deepEqual(text.headers, { k: 'v' });
    assert.deepEqual(new Message({ topic: 't', seq: 1, payload: 'x' }).headers, {});
  });
});

describe('backoff', () => {
  test('full jitter under a cap that doubles up to maxMs', () => {
    const top = () => 0.999999;
    assert.deepEqual(
      [0, 1, 2, 3, 4, 5, 6, 7, 8].map((a) => backoffDelay(a, { initialMs: 100, maxMs: 5000 }, top)),
      [99, 199, 399, 799, 1599, 3199, 4999, 4999, 4999],
    );
    assert.equal(backoffDelay(3, { initialMs: 100, maxMs: 5000 }, () => 0), 0);
    assert.equal(backoffDelay(1, { initialMs: 100, maxMs: 5000 }, () => 0.5), 100);
    assert.equal(backoffDelay(2, { initialMs: 10, factor: 3, maxMs: 1000 }, top), 89);
    // Defaults: 500 ms doubling to 30 s; huge attempt numbers stay capped.
    assert.equal(backoffDelay(0, {}, top), 499);
    assert.equal(backoffDelay(10_000, {}, top), 29_999);
    for (let i = 0; i < 1000; i++) {
      const d = backoffDelay(4, { initialMs: 100, maxMs: 1000 });
      assert.ok(d >= 0 && d < 1000);
    }
  });
});

describe('tokens', () => {
  const secret = 'x'.repeat(32);
  test('jwtTimes reads exp and iat, null for anything else', () => {
    assert.deepEqual(jwtTimes(hs256({ sub: 'a', exp: 2000000000, iat: 1999999000 }, secret)), { exp: 2000000000, iat: 1999999000 });
    assert.deepEqual(jwtTimes(hs256({ sub: 'a', exp: 2000000000 }, secret)), { exp: 2000000000 });
    assert.equal(jwtTimes(hs256({ sub: 'a' }, secret)), null);
    assert.equal(jwtTimes(hs256({ sub: 'a', exp: 'soon' }, secret)), null);
    assert.equal(jwtTimes('wharf_9Qm0abc'), null);
    assert.equal(jwtTimes('a.b.c'), null);
    assert.equal(jwtTimes('a.!!!.c'), null);
  });

  test('refreshDelayMs: 10% of the lifetime before exp, between 1 s and the margin', () => {
    const now = 1_000_000_000_000;
    const s = now / 1000;
    const token = (life, iat = s) => hs256({ sub: 'a', iat, exp: s + life }, secret);
    assert.equal(refreshDelayMs(token(3600), now), 3600_000 - 30_000);
    assert.equal(refreshDelayMs(token(60), now), 54_000);
    assert.equal(refreshDelayMs(token(5), now), 4_000);
    assert.equal(refreshDelayMs(token(3600), now, 10_000), 3590_000);
    // Issued an hour ago, valid for 5 more minutes: the margin is 30 s.
    assert.equal(refreshDelayMs(token(300, s - 3600), now), 270_000);
    // Without iat the lifetime counts from now.
    assert.equal(refreshDelayMs(hs256({ sub: 'a', exp: s + 20 }, secret), now), 18_000);
    assert.equal(refreshDelayMs(token(-10), now), 0);
    assert.equal(refreshDelayMs('service-token', now), null);
  });
});

describe('RecoveryTracker', () => {
  const m = (seq, retained = false) => ({ seq, retained });
  const seqs = (list) => list.map((x) => (x.retained ? `r${x.seq}` : x.seq));

  test('a first subscribe holds messages until subscribed, then starts at the latest offset', () => {
    const t = new RecoveryTracker();
    assert.deepEqual(t.begin(), { epoch: '', offset: 0 });
    assert.equal(t.awaiting, true);
    assert.deepEqual(t.offer(m(7, true)), []);
    assert.deepEqual(t.offer(m(11)), []);
    assert.deepEqual(t.offer(m(12)), []);
    assert.deepEqual(seqs(t.settle({ epoch: 'E', offset: 10, recovered: false })), ['r7', 11, 12]);
    assert.equal(t.awaiting, false);
    assert.deepEqual(t.position, { epoch: 'E', offset: 12 });
    assert.deepEqual(seqs(t.offer(m(13))), [13]);
    assert.deepEqual(t.position, { epoch: 'E', offset: 13 });
  });

  test('a recovered resubscribe: replay before or after subscribed, duplicates dropped', () => {
    const t = new RecoveryTracker({ epoch: 'E', offset: 12 });
    assert.deepEqual(t.begin(), { epoch: 'E', offset: 12 });
    assert.deepEqual(t.offer(m(12)), []); // a duplicate, held
    assert.deepEqual(t.offer(m(13)), []);
    assert.deepEqual(seqs(t.settle({ epoch: 'E', offset: 15, recovered: true })), [13]);
    // The rest of the replay comes after the answer.
    assert.deepEqual(seqs(t.offer(m(14))), [14]);
    assert.deepEqual(seqs(t.offer(m(14))), []);
    assert.deepEqual(seqs(t.offer(m(15))), [15]);
    assert.deepEqual(seqs(t.offer(m(16))), [16]);
    assert.deepEqual(t.position, { epoch: 'E', offset: 16 });
    assert.equal(t.duplicates, 2);
  });

  test('a lost connection mid-replay resumes from what was delivered, not from the answer', () => {
    const t = new RecoveryTracker({ epoch: 'E', offset: 100 });
    t.begin();
    t.settle({ epoch: 'E', offset: 500, recovered: true });
    for (let s = 101; s <= 200; s++) t.offer(m(s));
    t.abort();
    assert.deepEqual(t.begin(), { epoch: 'E', offset: 200 });
  });

  test('a new epoch: offsets start over, nothing is taken for a duplicate', () => {
    const t = new RecoveryTracker({ epoch: 'E', offset: 50 });
    t.begin();
    assert.deepEqual(t.offer(m(3)), []); // live under the new epoch
    assert.deepEqual(t.offer(m(4)), []);
    assert.deepEqual(seqs(t.settle({ epoch: 'F', offset: 2, recovered: false })), [3, 4]);
    assert.deepEqual(t.position, { epoch: 'F', offset: 4 });
    assert.deepEqual(seqs(t.offer(m(5))), [5]);
  });

  test('pushed out of the history: the position jumps to the latest offset', () => {
    const t = new RecoveryTracker({ epoch: 'E', offset: 5 });
    t.begin();
    assert.deepEqual(seqs(t.settle({ epoch: 'E', offset: 900, recovered: false })), []);
    assert.deepEqual(t.position, { epoch: 'E', offset: 900 });
    assert.deepEqual(seqs(t.offer(m(901))), [901]);
  });

  test('out of order (a high-priority publish overtakes): each offset once, position below the hole', () => {
    const t = new RecoveryTracker({ epoch: 'E', offset: 10 });
    t.begin();
    t.settle({ epoch: 'E', offset: 10, recovered: true });
    assert.deepEqual(seqs(t.offer(m(14))), [14]);
    assert.deepEqual(t.position, { epoch: 'E', offset: 10 });
    assert.deepEqual(seqs(t.offer(m(11))), [11]);
    assert.deepEqual(seqs(t.offer(m(12))), [12]);
    assert.deepEqual(seqs(t.offer(m(14))), []);
    assert.deepEqual(seqs(t.offer(m(13))), [13]);
    assert.deepEqual(t.position, { epoch: 'E', offset: 14 });
    // A resubscribe from 12 (say) would replay 13 and 14: both dropped.
    assert.deepEqual(seqs(t.offer(m(13))), []);
  });

  test('a hole that never fills is given up past maxAhead', () => {
    const t = new RecoveryTracker({ epoch: 'E', offset: 0 }, { maxAhead: 3 });
    t.begin();
    t.settle({ epoch: 'E', offset: 0, recovered: true });
    for (const s of [1, 2, 5, 6, 7]) t.offer(m(s));
    assert.deepEqual(t.position, { epoch: 'E', offset: 2 });
    t.offer(m(8)); // four ahead: 3 and 4 are given up
    assert.deepEqual(t.position, { epoch: 'E', offset: 8 });
  });

  test('the hold is bounded', () => {
    const t = new RecoveryTracker({ epoch: 'E', offset: 0 }, { maxHeld: 2 });
    t.begin();
    assert.deepEqual(t.offer(m(1)), []);
    assert.deepEqual(t.offer(m(2)), []);
    assert.equal(t.offer(m(3)), false);
    assert.equal(t.awaiting, false);
    assert.deepEqual(t.begin(), { epoch: 'E', offset: 0 });
  });
});

// ---------------------------------------------------------------------------
// The client against an in-memory WebSocket

function fakeServer() {
  const sockets = [];
  class FakeSocket {
    constructor(url, protocols) {
      this.url = url;
      this.protocols = protocols;
      this.readyState = 0;
      this.sent = [];
      this.onopen = this.onmessage = this.onclose = this.onerror = null;
      sockets.push(this);
      setTimeout(() => {
        if (this.readyState !== 0) return;
        this.readyState = 1;
        this.onopen?.({});
      }, 0);
    }
    send(data) {
      if (this.readyState !== 1) throw new Error('not open');
      this.sent.push(JSON.parse(data));
    }
    close(code = 1000, reason = '') {
      if (this.readyState >= 2) return;
      this.readyState = 3;
      this.closedWith = code;
      setTimeout(() => this.onclose?.({ code, reason }), 0);
    }
    // The test's side.
    push(frame) {
      this.onmessage?.({ data: JSON.stringify(frame) });
    }
    drop(code = 1006, reason = '') {
      this.readyState = 3;
      this.onclose?.({ code, reason });
    }
    frames(op) {
      return this.sent.filter((f) => f.op === op);
    }
    welcome() {
      this.push({
        op: 'welcome',
        session: 'sess',
        client_id: 'cid',
        version: 1,
        limits: { max_frame: 1, max_payload: 2, outbound_limit: 3, rate_per_s: 4 },
      });
    }
  }
  return { WebSocket: FakeSocket, sockets, last: () => sockets[sockets.length - 1] };
}

const quick = { backoff: { initialMs: 1, maxMs: 5 }, heartbeatMs: 0, requestTimeoutMs: 500 };

async function connected(fake, options = {}) {
  const client = new WharfClient('ws://broker.test/ws', { WebSocket: fake.WebSocket, ...quick, ...options });
  const p = client.connect();
  await waitFor('hello', () => fake.last()?.frames('hello').length);
  fake.last().welcome();
  await p;
  return client;
}

describe('client (in-memory socket)', () => {
  test('hello carries the token and client id; welcome resolves connect', async () => {
    const fake = fakeServer();
    const client = new WharfClient('http://broker.test:7878', { WebSocket: fake.WebSocket, token: 'tok', clientId: 'me', ...quick });
    assert.equal(client.url, 'ws://broker.test:7878/ws');
    const events = [];
    client.on('connected', (w) => events.push(w));
    const p = client.connect();
    await waitFor('hello', () => fake.last()?.frames('hello').length);
    assert.equal(fake.last().protocols, 'wharf.json');
    assert.deepEqual(fake.last().sent[0], { op: 'hello', client_id: 'me', token: 'tok' });
    fake.last().welcome();
    const w = await p;
    assert.deepEqual(w, { session: 'sess', clientId: 'cid', version: 1, limits: { maxFrame: 1, maxPayload: 2, outboundLimit: 3, ratePerS: 4 } });
    assert.equal(client.state, 'connected');
    assert.equal(events.length, 1);
    await client.close();
    assert.equal(client.state, 'closed');
    assert.deepEqual(fake.last().frames('close'), [{ op: 'close' }]);
  });

  test('publish resolves on its receipt and rejects with the broker code', async () => {
    const fake = fakeServer();
    const client = await connected(fake);
    const ok = client.publish('a/b', new Uint8Array([1, 2]), { headers: { k: 'v' }, retain: true, priority: 'high' });
    const bad = client.publish('a/+', 'x');
    const [f1, f2] = fake.last().frames('publish');
    assert.deepEqual(f1, { op: 'publish', topic: 'a/b', payload: 'AQI=', encoding: 'base64', headers: { k: 'v' }, retain: true, priority: 'high', rid: f1.rid });
    fake.last().push({ op: 'receipt', rid: f1.rid });
    fake.last().push({ op: 'error', code: 'invalid_topic', message: 'no wildcards', rid: f2.rid });
    await ok;
    await assert.rejects(bad, (e) => e instanceof WharfError && e.code === 'invalid_topic' && e.rid === f2.rid && e.message === 'no wildcards');
    // Fire and forget: no rid.
    await client.publish('a/b', 'x', { confirm: false });
    assert.equal(fake.last().frames('publish')[2].rid, undefined);
    await client.close();
  });

  test('a request without an answer times out', async () => {
    const fake = fakeServer();
    const client = await connected(fake, { requestTimeoutMs: 50 });
    await assert.rejects(client.publish('a', 'x'), (e) => e.code === 'timeout');
    await client.close();
  });

  test('a lost connection fails requests in flight, keeps queued ones, and resubscribes from the position', async () => {
    const fake = fakeServer();
    const client = await connected(fake);
    const got = [];
    const infos = [];
    const sub = client.subscribe('chat/x', { onMessage: (m) => got.push(m.seq), onRecovery: (i) => infos.push(i) });
    const s1 = fake.last().frames('subscribe')[0];
    assert.deepEqual(s1, { op: 'subscribe', id: s1.id, filter: 'chat/x', recover: { epoch: '', offset: 0 }, rid: s1.rid });
    // Live messages before the answer are held, then released.
    fake.last().push({ op: 'message', sub: s1.id, topic: 'chat/x', seq: 8, payload: 'a' });
    assert.deepEqual(got, []);
    fake.last().push({ op: 'subscribed', rid: s1.rid, sub: s1.id, epoch: 'E1', offset: 7, recovered: false, replayed: 0, reason: 'no position given' });
    assert.deepEqual(got, [8]);
    assert.deepEqual((await sub.ready).gap, false);
    fake.last().push({ op: 'message', sub: s1.id, topic: 'chat/x', seq: 9, payload: 'b' });
    assert.deepEqual(sub.position, { epoch: 'E1', offset: 9 });

    const inFlight = client.publish('chat/x', 'lost?');
    const disconnects = [];
    client.on('disconnected', (i) => disconnects.push(i));
    const first = fake.last();
    first.drop(1006);
    await assert.rejects(inFlight, (e) => e.code === 'closed');
    assert.equal(disconnects[0].willReconnect, true);
    assert.equal(client.state, 'reconnecting');
    const queued = client.publish('chat/x', 'later');
    await waitFor('a new socket', () => fake.sockets.length === 2 && fake.last().frames('hello').length);
    fake.last().welcome();
    const s2 = fake.last().frames('subscribe')[0];
    assert.notEqual(s2.id, s1.id);
    assert.deepEqual(s2.recover, { epoch: 'E1', offset: 9 });
    // The queued publish goes after the subscribe.
    const p2 = fake.last().frames('publish')[0];
    assert.equal(p2.payload, 'later');
    assert.ok(fake.last().sent.indexOf(p2) > fake.last().sent.indexOf(s2));
    fake.last().push({ op: 'receipt', rid: p2.rid });
    await queued;
    // Replay: 9 again (dropped), 10; a stale frame of the old id is ignored.
    fake.last().push({ op: 'message', sub: s1.id, topic: 'chat/x', seq: 11, payload: 'old' });
    fake.last().push({ op: 'subscribed', rid: s2.rid, sub: s2.id, epoch: 'E1', offset: 10, recovered: true, replayed: 1 });
    fake.last().push({ op: 'message', sub: s2.id, topic: 'chat/x', seq: 9, payload: 'b' });
    fake.last().push({ op: 'message', sub: s2.id, topic: 'chat/x', seq: 10, payload: 'c' });
    assert.deepEqual(got, [8, 9, 10]);
    assert.equal(sub.duplicates, 1);
    assert.deepEqual(infos.map((i) => [i.resumed, i.recovered, i.gap]), [[false, false, false], [true, true, false]]);

    // A new epoch after another loss: a gap is reported, new offsets delivered.
    fake.last().drop(1001);
    await waitFor('a third socket', () => fake.sockets.length === 3 && fake.last().frames('hello').length);
    fake.last().welcome();
    const s3 = fake.last().frames('subscribe')[0];
    assert.deepEqual(s3.recover, { epoch: 'E1', offset: 10 });
    fake.last().push({ op: 'subscribed', rid: s3.rid, sub: s3.id, epoch: 'E2', offset: 3, recovered: false, replayed: 0, reason: 'the history was reset' });
    fake.last().push({ op: 'message', sub: s3.id, topic: 'chat/x', seq: 4, payload: 'd' });
    assert.deepEqual(got, [8, 9, 10, 4]);
    assert.deepEqual(infos[2], { recovered: false, resumed: true, gap: true, epoch: 'E2', offset: 3, replayed: 0, reason: 'the history was reset' });
    await client.close();
  });

  test('a dropped notice resubscribes recovering subscriptions from their position', async () => {
    const fake = fakeServer();
    const client = await connected(fake);
    const got = [];
    client.subscribe('chat/y', { recover: { epoch: 'E', offset: 1 }, onMessage: (m) => got.push(m.seq) });
    const s1 = fake.last().frames('subscribe')[0];
    assert.deepEqual(s1.recover, { epoch: 'E', offset: 1 });
    fake.last().push({ op: 'subscribed', rid: s1.rid, sub: s1.id, epoch: 'E', offset: 5, recovered: true, replayed: 4 });
    for (const seq of [2, 3, 5]) fake.last().push({ op: 'message', sub: s1.id, topic: 'chat/y', seq, payload: '' });
    fake.last().push({ op: 'dropped', count: 1 });
    assert.deepEqual(fake.last().frames('unsubscribe'), [{ op: 'unsubscribe', id: s1.id }]);
    const s2 = fake.last().frames('subscribe')[1];
    assert.deepEqual(s2.recover, { epoch: 'E', offset: 3 });
    fake.last().push({ op: 'subscribed', rid: s2.rid, sub: s2.id, epoch: 'E', offset: 5, recovered: true, replayed: 2 });
    for (const seq of [4, 5, 6]) fake.last().push({ op: 'message', sub: s2.id, topic: 'chat/y', seq, payload: '' });
    assert.deepEqual(got, [2, 3, 5, 4, 6]);
    await client.close();
  });

  test('a subscription without recovery reports a gap after a reconnect', async () => {
    const fake = fakeServer();
    const client = await connected(fake);
    const infos = [];
    const sub = client.subscribe('chat/+', { onRecovery: (i) => infos.push(i) });
    assert.equal(sub.recovering, false);
    const s1 = fake.last().frames('subscribe')[0];
    assert.equal(s1.recover, undefined);
    fake.last().push({ op: 'receipt', rid: s1.rid });
    await sub.ready;
    fake.last().drop();
    await waitFor('a new socket', () => fake.sockets.length === 2 && fake.last().frames('hello').length);
    fake.last().welcome();
    const s2 = fake.last().frames('subscribe')[0];
    fake.last().push({ op: 'receipt', rid: s2.rid });
    await waitFor('two recovery events', () => infos.length === 2);
    assert.deepEqual(infos.map((i) => i.gap), [false, true]);
    assert.throws(() => client.subscribe('chat/#', { recover: true }), TypeError);
    await client.close();
  });

  test('a refused subscribe ends the subscription with the broker code', async () => {
    const fake = fakeServer();
    const client = await connected(fake);
    const ended = [];
    const sub = client.subscribe('a/#/b', { onEnded: (e) => ended.push(e.code) });
    const s = fake.last().frames('subscribe')[0];
    fake.last().push({ op: 'error', code: 'invalid_filter', message: "'#' may only be the last level", rid: s.rid });
    await assert.rejects(sub.ready, (e) => e instanceof WharfError && e.code === 'invalid_filter');
    assert.deepEqual(ended, ['invalid_filter']);
    assert.equal(sub.active, false);
    await client.close();
  });

  test('unauthorized at hello: connect rejects and the client stops', async () => {
    const fake = fakeServer();
    const client = new WharfClient('ws://broker.test/ws', { WebSocket: fake.WebSocket, token: 'bad', ...quick });
    const errors = [];
    client.on('error', (e) => errors.push(e.code));
    const p = client.connect();
    await waitFor('hello', () => fake.last()?.frames('hello').length);
    fake.last().push({ op: 'error', code: 'unauthorized', message: 'bad token' });
    fake.last().drop(4401, 'unauthorized');
    await assert.rejects(p, (e) => e instanceof WharfError && e.code === 'unauthorized');
    assert.equal(client.state, 'closed');
    await sleep(30);
    assert.equal(fake.sockets.length, 1);
    assert.deepEqual(errors, ['unauthorized']);
  });

  test('consume: deliveries, settlement, stale ids after a reconnect, nack on a throwing handler', async () => {
    const fake = fakeServer();
    const client = await connected(fake);
    const deliveries = [];
    const errors = [];
    client.on('error', (e) => errors.push(e.code));
    const consumer = client.consume('jobs', { prefetch: 2 }, (d) => {
      deliveries.push(d);
      if (d.text() === 'boom') throw new Error('boom');
    });
    const c1 = fake.last().frames('consume')[0];
    assert.deepEqual(c1, { op: 'consume', id: c1.id, queue: 'jobs', prefetch: 2, rid: c1.rid });
    fake.last().push({ op: 'receipt', rid: c1.rid });
    await consumer.ready;
    fake.last().push({ op: 'delivery', sub: c1.id, queue: 'jobs', id: 1, seq: 1, count: 1, payload: 'one', headers: { h: '1' } });
    const d1 = deliveries[0];
    assert.deepEqual([d1.id, d1.seq, d1.count, d1.priority, d1.text(), d1.headers.h], [1, 1, 1, 0, 'one', '1']);
    const acked = d1.ack();
    const ack = fake.last().frames('ack')[0];
    assert.deepEqual(ack, { op: 'ack', sub: c1.id, ids: [1], rid: ack.rid });
    fake.last().push({ op: 'receipt', rid: ack.rid });
    await acked;
    await assert.rejects(d1.ack(), (e) => e.code === 'stale_delivery');
    fake.last().push({ op: 'delivery', sub: c1.id, queue: 'jobs', id: 2, seq: 2, count: 1, payload: 'boom' });
    const nack = fake.last().frames('nack')[0];
    assert.deepEqual(nack, { op: 'nack', sub: c1.id, ids: [2], rid: nack.rid });
    assert.deepEqual(errors, ['handler']);
    fake.last().push({ op: 'delivery', sub: c1.id, queue: 'jobs', id: 3, seq: 3, count: 1, payload: 'three' });
    fake.last().drop();
    await assert.rejects(deliveries[2].ack(), (e) => e.code === 'stale_delivery');
    await waitFor('a new socket', () => fake.sockets.length === 2 && fake.last().frames('hello').length);
    fake.last().welcome();
    const c2 = fake.last().frames('consume')[0];
    assert.equal(c2.queue, 'jobs');
    await client.close();
  });

  test('heartbeat: a ping without pong drops the connection and reconnects', async () => {
    const fake = fakeServer();
    const client = await connected(fake, { heartbeatMs: 20, requestTimeoutMs: 60 });
    const disconnects = [];
    client.on('disconnected', (i) => disconnects.push(i));
    await waitFor('a ping', () => fake.last().frames('ping').length);
    await waitFor('the drop', () => disconnects.length, 2000);
    assert.equal(disconnects[0].code, 4000);
    assert.match(disconnects[0].reason, /heartbeat/);
    assert.equal(fake.sockets[0].closedWith, 4000);
    await waitFor('a new socket', () => fake.sockets.length === 2);
    await client.close();
  });

  test('getToken: a fresh token at each connect, and a refresh before a JWT expires', async () => {
    const fake = fakeServer();
    const secret = 's'.repeat(32);
    let minted = 0;
    const getToken = async () => {
      minted++;
      const now = Math.floor(Date.now() / 1000);
      return hs256({ sub: 'me', iat: now, exp: now + 2, n: minted }, secret);
    };
    const client = await connected(fake, { getToken });
    assert.equal(minted, 1);
    assert.ok(fake.last().sent[0].token.split('.').length === 3);
    // 2 s lifetime: refreshed 1 s before exp.
    const r = await waitFor('a refresh frame', () => fake.last().frames('refresh')[0], 3000);
    assert.equal(minted, 2);
    assert.notEqual(r.token, fake.last().sent[0].token);
    fake.last().push({ op: 'receipt', rid: r.rid });
    fake.last().drop(4403, 'expired');
    await waitFor('a new hello', () => fake.sockets.length === 2 && fake.last().frames('hello').length);
    assert.equal(minted, 3);
    await client.close();
  });

  test('close() fails queued requests and subscriptions, and stops for good', async () => {
    const fake = fakeServer();
    const client = new WharfClient('ws://broker.test/ws', { WebSocket: fake.WebSocket, ...quick });
    const queued = assert.rejects(client.publish('a', 'x'), (e) => e.code === 'closed');
    const sub = client.subscribe('chat/z');
    const p = assert.rejects(client.connect(), (e) => e.code === 'closed');
    await client.close();
    await queued;
    await assert.rejects(sub.ready, (e) => e.code === 'closed');
    await p;
    await assert.rejects(client.connect(), (e) => e.code === 'closed');
    await assert.rejects(client.publish('a', 'x'), (e) => e.code === 'closed');
  });

  test('the outbox is bounded', async () => {
    const fake = fakeServer();
    const client = new WharfClient('ws://broker.test/ws', { WebSocket: fake.WebSocket, ...quick, maxQueued: 2 });
    const a = assert.rejects(client.publish('a', '1'), (e) => e.code === 'closed');
    const b = assert.rejects(client.publish('a', '2'), (e) => e.code === 'closed');
    await assert.rejects(client.publish('a', '3'), (e) => e.code === 'buffer_full');
    await client.close();
    await a;
    await b;
  });

  test('no WebSocket at all is a TypeError', () => {
    const saved = globalThis.WebSocket;
    try {
      delete globalThis.WebSocket;
      assert.throws(() => new WharfClient('ws://x/ws'), TypeError);
    } finally {
      if (saved) globalThis.WebSocket = saved;
    }
  });
});
