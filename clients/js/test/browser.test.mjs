// The browser test: headless Chromium (playwright-core; $CHROMIUM, else
// /usr/bin/chromium) loads dist/wharf.js as an ES module from the broker's
// origin (http://127.0.0.1:PORT/client.js) and subscribes with recovery to
// chat/load, while Node publishes 10,000 numbered messages over HTTP.
// Mid-stream the broker is stopped (SIGTERM) and started again on the same
// port and data directory, the page's network goes offline for a while,
// and the page closes its own socket. The page must receive 1..10000
// exactly once each, in order.
//
// About the network cut: Chromium's offline emulation
// (`context.setOffline(true)`) does not close WebSockets that are already
// open: their frames are held until the network is back, and new ones fail
// (net::ERR_INTERNET_DISCONNECTED). So it is the client's heartbeat (a
// `ping` unanswered within requestTimeoutMs) that notices the dead
// connection and reconnects, as it would on a real network loss. A
// page-side `socket.close()` (through the WebSocket class the page hands
// the client, which remembers its sockets) covers the other way a socket
// ends under a page.

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { chromium } from 'playwright-core';

import { ROOT, httpRequest, resetHttp, sleep, startBroker, waitFor, within } from './helpers.mjs';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const N = 10_000;
const TOPIC = 'chat/load';
const BUDGET_MS = 55_000;

