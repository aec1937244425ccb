// Drives Debian's chromium (headless, through playwright-core) through
// Wharf's dashboard: opens the page, publishes and enqueues through the
// HTTP API until the page's publish rate and a queue's depth show it,
// runs two actions through the UI (purge a queue, close a session),
// accepting their confirm dialogs and waiting for their effect on the
// page, and saves a screenshot.
//
//   node tests/browser/dashboard.mjs http://127.0.0.1:7878 target/dashboard.png
//
// Exits 0 on success; any failure exits 1 with a message on stderr.
// CHROMIUM names the browser (default /usr/bin/chromium).

import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [base, shot] = process.argv.slice(2);
if (!base || !shot) {
  console.error('usage: node dashboard.mjs URL SCREENSHOT_PATH');
  process.exit(2);
}
const STEP_MS = 20_000; // each wait for the page
const TOTAL_MS = 80_000; // the whole run
const TOPIC = 'dashboard/demo';
const QUEUE = 'dashboard-orders';
const KEPT = 'dashboard-emails';
const ENQUEUED = 7;
const CLIENT = 'dashboard-browser-test';
const WATCHER = 'dashboard-watcher';

const log = (...a) => console.error('dashboard.mjs:', ...a);

function fail(message) {
  throw new Error(message);
}

// The whole run is bounded: a hang anywhere fails instead of waiting for
// the caller's kill.
const watchdog = setTimeout(() => {
  console.error(`dashboard.mjs: FAILED: the run took over ${TOTAL_MS / 1000} s`);
  process.exit(1);
}, TOTAL_MS);

