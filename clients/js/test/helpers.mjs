// Test helpers: a real broker process (start, stop, restart on the same
// port and data directory), HTTP publishing, polling with deadlines, and a
// WebSocket class that remembers its sockets so tests can cut them.
//
// The broker binary is $WHARF_BIN, else ../../target/debug/wharf (the
// repository's debug build, relative to clients/js).

import { spawn } from 'node:child_process';
import { createHash, createHmac } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import WS from 'ws';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const WHARF_BIN = process.env.WHARF_BIN || resolve(ROOT, '../../target/debug/wharf');

/** A configuration that keeps history for chat/# topics. */
export const HISTORY_CONFIG = '[[history]]\nfilter = "chat/#"\nsize = 20000\n';

const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it returns truthy, for at most `ms`; throws naming `what` otherwise. */
export async function waitFor(what, check, ms = 10_000, every = 20) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(every);
  }
}

/** Rejects after `ms` unless `promise` settles first. */
export function within(ms, promise, what = 'an operation') {
  let t;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      t = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}

export const sha256 = (s) => createHash('sha256').update(s).digest('hex');

/** An HS256 JWT of `claims` signed with `secret`. */
export function hs256(claims, secret) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const signed = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`;
  return `${signed}.${createHmac('sha256', secret).update(signed).digest('base64url')}`;
}

/**
 * A WebSocket class (the `ws` package's) that keeps each socket it makes,
 * so a test can cut the connection under the client (`terminate()`).
 */
export function trackingWebSocket() {
  const sockets = [];
  class Tracked extends WS {
    constructor(url, protocols) {
      super(url, protocols);
      sockets.push(this);
    }
  }
  return { WebSocket: Tracked, sockets, last: () => sockets[sockets.length - 1] };
}

/**
 * Starts a broker: `config` is the TOML text, `port` 0 for any. Resolves
 * with a handle once it logs `listening on`.
 */
export async function startBroker({ config = HISTORY_CONFIG, port = 0, dataDir } = {}) {
  if (!existsSync(WHARF_BIN)) {
    throw new Error(`no broker binary at ${WHARF_BIN}: build it (cargo build) or set WHARF_BIN`);
  }
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'wharf-js-'));
  const configPath = join(dir, 'test.toml');
  writeFileSync(configPath, config);
  const broker = {
    dir,
    configPath,
    port,
    child: null,
    log: '',
    get http() {
      return `http://127.0.0.1:${this.port}`;
    },
    get ws() {
      return `ws://127.0.0.1:${this.port}/ws`;
    },
    /** Stops it with `signal` (SIGTERM: clean; SIGKILL: a crash) and waits for the exit. */
    async stop(signal = 'SIGTERM') {
      const child = this.child;
      if (!child || child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill(signal);
      const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(t);
      live.delete(child);
    },
    /** Starts it again on the same port and data directory. */
    async restart() {
      await this.stop();
      await launch(this, `127.0.0.1:${this.port}`);
    },
    /** Stops it and removes its data directory. */
    async cleanup() {
      await this.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await launch(broker, `127.0.0.1:${port}`);
  return broker;
}

async function launch(broker, bind) {
  let lastError;
  // A restart can find the port still held for a moment: try a few times.
  for (let tries = 0; tries < 5; tries++) {
    try {
      await launchOnce(broker, bind);
      return;
    } catch (e) {
      lastError = e;
      if (!/in use/i.test(String(e.message))) break;
      await sleep(200);
    }
  }
  throw lastError;
}

function launchOnce(broker, bind) {
  const args = ['serve', '--config', broker.configPath, '--bind', bind, '--data-dir', join(broker.dir, 'data'), '--mqtt-bind', '127.0.0.1:0'];
  const child = spawn(WHARF_BIN, args, {
    env: { ...process.env, RUST_LOG: 'info' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  live.add(child);
  broker.child = child;
  broker.log = '';
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the broker did not start within 20 s:\n${broker.log.slice(-3000)}`));
    }, 20_000);
    child.stderr.setEncoding('utf8');
    let started = false;
    child.stderr.on('data', (chunk) => {
      broker.log = (broker.log + chunk).slice(-65536);
      const m = !started && /listening on 127\.0\.0\.1:(\d+)/.exec(broker.log);
      if (m) {
        started = true;
        clearTimeout(t);
        broker.port = Number(m[1]);
        resolve();
      }
    });
    child.once('exit', (code, signal) => {
      live.delete(child);
      if (!started) {
        clearTimeout(t);
        reject(new Error(`the broker exited (${code ?? signal}) before listening:\n${broker.log.slice(-3000)}`));
      }
    });
  });
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

/** An HTTP request to the broker; resolves with {status, body} (rejects on network errors). */
export function httpRequest(port, method, path, body = '', timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path, method, agent, headers: { 'content-length': Buffer.byteLength(body) } },
      (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (data += c));
        res.on('end', () => resolve({ status: res.statusCode, body: data }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${path}: no answer within ${timeoutMs} ms`)));
    req.end(body);
  });
}

/** Frees the keep-alive connections (so a stopped broker's sockets are not reused). */
export function resetHttp() {
  agent.destroy();
}