test(`browser: ${N} messages through a broker restart, a lost network and a closed socket: 0 missed, 0 duplicated`, { timeout: 90_000 }, async (t) => {
  assert.ok(existsSync(CHROMIUM), `no Chromium at ${CHROMIUM} (set CHROMIUM)`);
  const t0 = Date.now();
  const deadline = t0 + BUDGET_MS;
  const left = () => Math.max(1000, deadline - Date.now());
  const broker = await startBroker();
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    if (process.env.DEBUG) page.on('console', (m) => console.error('page:', m.text()));
    // The module the page imports is the one on disk: the broker's
    // GET /client.js is replaced by dist/wharf.js (the same file once the
    // broker embeds it; integration.test.mjs compares the two).
    const dist = readFileSync(join(ROOT, 'dist/wharf.js'), 'utf8');
    await context.route(/\/client\.js$/, (route) =>
      route.fulfill({ status: 200, contentType: 'text/javascript; charset=utf-8', body: dist }),
    );
    // A page of the broker's own origin, so that its WebSocket upgrades
    // carry an Origin the broker accepts. (It must come from the broker
    // itself: a page that Playwright makes up is not known to be on
    // loopback, and Chromium's local network access checks then block its
    // WebSockets to 127.0.0.1.)
    await page.goto(`${broker.http}/health`);
    await within(left(), page.evaluate(
      async ({ base, ws, topic }) => {
        const { WharfClient } = await import(`${base}/client.js`);
        const sockets = [];
        class Tracked extends WebSocket {
          constructor(url, protocols) {
            super(url, protocols);
            sockets.push(this);
          }
        }
        const t = (window.__t = { got: [], recoveries: [], disconnects: [], errors: [], sockets });
        const client = new WharfClient(ws, {
          WebSocket: Tracked,
          backoff: { initialMs: 100, maxMs: 1000 },
          heartbeatMs: 500,
          requestTimeoutMs: 1500,
          connectTimeoutMs: 3000,
        });
        client.on('disconnected', (i) => t.disconnects.push(`${i.code} ${i.reason}`));
        client.on('error', (e) => t.errors.push(`${e.code}: ${e.message}`));
        await client.connect();
        t.sub = client.subscribe(topic, {
          onMessage: (m) => t.got.push(Number(m.text())),
          onRecovery: (r) => t.recoveries.push(r),
        });
        await t.sub.ready;
        t.client = client;
      },
      { base: broker.http, ws: broker.ws, topic: TOPIC },
    ), 'the page to subscribe');
    const state = () =>
      within(5000, page.evaluate(() => ({
        got: window.__t.got.length,
        disconnects: window.__t.disconnects,
        recoveries: window.__t.recoveries.length,
        connected: window.__t.client.state === 'connected',
      })), 'the page to answer');
    // Waits until the page has resubscribed `count` times in all.
    const recovered = (count) =>
      waitFor(`the page's recovery #${count}`, async () => {
        const s = await state();
        return s.connected && s.recoveries >= count;
      }, left(), 50);

    // Publishes message `n`, retrying until the broker took it, and never
    // twice: after a request that may have reached the broker (no answer),
    // the topic's history says whether it did.
    let lastSeq = 0;
    let retries = 0;
    const outOfTime = (what) => {
      if (Date.now() > deadline) throw new Error(`${what}: out of time`);
    };
    async function accepted(n) {
      for (;;) {
        outOfTime(`looking ${n} up`);
        const h = await httpRequest(broker.port, 'GET', `/topics/${TOPIC}/history?since=${lastSeq}&limit=10`, '', 2000).catch(() => null);
        if (h?.status === 200) return JSON.parse(h.body).messages.find((m) => m.payload === String(n)) ?? null;
        await sleep(50);
      }
    }
    async function publish(n) {
      for (;;) {
        outOfTime(`publishing ${n}`);
        let r = null;
        let error = null;
        try {
          r = await httpRequest(broker.port, 'POST', `/topics/${TOPIC}`, String(n), 2000);
        } catch (e) {
          error = e;
        }
        if (r?.status === 202) {
          lastSeq = JSON.parse(r.body).seq;
          return;
        }
        if (r && r.status < 500) throw new Error(`POST ${n}: ${r.status} ${r.body}`);
        if (error && error.code !== 'ECONNREFUSED') {
          // It may have been taken before the connection broke.
          const kept = await accepted(n);
          if (kept) {
            lastSeq = kept.offset;
            return;
          }
        }
        retries++;
        await sleep(50);
      }
    }

    const marks = {};
    let restarting = null;
    const progress = (...a) => process.env.DEBUG && console.error(`[${Date.now() - t0} ms]`, ...a);
    for (let n = 1; n <= N; n++) {
      await publish(n);
      if (n % 500 === 0) progress('published', n, JSON.stringify(await state()));
      if (n === 2500) {
        // The broker goes away and comes back on the same port and data
        // directory, while publishing goes on (refused meanwhile, and
        // retried). Idle HTTP connections would keep the old broker
        // serving publishes for a while after SIGTERM: none are kept.
        // (The page's own idle connection, from loading it, holds the old
        // broker up to its 5 s keep-alive: the restart takes that long.)
        resetHttp();
        const s = Date.now();
        const stopping = broker.stop('SIGTERM');
        await waitFor('the broker to begin its shutdown', () => /shutting down/.test(broker.log), 5000, 5);
        restarting = (async () => {
          await stopping;
          marks.stopMs = Date.now() - s;
          await broker.restart();
          marks.restartMs = Date.now() - s;
        })();
      } else if (n === 5000) {
        await within(left(), restarting, 'the restart');
        await recovered(2);
        const heartbeats = () => state().then((s) => s.disconnects.filter((d) => /heartbeat/.test(d)).length);
        await within(5000, context.setOffline(true), 'going offline');
        // Publish on while the page is offline...
        for (n = 5001; n <= 6000; n++) await publish(n);
        n = 6000;
        // ...until its heartbeat gives up on the dead connection; stay
        // offline a little longer so that reconnects fail too.
        await waitFor('the page to notice the network loss', async () => (await heartbeats()) > 0, left());
        await sleep(300);
        await within(5000, context.setOffline(false), 'going online');
      } else if (n === 7500) {
        await recovered(3);
        // The page closes its own socket.
        await within(5000, page.evaluate(() => window.__t.sockets.at(-1).close()), 'the page to close its socket');
      }
    }
    const published = Date.now() - t0;
    await recovered(4);
    await waitFor(`the page to receive ${N}`, async () => (await state()).got >= N, left(), 100);
    await sleep(300); // anything more would be a duplicate
    const result = await within(10_000, page.evaluate(() => ({
      got: window.__t.got,
      recoveries: window.__t.recoveries,
      disconnects: window.__t.disconnects,
      errors: window.__t.errors,
      sockets: window.__t.sockets.length,
      duplicatesDropped: window.__t.sub.duplicates,
      position: window.__t.sub.position,
    })), 'the page to report');

    const counts = new Map();
    for (const n of result.got) counts.set(n, (counts.get(n) ?? 0) + 1);
    let missed = 0;
    let duplicated = 0;
    for (let n = 1; n <= N; n++) {
      const c = counts.get(n) ?? 0;
      if (c === 0) missed++;
      if (c > 1) duplicated += c - 1;
    }
    const stray = result.got.filter((n) => !(n >= 1 && n <= N)).length;
    const inOrder = result.got.every((n, i) => i === 0 || n > result.got[i - 1]);
    const summary = {
      received: result.got.length,
      missed,
      duplicated,
      stray,
      inOrder,
      duplicatesDroppedByClient: result.duplicatesDropped,
      connections: result.sockets,
      disconnects: result.disconnects,
      recoveries: result.recoveries.map((r) => `${r.recovered ? 'recovered' : 'not recovered'} replayed=${r.replayed}${r.gap ? ' GAP' : ''}`),
      publishRetries: retries,
      stopMs: marks.stopMs,
      restartMs: marks.restartMs,
      publishMs: published,
      totalMs: Date.now() - t0,
    };
    t.diagnostic(JSON.stringify(summary));
    assert.deepEqual({ missed, duplicated, stray, inOrder }, { missed: 0, duplicated: 0, stray: 0, inOrder: true }, JSON.stringify(summary));
    assert.equal(result.got.length, N);
    assert.ok(retries > 0, 'the publisher found the broker down at least once');
    // The first subscribe, then one recovered resubscribe per loss.
    assert.equal(result.recoveries[0].resumed, false);
    assert.equal(result.recoveries.length, 4, JSON.stringify(summary.recoveries));
    for (const r of result.recoveries.slice(1)) {
      assert.equal(r.recovered, true, `a resubscribe was not recovered: ${JSON.stringify(r)}`);
      assert.equal(r.gap, false);
    }
    assert.ok(result.disconnects.some((d) => /heartbeat/.test(d)), `the heartbeat noticed the offline network: ${result.disconnects}`);
    assert.equal(result.position.offset, lastSeq);
    assert.deepEqual(pageErrors, []);
    assert.ok(Date.now() - t0 < 60_000, `took ${Date.now() - t0} ms`);
  } finally {
    await within(10_000, browser.close(), "closing the browser").catch(() => {});
    await broker.cleanup();
  }
});