async function api(method, path, body) {
  const res = await fetch(base + path, {
    method,
    body,
    headers: body == null ? {} : { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  return { status: res.status, text };
}

async function expectStatus(want, method, path, body) {
  const r = await api(method, path, body);
  if (r.status !== want) fail(`${method} ${path}: ${r.status} ${r.text} (expected ${want})`);
  return r.text ? JSON.parse(r.text) : null;
}

// Polls `check` (an async function returning truthy when done) while
// running `tick` between tries, for at most `ms`.
async function until(what, check, tick, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  let lastErr = null;
  while (Date.now() < deadline) {
    if (problems.length) fail(problems.join('\n'));
    try {
      if (await check()) return;
    } catch (e) {
      lastErr = e;
    }
    if (tick) await tick();
    await new Promise((r) => setTimeout(r, 200));
  }
  fail(`timed out after ${ms / 1000} s waiting for ${what}${lastErr ? ` (${lastErr.message})` : ''}`);
}

const cellText = (page, selector) => page.locator(selector).first().textContent({ timeout: 1000 });

// What went wrong on the page or in the background publisher.
const problems = [];
let browser = null;
let profile = null;
let exitCode = 0;
try {
  profile = await mkdtemp(join(tmpdir(), 'wharf-chromium-'));
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1280, height: 860 },
    deviceScaleFactor: 1,
    colorScheme: 'light',
    timeout: STEP_MS,
  });
  browser.setDefaultTimeout(STEP_MS);
  const page = browser.pages()[0] || (await browser.newPage());

  // A script error or a refused resource (CSP) on the page fails the run.
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()} (${m.location().url})`);
  });
  const checkProblems = () => {
    if (problems.length) fail(problems.join('\n'));
  };

  log('opening', base + '/dashboard');
  const res = await page.goto(base + '/dashboard', { waitUntil: 'load' });
  if (!res || res.status() !== 200) fail(`GET /dashboard answered ${res && res.status()}`);
  await page.locator('#status[data-state="connected"]').waitFor();
  checkProblems();

  // A native WebSocket session, opened from a second tab of the same
  // origin, subscribed to the topic: it shows in the sessions table,
  // makes deliveries, and is the session closed through the UI.
  const ws = await browser.newPage();
  await ws.goto(base + '/dashboard/style.css');
  // Two sessions: CLIENT is closed through the page, WATCHER stays (and
  // keeps the delivery rate moving in the screenshot).
  for (const client of [CLIENT, WATCHER]) {
    await ws.evaluate(
      ({ client, topic }) =>
        new Promise((resolve, reject) => {
          const url = location.origin.replace(/^http/, 'ws') + '/ws';
          const s = new WebSocket(url);
          window.wharfClosed = window.wharfClosed || {};
          window.wharfClosed[client] = false;
          s.onclose = () => (window.wharfClosed[client] = true);
          s.onerror = () => reject(new Error('the WebSocket failed'));
          s.onopen = () => {
            s.send(JSON.stringify({ op: 'hello', client_id: client }));
            s.send(JSON.stringify({ op: 'subscribe', id: 'demo', filter: topic, rid: 1 }));
          };
          s.onmessage = (m) => {
            if (String(m.data).includes('"rid":1')) resolve();
          };
          setTimeout(() => reject(new Error('no subscribe reply in 10 s')), 10_000);
        }),
      { client, topic: TOPIC },
    );
  }
  log('two WebSocket sessions subscribed');

  // Publishing goes on in the background (bounded by `publishing`), so
  // that the rate chart has a line by the time of the screenshot.
  let publishing = true;
  let published = 0;
  const publisher = (async () => {
    while (publishing) {
      const n = 5 + Math.floor(Math.random() * 10);
      for (let i = 0; i < n && publishing; i++) {
        await expectStatus(202, 'POST', `/topics/${TOPIC}`, JSON.stringify({ n: published++ }));
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })().catch((e) => problems.push(`publishing: ${e.message}`));

  await until(
    'the publish rate on the page to rise above 0',
    async () => Number((await cellText(page, '#rate-published')).replace(/,/g, '')) > 0,
  );
  log('publish rate:', await cellText(page, '#rate-published'), 'msg/s');
  await until(
    'the delivery rate on the page to rise above 0',
    async () => Number((await cellText(page, '#rate-delivered')).replace(/,/g, '')) > 0,
  );

  for (let i = 0; i < ENQUEUED; i++) {
    await expectStatus(201, 'POST', `/queues/${QUEUE}/messages`, JSON.stringify({ order: i }));
  }
  for (let i = 0; i < 3; i++) {
    await expectStatus(201, 'POST', `/queues/${KEPT}/messages`, JSON.stringify({ to: `user${i}@example.com` }));
  }
  const depthCell = `tr[data-queue="${QUEUE}"] .depth`;
  await until(
    `the depth of ${QUEUE} on the page to show ${ENQUEUED}`,
    async () => (await cellText(page, depthCell)).trim() === String(ENQUEUED),
  );
  log(`${QUEUE} depth:`, ENQUEUED);
  // Jobs and a worker, so that the jobs tile has numbers.
  await expectStatus(201, 'POST', '/workers', JSON.stringify({ kinds: ['report'] }));
  await expectStatus(201, 'POST', '/jobs', JSON.stringify({ kind: 'thumbnail', entity_id: crypto.randomUUID(), data: {} }));
  await until('one worker on the page', async () => (await cellText(page, '#workers')).trim() === '1');
  checkProblems();

  // Action 1: purge the queue through the page.
  let purgeAsked = '';
  page.once('dialog', (d) => {
    purgeAsked = d.message();
    d.accept();
  });
  await page.locator(`tr[data-queue="${QUEUE}"] button.purge`).click();
  await until(
    `the depth of ${QUEUE} on the page to show 0 after the purge`,
    async () => (await cellText(page, depthCell)).trim() === '0',
  );
  if (!purgeAsked.includes(QUEUE)) fail(`the confirm dialog did not name the queue: ${JSON.stringify(purgeAsked)}`);
  await until('the page to report the purge', async () =>
    (await cellText(page, '#toast')).includes(`Purged ${ENQUEUED} message(s)`),
  );
  const after = await expectStatus(200, 'GET', `/queues/${QUEUE}`);
  if (after.depth !== 0) fail(`${QUEUE} still holds ${after.depth} after the purge`);
  log('purged', QUEUE, 'through the page');

  // Action 2: close the WebSocket session through the page.
  const sessions = await expectStatus(200, 'GET', '/admin/sessions');
  const mine = sessions.find((s) => s.client_id === CLIENT);
  if (!mine) fail(`no session of ${CLIENT} in GET /admin/sessions: ${JSON.stringify(sessions)}`);
  const row = `tr[data-session="${mine.id}"]`;
  await page.locator(row).waitFor();
  let asked = '';
  page.once('dialog', (d) => {
    asked = d.message();
    d.accept();
  });
  await page.locator(`${row} button.close`).click();
  await until('the closed session to leave the page', async () => (await page.locator(row).count()) === 0);
  if (!asked.includes(mine.id)) fail(`the confirm dialog did not name the session: ${JSON.stringify(asked)}`);
  await until('the WebSocket to see the close', async () => ws.evaluate((c) => window.wharfClosed[c], CLIENT));
  await until('the page to confirm the close', async () =>
    (await cellText(page, '#toast')).includes('Closed session'),
  );
  log('closed session', mine.id, 'through the page');

  // A few more seconds of publishing, for the chart, then the picture.
  await new Promise((r) => setTimeout(r, 3000));
  publishing = false;
  await publisher;
  checkProblems();
  await page.screenshot({ path: shot, fullPage: true, timeout: STEP_MS });
  const size = (await stat(shot)).size;
  if (!(size > 0)) fail(`the screenshot ${shot} is empty`);
  log(`screenshot ${shot} (${size} bytes); published ${published} messages`);
  console.log('ok');
} catch (e) {
  console.error(`dashboard.mjs: FAILED: ${e && e.stack ? e.stack : e}`);
  exitCode = 1;
} finally {
  try {
    if (browser) await browser.close();
  } catch (e) {
    console.error(`dashboard.mjs: closing the browser: ${e}`);
  }
  if (profile) await rm(profile, { recursive: true, force: true }).catch(() => {});
  clearTimeout(watchdog);
}
process.exit(exitCode);
