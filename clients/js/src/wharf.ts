/**
 * Wharf's JavaScript client: the native protocol (`wharf.json`, JSON text
 * frames over a WebSocket at `ws://HOST:PORT/ws`) for browsers and for
 * Node 18 and later, in one ES module without dependencies.
 *
 * - {@link WharfClient} connects with a token (and fetches fresh ones
 *   with `getToken`), reconnects with exponential backoff and full jitter,
 *   and re-establishes subscriptions and queue consumers after each
 *   reconnect.
 * - {@link WharfClient.subscribe} subscribes to a topic; on a topic with
 *   history (`[[history]]` in the broker's configuration) it resumes after
 *   every reconnect from the last message received, with no gap and no
 *   duplicate, or says so with a `recovery` event whose `gap` is true.
 * - {@link WharfClient.publish} resolves once the broker confirmed the
 *   message, {@link WharfClient.enqueue} once the queue stored it, and
 *   {@link WharfClient.consume} hands out queue deliveries to acknowledge.
 * - Every failure is a {@link WharfError} whose `code` is the broker's
 *   error code (`invalid_filter`, `unauthorized`, ...) or one of the
 *   client's own ({@link ClientErrorCode}).
 *
 * The broker serves this file at `GET /client.js`, so a page can
 * `import { WharfClient } from "http://127.0.0.1:7878/client.js"`.
 *
 * @packageDocumentation
 */

/** This client's version. */
export const VERSION = "0.1.0";

// ---------------------------------------------------------------------------
// Errors

/**
 * Codes of the errors the client raises itself; every other code is the
 * broker's (proto/native.md, "Error codes").
 *
 * - `timeout`: no answer within `requestTimeoutMs` (or no welcome within
 *   `connectTimeoutMs`).
 * - `closed`: the connection closed before the answer came (the request
 *   may or may not have been carried out), or the client was closed.
 * - `buffer_full`: too many requests waiting (`maxQueued` while
 *   disconnected, `maxPending` awaiting answers).
 * - `stale_delivery`: settling a delivery that was already settled, or
 *   that came over an earlier connection (the broker gave it back to its
 *   queue when that connection ended; it will be delivered again).
 * - `protocol`: the broker sent something this client cannot read.
 * - `handler`: an application callback threw.
 * - `token`: `getToken` failed, or there is no token to refresh with.
 */
export type ClientErrorCode =
  | "timeout"
  | "closed"
  | "buffer_full"
  | "stale_delivery"
  | "protocol"
  | "handler"
  | "token";

/**
 * An error from the broker (its `error` frame: `code` is the broker's
 * code, e.g. `invalid_filter`, `unauthorized`, `forbidden`,
 * `rate_limited`, `overloaded`) or from the client ({@link ClientErrorCode}).
 */
export class WharfError extends Error {
  /** The broker's error code, or one of {@link ClientErrorCode}. */
  readonly code: string;
  /** The request id the broker's error answered, if any. */
  readonly rid?: number;
  /** The WebSocket close code, for errors caused by a closed connection. */
  readonly closeCode?: number;
  /** What caused this error, if anything else did. */
  readonly cause?: unknown;

  /**
   * @param code - the broker's code or a {@link ClientErrorCode}
   * @param message - what happened, for people
   * @param details - the request id, close code and cause, when known
   */
  constructor(
    code: string,
    message: string,
    details: { rid?: number; closeCode?: number; cause?: unknown } = {},
  ) {
    super(message);
    this.name = "WharfError";
    this.code = code;
    if (details.rid !== undefined) this.rid = details.rid;
    if (details.closeCode !== undefined) this.closeCode = details.closeCode;
    if (details.cause !== undefined) this.cause = details.cause;
  }
}

// ---------------------------------------------------------------------------
// Payloads

/** What can be sent as a payload: text (sent as is) or bytes (sent as base64). */
export type Payload = string | Uint8Array | ArrayBuffer | ArrayBufferView;

/** A payload as a JSON frame carries it. */
export interface EncodedPayload {
  /** The text itself, or the bytes' standard base64. */
  payload: string;
  /** `"base64"` when `payload` is base64. */
  encoding?: "base64";
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_INDEX: Int16Array = (() => {
  const t = new Int16Array(128).fill(-1);
  for (let i = 0; i < 64; i++) t[B64.charCodeAt(i)] = i;
  return t;
})();

/**
 * Standard base64 (with `=` padding) of `bytes`.
 * @param bytes - the bytes to encode
 */
export function bytesToBase64(bytes: Uint8Array): string {
  const parts: string[] = [];
  let chunk = "";
  const n = bytes.length;
  let i = 0;
  for (; i + 2 < n; i += 3) {
    const v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    chunk += B64[(v >> 18) & 63] + B64[(v >> 12) & 63] + B64[(v >> 6) & 63] + B64[v & 63];
    if (chunk.length >= 8192) {
      parts.push(chunk);
      chunk = "";
    }
  }
  if (i < n) {
    const v = (bytes[i] << 16) | (i + 1 < n ? bytes[i + 1] << 8 : 0);
    chunk += B64[(v >> 18) & 63] + B64[(v >> 12) & 63];
    chunk += i + 1 < n ? B64[(v >> 6) & 63] + "=" : "==";
  }
  parts.push(chunk);
  return parts.join("");
}

/**
 * The bytes of a standard base64 string (padding optional).
 * @param text - base64 text
 * @throws {@link WharfError} `protocol` when `text` is not base64
 */
export function base64ToBytes(text: string): Uint8Array {
  let end = text.length;
  while (end > 0 && text.charCodeAt(end - 1) === 61 /* = */) end--;
  if (text.length - end > 2 || end % 4 === 1) {
    throw new WharfError("protocol", "invalid base64: wrong length or padding");
  }
  const out = new Uint8Array(Math.floor((end * 3) / 4));
  let o = 0;
  let acc = 0;
  let bits = 0;
  for (let i = 0; i < end; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? B64_INDEX[c] : -1;
    if (v < 0) throw new WharfError("protocol", `invalid base64: character ${JSON.stringify(text[i])}`);
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 255;
      acc &= (1 << bits) - 1;
    }
  }
  return out;
}

function toBytes(p: Uint8Array | ArrayBuffer | ArrayBufferView): Uint8Array {
  if (p instanceof Uint8Array) return p;
  if (ArrayBuffer.isView(p)) return new Uint8Array(p.buffer, p.byteOffset, p.byteLength);
  if (p instanceof ArrayBuffer || Object.prototype.toString.call(p) === "[object ArrayBuffer]") {
    return new Uint8Array(p as ArrayBuffer);
  }
  throw new TypeError("a payload is a string, a Uint8Array, an ArrayBuffer or an ArrayBufferView");
}

/**
 * A payload as a JSON frame carries it: a string as is, bytes as base64.
 * @param payload - text or bytes
 */
export function encodePayload(payload: Payload): EncodedPayload {
  if (typeof payload === "string") return { payload };
  return { payload: bytesToBase64(toBytes(payload)), encoding: "base64" };
}

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder();

/**
 * The bytes of a frame's `payload` given its `encoding` (absent or
 * `"utf8"`: the text's UTF-8; `"base64"`: decoded).
 * @param payload - the frame's `payload`
 * @param encoding - the frame's `encoding`
 */
export function decodePayload(payload: string, encoding?: string): Uint8Array {
  return encoding === "base64" ? base64ToBytes(payload) : utf8Encoder.encode(payload);
}

/**
 * A received payload: as bytes ({@link Content.payload}), as text
 * ({@link Content.text}) or as JSON ({@link Content.json}). Text payloads
 * (valid UTF-8) arrive as text and are not converted unless read as bytes.
 */
export class Content {
  /** The payload as the frame carried it. */
  private readonly raw: string;
  /** Whether `raw` is base64. */
  private readonly base64: boolean;
  private bytes: Uint8Array | undefined;

  /** @param f - the frame's `payload` and `encoding` */
  constructor(f: { payload?: unknown; encoding?: unknown }) {
    this.raw = typeof f.payload === "string" ? f.payload : "";
    this.base64 = f.encoding === "base64";
  }

  /** The payload's bytes. */
  get payload(): Uint8Array {
    if (this.bytes === undefined) this.bytes = decodePayload(this.raw, this.base64 ? "base64" : undefined);
    return this.bytes;
  }

  /** True when the payload is not valid UTF-8 (it came base64-encoded). */
  get binary(): boolean {
    return this.base64;
  }

  /** The payload as text (UTF-8; invalid sequences become U+FFFD). */
  text(): string {
    return this.base64 ? utf8Decoder.decode(this.payload) : this.raw;
  }

  /**
   * The payload parsed as JSON.
   * @throws SyntaxError when it is not JSON
   */
  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }
}

/** A topic message, as a subscription's `message` event hands it. */
export class Message extends Content {
  /** The topic it was published to. */
  readonly topic: string;
  /**
   * Its sequence number on the topic; on a topic with history, its offset
   * (consecutive from 1, kept across broker restarts).
   */
  readonly seq: number;
  /** True for the topic's retained message, sent when subscribing. */
  readonly retained: boolean;
  /** The publisher's headers. */
  readonly headers: Readonly<Record<string, string>>;

  /** @param f - a `message` frame */
  constructor(f: Record<string, any>) {
    super(f);
    this.topic = String(f.topic ?? "");
    this.seq = Number(f.seq ?? 0);
    this.retained = f.retained === true;
    this.headers = (f.headers && typeof f.headers === "object" ? f.headers : {}) as Record<string, string>;
  }
}

// ---------------------------------------------------------------------------
// Backoff and tokens

/** How reconnects are spaced: exponential backoff with full jitter. */
export interface BackoffOptions {
  /** The cap of the first delay, in ms (default 500). */
  initialMs?: number;
  /** The largest cap, in ms (default 30000). */
  maxMs?: number;
  /** How much the cap grows per failed attempt (default 2). */
  factor?: number;
}

/** The defaults of {@link BackoffOptions}. */
export const DEFAULT_BACKOFF: Readonly<Required<BackoffOptions>> = Object.freeze({
  initialMs: 500,
  maxMs: 30_000,
  factor: 2,
});

/**
 * The delay before reconnect attempt `attempt` (0 for the first after a
 * loss): a uniformly random time between 0 and
 * `min(maxMs, initialMs * factor ** attempt)` ("full jitter"), so that
 * clients that lost the same broker do not all come back at once.
 * @param attempt - failed attempts since the last welcome
 * @param options - the schedule
 * @param random - a source of numbers in [0, 1)
 */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const initial = options.initialMs ?? DEFAULT_BACKOFF.initialMs;
  const max = options.maxMs ?? DEFAULT_BACKOFF.maxMs;
  const factor = options.factor ?? DEFAULT_BACKOFF.factor;
  const cap = Math.min(max, initial * Math.pow(factor, Math.max(0, Math.min(attempt, 64))));
  return Math.floor(random() * cap);
}

/** The times a JWT carries (seconds since the Unix epoch). */
export interface JwtTimes {
  /** Expiry (`exp`). */
  exp: number;
  /** Issue time (`iat`), if given. */
  iat?: number;
}

/**
 * The `exp` (and `iat`) of a JWT, read without checking its signature;
 * null when `token` is not a JWT with a numeric `exp` (a service token).
 * @param token - a token
 */
export function jwtTimes(token: string): JwtTimes | null {
  const parts = token.split(".");
  if (parts.length !== 3) return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(utf8Decoder.decode(base64ToBytes(b64)));
    if (!claims || typeof claims.exp !== "number" || !isFinite(claims.exp)) return null;
    const times: JwtTimes = { exp: claims.exp };
    if (typeof claims.iat === "number" && isFinite(claims.iat)) times.iat = claims.iat;
    return times;
  } catch {
    return null;
  }
}

/**
 * How long from `nowMs` until a session holding `token` should present a
 * fresh one: `margin` before its `exp`, where `margin` is 10% of the
 * token's lifetime, at least 1 s and at most `marginMs`; 0 when that
 * moment has passed; null for a token without `exp`.
 * @param token - the session's token
 * @param nowMs - the time now (ms since the Unix epoch)
 * @param marginMs - the largest margin (default 30 s)
 */
export function refreshDelayMs(token: string, nowMs: number, marginMs = 30_000): number | null {
  const t = jwtTimes(token);
  if (!t) return null;
  const expMs = t.exp * 1000;
  const issuedMs = t.iat !== undefined && t.iat * 1000 <= nowMs ? t.iat * 1000 : nowMs;
  const lifetime = Math.max(0, expMs - issuedMs);
  const margin = Math.min(marginMs, Math.max(1000, lifetime / 10));
  return Math.max(0, Math.floor(expMs - margin - nowMs));
}

// ---------------------------------------------------------------------------
// Recovery

/**
 * A position in a topic's history: its epoch (which names one unbroken
 * run of offsets) and the offset of the last message received. Keep it
 * (e.g. in `localStorage`) to resume a later subscription with
 * `recover: position`.
 */
export interface Position {
  /** The topic's epoch; "" for none. */
  epoch: string;
  /** The last offset (`seq`) received. */
  offset: number;
}

/** The broker's `subscribed` answer, as {@link RecoveryTracker.settle} reads it. */
export interface SubscribedFrame {
  /** The topic's epoch ("" without history). */
  epoch: string;
  /** The topic's latest offset when the subscription started. */
  offset: number;
  /** Whether every message after the position given was delivered. */
  recovered: boolean;
}

/** What a {@link RecoveryTracker} needs of a message. */
export interface Positioned {
  /** Its offset. */
  seq: number;
  /** Retained messages are not positions. */
  retained?: boolean;
}

/**
 * The position tracking and duplicate filter of a recovering subscription
 * (used by {@link Subscription}; exported for tests and other transports).
 *
 * Each (re)subscribe starts with {@link RecoveryTracker.begin}, which
 * gives the position to send. Until the broker's `subscribed` answer,
 * messages are held ({@link RecoveryTracker.offer} returns none), because
 * whether an offset is new depends on the epoch that answer names (a new
 * epoch restarts the offsets' meaning). {@link RecoveryTracker.settle}
 * then takes the answer and releases what was held; later messages go
 * through {@link RecoveryTracker.offer} one by one.
 *
 * An offset is delivered at most once per epoch: the tracker keeps the
 * offset below which everything was delivered (the position) and the few
 * delivered above it out of order (a `priority: "high"` publish overtakes
 * queued ones). Resuming from the position replays the rest, and what was
 * delivered already is dropped.
 */
export class RecoveryTracker<T extends Positioned> {
  /** The topic's epoch as last learnt ("" before the first answer, or without history). */
  epoch: string;
  /** Every offset up to here was delivered (or skipped knowingly). */
  private mark: number;
  /** Offsets above `mark` delivered out of order. */
  private readonly ahead = new Set<number>();
  /** Messages held until `subscribed` (null when not waiting for it). */
  private held: T[] | null = null;
  private readonly maxHeld: number;
  private readonly maxAhead: number;
  /** Duplicates dropped so far. */
  duplicates = 0;

  /**
   * @param start - a position to resume from (null: none)
   * @param limits - `maxHeld`: messages held while waiting for
   *   `subscribed` (default 100000); `maxAhead`: out-of-order offsets
   *   remembered before a gap below them is given up (default 10000)
   */
  constructor(start?: Position | null, limits: { maxHeld?: number; maxAhead?: number } = {}) {
    this.epoch = start?.epoch ?? "";
    this.mark = start?.offset ?? 0;
    this.maxHeld = limits.maxHeld ?? 100_000;
    this.maxAhead = limits.maxAhead ?? 10_000;
  }

  /** The position to resume from. */
  get position(): Position {
    return { epoch: this.epoch, offset: this.mark };
  }

  /** True between {@link RecoveryTracker.begin} and {@link RecoveryTracker.settle}. */
  get awaiting(): boolean {
    return this.held !== null;
  }

  /** Starts a (re)subscribe: returns the `recover` field to send. */
  begin(): Position {
    this.held = [];
    return this.position;
  }

  /** Abandons a (re)subscribe whose answer will not come (connection lost). */
  abort(): void {
    this.held = null;
  }

  /**
   * Takes a message: returns those to deliver now (none while waiting for
   * `subscribed`), or false if the hold overflowed (the held messages are
   * dropped: subscribe again from {@link RecoveryTracker.position}).
   * @param m - a message of the subscription
   */
  offer(m: T): T[] | false {
    if (this.held !== null) {
      if (this.held.length >= this.maxHeld) {
        this.held = null;
        return false;
      }
      this.held.push(m);
      return [];
    }
    return m.retained || this.accept(m.seq) ? [m] : [];
  }

  /**
   * Takes the broker's `subscribed` answer: when nothing was recovered,
   * the position becomes the topic's latest offset under its (maybe new)
   * epoch, as no older message will come. Returns the held messages to
   * deliver now, duplicates dropped.
   * @param f - the `subscribed` frame
   */
  settle(f: SubscribedFrame): T[] {
    const held = this.held ?? [];
    this.held = null;
    if (!f.recovered) {
      this.epoch = f.epoch;
      this.mark = f.offset;
      this.ahead.clear();
    }
    const out: T[] = [];
    for (const m of held) if (m.retained || this.accept(m.seq)) out.push(m);
    return out;
  }

  /** Records offset `seq`; false when it was delivered already. */
  private accept(seq: number): boolean {
    if (seq <= this.mark || this.ahead.has(seq)) {
      this.duplicates++;
      return false;
    }
    if (seq === this.mark + 1) {
      this.mark = seq;
      this.absorb();
    } else {
      this.ahead.add(seq);
      if (this.ahead.size > this.maxAhead) {
        // The offsets below the lowest one ahead are not coming (dropped by
        // the broker's slow-consumer policy): give them up.
        let low = Infinity;
        for (const s of this.ahead) if (s < low) low = s;
        this.ahead.delete(low);
        this.mark = low;
        this.absorb();
      }
    }
    return true;
  }

  private absorb(): void {
    while (this.ahead.delete(this.mark + 1)) this.mark++;
  }
}

// ---------------------------------------------------------------------------
// Events

type Listener<A extends unknown[]> = (...args: A) => void;

/** A minimal typed event emitter. */
export class Emitter<E extends { [K in keyof E]: unknown[] }> {
  private readonly listeners: { [K in keyof E]?: Set<Listener<E[K]>> } = {};

  /**
   * Calls `fn` on each `event`.
   * @returns a function that removes the listener
   */
  on<K extends keyof E>(event: K, fn: Listener<E[K]>): () => void {
    (this.listeners[event] ??= new Set()).add(fn);
    return () => this.off(event, fn);
  }

  /** Removes a listener added with {@link Emitter.on}. */
  off<K extends keyof E>(event: K, fn: Listener<E[K]>): void {
    this.listeners[event]?.delete(fn);
  }

  /** Calls the listeners of `event`; a listener that throws is reported to {@link Emitter.listenerFailed}. */
  protected emit<K extends keyof E>(event: K, ...args: E[K]): void {
    const set = this.listeners[event];
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(...args);
      } catch (e) {
        this.listenerFailed(String(event), e);
      }
    }
  }

  /** Called when a listener throws; by default does nothing. */
  protected listenerFailed(_event: string, _error: unknown): void {}
}

// ---------------------------------------------------------------------------
// Public types

/** What a WebSocket must offer: the browser's, Node 22's, or the `ws` package's. */
export interface WebSocketLike {
  /** 0 connecting, 1 open, 2 closing, 3 closed. */
  readonly readyState: number;
  /** Sends a text frame. */
  send(data: string): void;
  /** Closes the connection. */
  close(code?: number, reason?: string): void;
  /** Open handler. */
  onopen: ((ev: any) => void) | null;
  /** Message handler (`ev.data` is a string for text frames). */
  onmessage: ((ev: any) => void) | null;
  /** Close handler (`ev.code`, `ev.reason`). */
  onclose: ((ev: any) => void) | null;
  /** Error handler. */
  onerror: ((ev: any) => void) | null;
}

/** A WebSocket constructor (the global `WebSocket`, or `ws`'s in Node 18 to 21). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** Options of {@link WharfClient}. */
export interface WharfClientOptions {
  /** A token (service token or JWT) presented in `hello`. */
  token?: string;
  /**
   * Fetches a token: called before each (re)connect, and, for a JWT with
   * `exp`, before it expires to `refresh` the session. Takes precedence
   * over `token`.
   */
  getToken?: () => string | Promise<string>;
  /** The client id given in `hello` (the broker makes one up otherwise). */
  clientId?: string;
  /**
   * The WebSocket constructor; default `globalThis.WebSocket` (browsers,
   * Node 22+). In Node 18 to 21 pass the `ws` package's.
   */
  WebSocket?: WebSocketConstructor;
  /** Reconnect delays (default {@link DEFAULT_BACKOFF}). */
  backoff?: BackoffOptions;
  /** Reconnect after a lost connection (default true). */
  reconnect?: boolean;
  /** How long a request waits for its answer, in ms (default 10000). */
  requestTimeoutMs?: number;
  /** How long an attempt may take from `new WebSocket` to `welcome`, in ms (default 10000). */
  connectTimeoutMs?: number;
  /**
   * Interval of the client's `ping`s, in ms (default 15000; 0: none). A
   * ping unanswered within `requestTimeoutMs` drops the connection and
   * reconnects: that is how a silently dead network is noticed.
   */
  heartbeatMs?: number;
  /** The largest margin before a JWT's `exp` at which it is refreshed, in ms (default 30000). */
  refreshMarginMs?: number;
  /** Requests (`publish`, `enqueue`) kept while disconnected (default 1000); more are refused with `buffer_full`. */
  maxQueued?: number;
  /** Requests awaiting an answer (default 10000); more are refused with `buffer_full`. */
  maxPending?: number;
}

/** The broker's limits for a session (from `welcome`). */
export interface Limits {
  /** Largest frame, bytes. */
  maxFrame: number;
  /** Largest payload, bytes. */
  maxPayload: number;
  /** Outbound queue bound, bytes. */
  outboundLimit: number;
  /** Frames per second before `rate_limited`. */
  ratePerS: number;
}

/** The broker's `welcome`. */
export interface Welcome {
  /** The session's id (a UUID). */
  session: string;
  /** The client id (given, or made up by the broker). */
  clientId: string;
  /** The protocol version (1). */
  version: number;
  /** The session's limits. */
  limits: Limits;
}

/** Why and how a connection ended (the `disconnected` event). */
export interface DisconnectInfo {
  /** The WebSocket close code (1006: lost without a close frame; 4000: dropped by this client). */
  code: number;
  /** The close reason. */
  reason: string;
  /** The error that ended it, if one did (e.g. `unauthorized`). */
  error?: WharfError;
  /** Whether the client will try again. */
  willReconnect: boolean;
  /** The delay before the next attempt, in ms. */
  delayMs?: number;
}

/** The client's states. */
export type ConnectionState = "idle" | "connecting" | "connected" | "reconnecting" | "closed";

/** Events of {@link WharfClient}. */
export interface ClientEvents {
  /** A session began (first connect or reconnect); subscriptions are being restored. */
  connected: [welcome: Welcome];
  /** The connection ended; see {@link DisconnectInfo.willReconnect}. */
  disconnected: [info: DisconnectInfo];
  /** An error not tied to a request: the broker's errors without `rid`, failed token refreshes, callbacks that threw. */
  error: [error: WharfError];
  /** The broker dropped `count` topic messages for this slow session (recovering subscriptions resubscribe to get them back). */
  dropped: [count: number];
}

/** What a (re)subscribe found out (the `recovery` event). */
export interface RecoveryInfo {
  /** The broker delivered every message after the position given. */
  recovered: boolean;
  /** A position was given: a resubscribe, or `recover: position`. */
  resumed: boolean;
  /**
   * Messages may be missing between what was received and what follows
   * (`resumed && !recovered`): reload the state from its source of truth.
   */
  gap: boolean;
  /** The topic's epoch ("" without history or recovery). */
  epoch: string;
  /** The topic's latest offset when the subscription started. */
  offset: number;
  /** How many missed messages the broker replayed. */
  replayed: number;
  /** Why nothing was recovered, when not. */
  reason?: string;
}

/** Events of a {@link Subscription}. */
export interface SubscriptionEvents {
  /** A message. */
  message: [message: Message];
  /** Each (re)subscribe's outcome; check `gap`. */
  recovery: [info: RecoveryInfo];
  /** The subscription ended: refused by the broker, ended by it (`ended`), or the client stopped. */
  ended: [error: WharfError];
}

/** Options of {@link WharfClient.subscribe}. */
export interface SubscribeOptions {
  /**
   * Recover missed messages after reconnects: true (the default for a
   * topic name) starts at the topic's current position; a
   * {@link Position} resumes from it; false (the default, and the only
   * choice, for a filter with wildcards) subscribes without recovery.
   */
  recover?: boolean | Position;
  /** Called with each message (a `message` listener). */
  onMessage?: (message: Message) => void;
  /** Called with each (re)subscribe's outcome (a `recovery` listener). */
  onRecovery?: (info: RecoveryInfo) => void;
  /** Called when the subscription ends (an `ended` listener). */
  onEnded?: (error: WharfError) => void;
  /** Messages held while waiting for `subscribed` (default 100000). */
  maxHeld?: number;
}

/** Options of {@link WharfClient.publish}. */
export interface PublishOptions {
  /** Message headers. */
  headers?: Record<string, string>;
  /** Keep as the topic's retained message (an empty payload clears it). */
  retain?: boolean;
  /** `"high"` overtakes queued normal messages at each subscriber. */
  priority?: "normal" | "high";
  /**
   * Wait for the broker's receipt (default true). With false the promise
   * resolves once the frame is written (or queued while disconnected).
   */
  confirm?: boolean;
}

/** Options of {@link WharfClient.enqueue}. */
export interface EnqueueOptions {
  /** Message headers. */
  headers?: Record<string, string>;
  /** 0 (lowest, default) to 9. */
  priority?: number;
  /** How long the message may wait in the queue, in ms. */
  ttlMs?: number;
}

/** The broker's `enqueued` answer. */
export interface Enqueued {
  /** The queue. */
  queue: string;
  /** The message's number in the queue. */
  seq: number;
}

/** Options of {@link WharfClient.consume}. */
export interface ConsumeOptions {
  /** Deliveries held unacknowledged at once, 1 to 10000 (default 10). */
  prefetch?: number;
}

/** Handles one delivery; settle it with `ack`, `nack` or `reject`. */
export type DeliveryHandler = (delivery: Delivery) => void | Promise<void>;

/** Events of a {@link Consumer}. */
export interface ConsumerEvents {
  /** The consumer ended: refused or ended by the broker, or the client stopped. */
  ended: [error: WharfError];
}

// ---------------------------------------------------------------------------
// Subscriptions and consumers

type Timer = ReturnType<typeof setTimeout>;
type Answer = (error: WharfError | null, value?: any) => void;
type Frame = Record<string, unknown>;
const noop = (): void => {};

/** What subscriptions and consumers use of their client. */
interface Link {
  /** Sends a frame now and resolves with its answer (`rid` added). */
  ask(frame: Frame): Promise<any>;
  /**
   * Sends a frame now and calls `done` with its answer as soon as it is
   * read (synchronously, before the next frame is handled).
   */
  askNow(frame: Frame, done: Answer): void;
  /** Sends a frame now, without a `rid`. */
  tell(frame: Frame): void;
  /** Whether a session is up. */
  connected(): boolean;
  /** A new wire id with this prefix. */
  newId(prefix: string): string;
  /** Routes frames for wire id `id` to `owner`. */
  route(id: string, owner: Subscription | Consumer): void;
  /** Stops routing `id`. */
  unroute(id: string): void;
  /** Forgets an ended subscription or consumer. */
  forget(owner: Subscription | Consumer): void;
  /** Reports an error on the client's `error` event. */
  report(error: WharfError): void;
  /** The connection looks stuck: drop it and reconnect. */
  unhealthy(why: string, error: WharfError): void;
}

/**
 * Ends a subscription or consumer `wire` on the broker: resolves once it
 * confirmed, at once while disconnected (the broker ended it with the
 * session), and when it no longer knew it.
 */
function endOnBroker(link: Link, wire: string | null): Promise<void> {
  if (wire === null || !link.connected()) return Promise.resolve();
  return link.ask({ op: "unsubscribe", id: wire }).then(
    () => undefined,
    (e: WharfError) => {
      if (e.code === "closed" || e.code === "unknown_subscription") return;
      throw e;
    },
  );
}

function handlerError(what: string, e: unknown): WharfError {
  return new WharfError("handler", `${what} threw: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
}

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Awaiting is optional: an unobserved rejection must not crash Node.
  promise.catch(noop);
  return { promise, resolve, reject };
}

/** Returns `p`, marked handled: leaving its rejection unobserved is allowed. */
function quiet<T>(p: Promise<T>): Promise<T> {
  p.catch(noop);
  return p;
}

/** Whether `filter` has wildcards (`+`, `#`). */
function isWildcard(filter: string): boolean {
  return filter.split("/").some((l) => l === "+" || l === "#");
}

/**
 * A topic subscription (from {@link WharfClient.subscribe}). It lives
 * across reconnects until {@link Subscription.unsubscribe}, the broker
 * ends it, or the client closes.
 */
export class Subscription extends Emitter<SubscriptionEvents> {
  /** The topic (or filter). */
  readonly topic: string;
  /** Whether it recovers missed messages after reconnects. */
  readonly recovering: boolean;
  /**
   * Resolves with the first subscribe's outcome; rejects with the
   * broker's error (e.g. `invalid_filter`) or `closed`.
   */
  readonly ready: Promise<RecoveryInfo>;
  private readonly link: Link;
  private readonly tracker: RecoveryTracker<Message> | null;
  private readonly started = deferred<RecoveryInfo>();
  private wire: string | null = null;
  private live = true;
  private subscribedOnce = false;
  private readonly givenPosition: boolean;
  private retryTimer: Timer | null = null;
  private overflowed = false;

  /** Made by {@link WharfClient.subscribe}, not by applications. */
  constructor(link: Link, topic: string, options: SubscribeOptions) {
    super();
    this.link = link;
    this.topic = topic;
    const recover = options.recover ?? !isWildcard(topic);
    this.recovering = recover !== false;
    const start = typeof recover === "object" && recover !== null ? recover : null;
    this.givenPosition = start !== null && start.epoch !== "";
    this.tracker = this.recovering ? new RecoveryTracker<Message>(start, { maxHeld: options.maxHeld }) : null;
    this.ready = this.started.promise;
    if (options.onMessage) this.on("message", options.onMessage);
    if (options.onRecovery) this.on("recovery", options.onRecovery);
    if (options.onEnded) this.on("ended", options.onEnded);
  }

  /**
   * Where the subscription stands: the topic's epoch and the offset of
   * the last message received (null before the topic's epoch is known,
   * and for subscriptions without recovery). Pass it as `recover` to a
   * later subscription (e.g. after a page reload) to resume from here.
   */
  get position(): Position | null {
    if (!this.tracker || this.tracker.epoch === "") return null;
    return this.tracker.position;
  }

  /** False once unsubscribed or ended. */
  get active(): boolean {
    return this.live;
  }

  /** Duplicates dropped so far (a safety net; normally 0). */
  get duplicates(): number {
    return this.tracker?.duplicates ?? 0;
  }

  /**
   * Ends the subscription. Resolves once the broker confirmed (at once
   * while disconnected).
   */
  unsubscribe(): Promise<void> {
    if (!this.live) return Promise.resolve();
    const wire = this.wire;
    this.stop(new WharfError("closed", "unsubscribed"));
    return endOnBroker(this.link, wire);
  }

  protected override listenerFailed(event: string, error: unknown): void {
    this.link.report(handlerError(`a subscription's ${event} listener`, error));
  }

  /** @internal Sends the subscribe (a session is up). */
  _start(): void {
    if (!this.live) return;
    if (this.retryTimer !== null) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    const wire = this.link.newId("s");
    this.wire = wire;
    this.link.route(wire, this);
    const frame: Frame = { op: "subscribe", id: wire, filter: this.topic };
    const resumed = this.subscribedOnce || this.givenPosition || this.overflowed;
    this.overflowed = false;
    if (this.tracker) frame.recover = this.tracker.begin();
    // The answer is handled as soon as it is read: the messages after it
    // must find the tracker settled.
    this.link.askNow(frame, (e, answer) => {
      if (this.wire !== wire) return;
      if (e) this.refused(wire, e);
      else this.subscribed(answer, resumed);
    });
  }

  /** @internal The connection ended: the next session subscribes again. */
  _disconnected(): void {
    this.wire = null;
    this.tracker?.abort();
    if (this.retryTimer !== null) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
  }

  /** @internal A `message` frame for this subscription. */
  _message(m: Message): void {
    if (!this.live) return;
    if (!this.tracker) {
      this.emit("message", m);
      return;
    }
    const out = this.tracker.offer(m);
    if (out === false) {
      this.link.report(
        new WharfError("buffer_full", `subscription to ${this.topic}: too many messages before the broker's answer; subscribing again`),
      );
      // What was held is gone: the next answer must say whether it came back.
      this.overflowed = true;
      this.restart();
      return;
    }
    for (const x of out) this.emit("message", x);
  }

  /**
   * @internal Subscribes again from the current position (after the
   * broker dropped messages for this session), if it recovers.
   */
  _resync(): void {
    if (!this.live || !this.tracker || this.wire === null || !this.link.connected()) return;
    // One attempt at a time; and without history there is nothing to get back.
    if (this.tracker.awaiting || this.tracker.epoch === "") return;
    this.restart();
  }

  /** Ends the current subscribe on the broker and subscribes again from the position. */
  private restart(): void {
    if (this.wire === null || !this.link.connected()) return;
    this.link.tell({ op: "unsubscribe", id: this.wire });
    this.link.unroute(this.wire);
    this._start();
  }

  /** @internal The broker ended it (`ended`). */
  _ended(error: WharfError): void {
    if (!this.live) return;
    this.stop(error);
    this.emit("ended", error);
  }

  /** @internal The client stopped for good. */
  _shutdown(error: WharfError, notify: boolean): void {
    if (!this.live) return;
    this.stop(error);
    if (notify) this.emit("ended", error);
  }

  private stop(error: WharfError): void {
    this.live = false;
    if (this.wire !== null) this.link.unroute(this.wire);
    this.wire = null;
    this.tracker?.abort();
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.link.forget(this);
    this.started.reject(error);
  }

  private subscribed(answer: any, resumed: boolean): void {
    let info: RecoveryInfo;
    let release: Message[] = [];
    if (this.tracker) {
      if (!answer || typeof answer.epoch !== "string" || typeof answer.recovered !== "boolean") {
        this.link.unhealthy("subscribe", new WharfError("protocol", `expected subscribed, got ${JSON.stringify(answer)}`));
        return;
      }
      release = this.tracker.settle({
        epoch: answer.epoch,
        offset: Number(answer.offset ?? 0),
        recovered: answer.recovered,
      });
      info = {
        recovered: answer.recovered,
        resumed,
        gap: resumed && !answer.recovered,
        epoch: answer.epoch,
        offset: Number(answer.offset ?? 0),
        replayed: Number(answer.replayed ?? 0),
      };
      if (typeof answer.reason === "string") info.reason = answer.reason;
    } else {
      info = { recovered: false, resumed, gap: resumed, epoch: "", offset: 0, replayed: 0 };
      if (resumed) info.reason = "subscribed without recovery: messages published while disconnected are not replayed";
    }
    this.subscribedOnce = true;
    this.started.resolve(info);
    this.emit("recovery", info);
    for (const m of release) {
      if (!this.live) return;
      this.emit("message", m);
    }
  }

  private refused(wire: string, e: WharfError): void {
    if (e.code === "closed") return; // the next session subscribes again
    if (e.code === "timeout") {
      this.link.unhealthy(`subscribe to ${this.topic}`, e);
      return;
    }
    if (e.code === "overloaded") {
      // "Try again": after a pause, on the same session.
      this.link.unroute(wire);
      this.tracker?.abort();
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        if (this.live && this.wire === wire && this.link.connected()) this._start();
      }, 1000);
      return;
    }
    this._ended(e);
  }
}

/**
 * A delivery of a queue message to a {@link Consumer}: settle it with
 * {@link Delivery.ack}, {@link Delivery.nack} or {@link Delivery.reject}
 * (within the queue's ack timeout, or it is delivered again).
 *
 * Their promises may be left unawaited: one that fails (the connection
 * closed first: `closed`, `stale_delivery`) is not an unhandled
 * rejection, and the broker delivers the message again.
 */
export class Delivery extends Content {
  /** The queue. */
  readonly queue: string;
  /** The delivery id (valid on this connection only). */
  readonly id: number;
  /** The message's number in the queue (the same for each delivery of it). */
  readonly seq: number;
  /** How many times the message has been delivered, this time included. */
  readonly count: number;
  /** 0 to 9. */
  readonly priority: number;
  /** The headers. */
  readonly headers: Readonly<Record<string, string>>;
  private readonly consumer: Consumer;
  private readonly wire: string;
  private done = false;

  /** Made by its {@link Consumer}, not by applications. */
  constructor(consumer: Consumer, wire: string, f: Record<string, any>) {
    super(f);
    this.consumer = consumer;
    this.wire = wire;
    this.queue = String(f.queue ?? "");
    this.id = Number(f.id ?? 0);
    this.seq = Number(f.seq ?? 0);
    this.count = Number(f.count ?? 1);
    this.priority = Number(f.priority ?? 0);
    this.headers = (f.headers && typeof f.headers === "object" ? f.headers : {}) as Record<string, string>;
  }

  /** Whether `ack`, `nack` or `reject` was called. */
  get settled(): boolean {
    return this.done;
  }

  /** The message is done: the queue deletes it. Resolves once that is durable. */
  ack(): Promise<void> {
    return this.settle("ack", {});
  }

  /**
   * Gives the message back, to be delivered again after `delayMs` (absent:
   * the queue's backoff schedule; 0: at once).
   */
  nack(options: { delayMs?: number } = {}): Promise<void> {
    return this.settle("nack", options.delayMs === undefined ? {} : { delay_ms: options.delayMs });
  }

  /** Sends the message to the queue's dead-letter queue at once. */
  reject(): Promise<void> {
    return this.settle("reject", {});
  }

  /** Still working on it: the ack deadline becomes `extendMs` from now (absent: the queue's ack timeout). */
  touch(extendMs?: number): Promise<void> {
    if (this.done) return quiet(Promise.reject(new WharfError("stale_delivery", `delivery ${this.id} was already settled`)));
    return quiet(this.consumer._settle(this.wire, "touch", this.id, extendMs === undefined ? {} : { extend_ms: extendMs }));
  }

  private settle(op: string, extra: Frame): Promise<void> {
    if (this.done) return quiet(Promise.reject(new WharfError("stale_delivery", `delivery ${this.id} was already settled`)));
    this.done = true;
    return quiet(this.consumer._settle(this.wire, op, this.id, extra));
  }
}

/**
 * A queue consumer (from {@link WharfClient.consume}). It lives across
 * reconnects until {@link Consumer.cancel}, the broker ends it, or the
 * client closes; unacknowledged deliveries go back to the queue when a
 * connection ends, and come again.
 */
export class Consumer extends Emitter<ConsumerEvents> {
  /** The queue. */
  readonly queue: string;
  /** Its credit. */
  readonly prefetch: number;
  /** Resolves once the broker attached the first consumer; rejects with its error. */
  readonly ready: Promise<void>;
  private readonly link: Link;
  private readonly handler: DeliveryHandler;
  private readonly started = deferred<void>();
  private wire: string | null = null;
  private live = true;
  private retryTimer: Timer | null = null;

  /** Made by {@link WharfClient.consume}, not by applications. */
  constructor(link: Link, queue: string, options: ConsumeOptions, handler: DeliveryHandler) {
    super();
    this.link = link;
    this.queue = queue;
    this.prefetch = options.prefetch ?? 10;
    this.handler = handler;
    this.ready = this.started.promise;
  }

  /** False once cancelled or ended. */
  get active(): boolean {
    return this.live;
  }

  /** Stops consuming; unacknowledged deliveries go back to the queue. */
  cancel(): Promise<void> {
    if (!this.live) return Promise.resolve();
    const wire = this.wire;
    this.stop(new WharfError("closed", "cancelled"));
    return endOnBroker(this.link, wire);
  }

  protected override listenerFailed(event: string, error: unknown): void {
    this.link.report(handlerError(`a consumer's ${event} listener`, error));
  }

  /** @internal Sends the consume (a session is up). */
  _start(): void {
    if (!this.live) return;
    const wire = this.link.newId("c");
    this.wire = wire;
    this.link.route(wire, this);
    this.link.askNow({ op: "consume", id: wire, queue: this.queue, prefetch: this.prefetch }, (e) => {
      if (this.wire !== wire) return;
      if (!e) {
        this.started.resolve();
      } else {
        if (e.code === "closed") return;
        if (e.code === "timeout") return this.link.unhealthy(`consume ${this.queue}`, e);
        if (e.code === "overloaded") {
          this.link.unroute(wire);
          this.retryTimer = setTimeout(() => {
            this.retryTimer = null;
            if (this.live && this.wire === wire && this.link.connected()) this._start();
          }, 1000);
          return;
        }
        this._ended(e);
      }
    });
  }

  /** @internal The connection ended. */
  _disconnected(): void {
    this.wire = null;
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  /** @internal A `delivery` frame for this consumer. */
  _delivery(f: Record<string, any>): void {
    if (!this.live || this.wire === null) return;
    const d = new Delivery(this, this.wire, f);
    const failed = (e: unknown) => {
      this.link.report(handlerError(`the delivery handler of ${this.queue}`, e));
      if (!d.settled) d.nack().catch(noop);
    };
    try {
      const r = this.handler(d);
      if (r && typeof (r as Promise<void>).then === "function") (r as Promise<void>).then(undefined, failed);
    } catch (e) {
      failed(e);
    }
  }

  /** @internal Settles delivery `id`, received under wire id `wire`. */
  _settle(wire: string, op: string, id: number, extra: Frame): Promise<void> {
    if (wire !== this.wire || !this.live || !this.link.connected()) {
      return Promise.reject(
        new WharfError(
          "stale_delivery",
          `delivery ${id} came over an earlier connection (or its consumer ended): the broker gave it back to ${this.queue}`,
        ),
      );
    }
    return this.link.ask({ op, sub: wire, ids: [id], ...extra }).then(() => undefined);
  }

  /** @internal The broker ended it. */
  _ended(error: WharfError): void {
    if (!this.live) return;
    this.stop(error);
    this.emit("ended", error);
  }

  /** @internal The client stopped for good. */
  _shutdown(error: WharfError, notify: boolean): void {
    if (!this.live) return;
    this.stop(error);
    if (notify) this.emit("ended", error);
  }

  private stop(error: WharfError): void {
    this.live = false;
    if (this.wire !== null) this.link.unroute(this.wire);
    this.wire = null;
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.link.forget(this);
    this.started.reject(error);
  }
}

// ---------------------------------------------------------------------------
// The client

interface Pending {
  done: Answer;
  timer: Timer;
}

interface Queued {
  frame: Frame;
  answer: boolean;
  resolve: (v: any) => void;
  reject: (e: WharfError) => void;
  timer: Timer;
}

/** The longest delay `setTimeout` takes. */
const MAX_TIMER_MS = 2_147_483_647;

function detach(ws: WebSocketLike): void {
  ws.onopen = noop;
  ws.onmessage = noop;
  ws.onclose = noop;
  // `ws` throws an 'error' event nobody listens to: keep a listener.
  ws.onerror = noop;
}

/** `http(s)://` becomes `ws(s)://`, and an empty path `/ws`. */
function normalizeUrl(url: string): string {
  const base = (globalThis as any).location?.href as string | undefined;
  const u = base ? new URL(url, base) : new URL(url);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.pathname === "" || u.pathname === "/") u.pathname = "/ws";
  return u.toString();
}

/**
 * A connection to a Wharf broker that keeps itself up.
 *
 * ```js
 * const client = new WharfClient("ws://127.0.0.1:7878/ws", { token });
 * await client.connect();
 * const sub = client.subscribe("chat/lobby", {
 *   onMessage: (m) => console.log(m.seq, m.text()),
 *   onRecovery: (r) => { if (r.gap) reloadFromServer(); },
 * });
 * await client.publish("chat/lobby", "hello");
 * ```
 *
 * Requests made while disconnected (`publish`, `enqueue`) wait for the
 * next session (at most `maxQueued` of them, each at most
 * `requestTimeoutMs`); requests sent on a connection that then closes
 * fail with `closed`, as their outcome is unknown.
 */
export class WharfClient extends Emitter<ClientEvents> {
  /** The WebSocket URL. */
  readonly url: string;
  private readonly options: WharfClientOptions;
  private readonly WS: WebSocketConstructor;
  private readonly timeoutMs: number;
  private ws: WebSocketLike | null = null;
  /** Bumped at each socket's start and end: stale callbacks compare it. */
  private gen = 0;
  private _state: ConnectionState = "idle";
  private _welcome: Welcome | null = null;
  private attempt = 0;
  private everConnected = false;
  private nextRid = 1;
  private nextId = 1;
  private token: string | undefined;
  private readonly pending = new Map<number, Pending>();
  private outbox: Queued[] = [];
  private readonly routes = new Map<string, Subscription | Consumer>();
  private readonly subscriptions = new Set<Subscription>();
  private readonly consumers = new Set<Consumer>();
  private readonly waiters: { resolve: (w: Welcome) => void; reject: (e: WharfError) => void }[] = [];
  private handshakeError: WharfError | null = null;
  private socketError = "";
  private handshakeTimer: Timer | null = null;
  private reconnectTimer: Timer | null = null;
  private heartbeatTimer: ReturnType<typeof setInterval> | null = null;
  private refreshTimer: Timer | null = null;
  private pinging = false;
  private readonly link: Link;

  /**
   * @param url - `ws://HOST:PORT/ws` (`http://HOST:PORT` works too)
   * @param options - see {@link WharfClientOptions}
   * @throws TypeError when there is no WebSocket to use
   */
  constructor(url: string, options: WharfClientOptions = {}) {
    super();
    this.url = normalizeUrl(url);
    this.options = { ...options };
    const WS = options.WebSocket ?? ((globalThis as any).WebSocket as WebSocketConstructor | undefined);
    if (!WS) {
      throw new TypeError("no WebSocket: pass the `WebSocket` option (e.g. the `ws` package's) on Node before 22");
    }
    this.WS = WS;
    this.timeoutMs = options.requestTimeoutMs ?? 10_000;
    this.token = options.token;
    this.link = {
      ask: (frame) => this.sendNow(frame, true),
      askNow: (frame, done) => this.ask(frame, done),
      tell: (frame) => {
        this.sendNow(frame, false).catch(noop);
      },
      connected: () => this._state === "connected",
      newId: (prefix) => `${prefix}${this.nextId++}`,
      route: (id, owner) => this.routes.set(id, owner),
      unroute: (id) => this.routes.delete(id),
      forget: (owner) => {
        if (owner instanceof Subscription) this.subscriptions.delete(owner);
        else this.consumers.delete(owner);
      },
      report: (e) => this.emit("error", e),
      unhealthy: (why, e) => this.drop(4000, `${why}: ${e.message}`.slice(0, 120), e),
    };
  }

  /** The connection's state. */
  get state(): ConnectionState {
    return this._state;
  }

  /** The current session's `welcome` (null while disconnected). */
  get welcome(): Welcome | null {
    return this._state === "connected" ? this._welcome : null;
  }

  /**
   * Connects, and keeps reconnecting after losses until {@link WharfClient.close}.
   * Resolves at the first `welcome`. Rejects when the broker refuses the
   * credentials (`unauthorized`, `forbidden`: the client then stops) or
   * the client is closed; network failures are retried with backoff
   * meanwhile (race it with a timer for a deadline).
   */
  connect(): Promise<Welcome> {
    if (this._state === "closed") return Promise.reject(new WharfError("closed", "the client was closed"));
    if (this._state === "connected" && this._welcome) return Promise.resolve(this._welcome);
    const p = new Promise<Welcome>((resolve, reject) => this.waiters.push({ resolve, reject }));
    if (this._state === "idle") {
      this._state = "connecting";
      void this.open();
    }
    return p;
  }

  /**
   * Closes the connection for good: requests waiting fail with `closed`,
   * subscriptions and consumers end (without `ended` events).
   */
  close(): Promise<void> {
    if (this._state === "closed") return Promise.resolve();
    const ws = this.ws;
    const wasConnected = this._state === "connected";
    this.shutdown(new WharfError("closed", "the client was closed"), false);
    if (ws) this.emit("disconnected", { code: 1000, reason: "client closed", willReconnect: false });
    if (!ws) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(t);
        detach(ws);
        resolve();
      };
      const t = setTimeout(done, 1000);
      ws.onclose = done;
      try {
        if (wasConnected) ws.send(JSON.stringify({ op: "close" }));
        ws.close(1000, "client closed");
      } catch {
        done();
      }
    });
  }

  /**
   * Subscribes to a topic (or a filter, without recovery). Sent now if
   * connected, else at the next session; restored after every reconnect.
   * @param topic - a topic name, or a filter with `+` / `#`
   * @param options - callbacks and recovery; a function is taken as `onMessage`
   * @throws TypeError for an empty topic, or recovery asked on a filter with wildcards
   */
  subscribe(topic: string, options: SubscribeOptions | ((message: Message) => void) = {}): Subscription {
    if (typeof topic !== "string" || topic === "") throw new TypeError("subscribe: the topic must be a non-empty string");
    const opts = typeof options === "function" ? { onMessage: options } : options;
    if (opts.recover && isWildcard(topic)) {
      throw new TypeError(`subscribe: recovery needs a topic name, not a filter with wildcards (${topic})`);
    }
    const sub = new Subscription(this.link, topic, opts);
    if (this._state === "closed") {
      sub._shutdown(new WharfError("closed", "the client was closed"), false);
      return sub;
    }
    this.subscriptions.add(sub);
    if (this._state === "connected") sub._start();
    return sub;
  }

  /**
   * Consumes a queue: `handler` gets each delivery, to settle with
   * `ack()`, `nack()` or `reject()`. A handler that throws (or whose
   * promise rejects) before settling nacks the delivery.
   * @param queue - the queue (created if missing)
   * @param options - `prefetch`
   * @param handler - called with each delivery
   */
  consume(queue: string, options: ConsumeOptions, handler: DeliveryHandler): Consumer {
    if (typeof queue !== "string" || queue === "") throw new TypeError("consume: the queue must be a non-empty string");
    if (typeof handler !== "function") throw new TypeError("consume: a handler is required");
    const c = new Consumer(this.link, queue, options ?? {}, handler);
    if (this._state === "closed") {
      c._shutdown(new WharfError("closed", "the client was closed"), false);
      return c;
    }
    this.consumers.add(c);
    if (this._state === "connected") c._start();
    return c;
  }

  /**
   * Publishes a message. Resolves once the broker's receipt came (the
   * message was queued for every current subscriber), or with
   * `confirm: false` once written. Text goes as is; bytes as base64.
   * @param topic - a topic name
   * @param payload - text or bytes
   * @param options - headers, retain, priority, confirm
   */
  publish(topic: string, payload: Payload, options: PublishOptions = {}): Promise<void> {
    const frame: Frame = { op: "publish", topic, ...encodePayload(payload) };
    if (options.headers) frame.headers = options.headers;
    if (options.retain) frame.retain = true;
    if (options.priority && options.priority !== "normal") frame.priority = options.priority;
    return this.request(frame, options.confirm !== false).then(() => undefined);
  }

  /**
   * Puts a message on a queue. Resolves with its `seq` once it is durable.
   * @param queue - the queue (created if missing)
   * @param payload - text or bytes
   * @param options - headers, priority (0-9), ttlMs
   */
  enqueue(queue: string, payload: Payload, options: EnqueueOptions = {}): Promise<Enqueued> {
    const frame: Frame = { op: "enqueue", queue, ...encodePayload(payload) };
    if (options.headers) frame.headers = options.headers;
    if (options.priority) frame.priority = options.priority;
    if (options.ttlMs) frame.ttl_ms = options.ttlMs;
    return this.request(frame, true).then((a: any) => ({ queue: String(a?.queue ?? queue), seq: Number(a?.seq ?? 0) }));
  }

  /** Pings the broker; resolves with the round trip in ms. */
  ping(): Promise<number> {
    const t0 = Date.now();
    return this.sendNow({ op: "ping" }, true).then(() => Date.now() - t0);
  }

  /**
   * Presents a fresh token for the session (`refresh`): `token`, or one
   * from `getToken`. Later reconnects use it too. Usually automatic: a
   * JWT with `exp` is refreshed before it expires when `getToken` is set.
   * @param token - the new token (default: from `getToken`)
   */
  async refresh(token?: string): Promise<void> {
    let t = token;
    if (t === undefined && this.options.getToken) t = await this.fetchToken();
    if (!t) throw new WharfError("token", "refresh: no token given and no getToken option");
    await this.sendNow({ op: "refresh", token: t }, true);
    this.token = t;
    if (!this.options.getToken) this.options.token = t;
    this.scheduleRefresh();
  }

  protected override listenerFailed(event: string, error: unknown): void {
    if (event !== "error") this.emit("error", handlerError(`a client ${event} listener`, error));
  }

  // -- connection ------------------------------------------------------------

  private async fetchToken(): Promise<string> {
    const getToken = this.options.getToken!;
    let timer: Timer | undefined;
    try {
      const t = await Promise.race([
        Promise.resolve().then(() => getToken()),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new WharfError("timeout", "getToken did not answer in time")), this.connectTimeoutMs());
        }),
      ]);
      if (typeof t !== "string" || t === "") throw new WharfError("token", "getToken gave no token");
      return t;
    } catch (e) {
      if (e instanceof WharfError) throw e;
      throw new WharfError("token", `getToken failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    } finally {
      clearTimeout(timer);
    }
  }

  private connectTimeoutMs(): number {
    return this.options.connectTimeoutMs ?? 10_000;
  }

  private async open(): Promise<void> {
    const gen = ++this.gen;
    this.handshakeError = null;
    this.socketError = "";
    if (this.options.getToken) {
      try {
        const t = await this.fetchToken();
        if (gen !== this.gen) return;
        this.token = t;
      } catch (e) {
        if (gen !== this.gen) return;
        this.lost(gen, 1006, "no token", e as WharfError);
        return;
      }
    } else {
      this.token = this.options.token;
    }
    let ws: WebSocketLike;
    try {
      ws = new this.WS(this.url, "wharf.json");
    } catch (e) {
      this.lost(gen, 1006, "WebSocket failed", new WharfError("closed", `new WebSocket failed: ${String(e)}`, { cause: e }));
      return;
    }
    this.ws = ws;
    this.handshakeTimer = setTimeout(() => {
      if (gen === this.gen) this.drop(4000, "no welcome in time", new WharfError("timeout", `no welcome within ${this.connectTimeoutMs()} ms`));
    }, this.connectTimeoutMs());
    ws.onopen = () => {
      if (gen !== this.gen) return;
      const hello: Frame = { op: "hello" };
      if (this.options.clientId) hello.client_id = this.options.clientId;
      if (this.token) hello.token = this.token;
      this.write(hello);
    };
    ws.onmessage = (ev: any) => {
      if (gen === this.gen) this.receive(ev.data);
    };
    ws.onerror = (ev: any) => {
      if (gen === this.gen) this.socketError = String(ev?.message ?? ev?.error?.message ?? "");
    };
    ws.onclose = (ev: any) => {
      if (gen === this.gen) this.lost(gen, Number(ev?.code ?? 1006), String(ev?.reason ?? ""));
    };
  }

  /** Closes the socket from this side and handles the loss at once. */
  private drop(code: number, reason: string, error?: WharfError): void {
    const ws = this.ws;
    if (!ws) return;
    detach(ws);
    try {
      ws.close(code, reason);
    } catch {
      // Closing a socket that is not open: nothing to do.
    }
    this.lost(this.gen, code, reason, error);
  }

  private lost(gen: number, code: number, reason: string, error?: WharfError): void {
    if (gen !== this.gen || this._state === "closed") return;
    if (this.ws) detach(this.ws);
    this.ws = null;
    this.gen++;
    this.stopTimers();
    const why = reason || this.socketError;
    const err =
      error ??
      this.handshakeError ??
      new WharfError("closed", `the connection closed (${code}${why ? `: ${why}` : ""})`, { closeCode: code });
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      clearTimeout(p.timer);
      p.done(
        new WharfError("closed", "the connection closed before the answer came: the request may or may not have been carried out", {
          closeCode: code,
          cause: err,
        }),
      );
    }
    this.pinging = false;
    this.routes.clear();
    for (const s of this.subscriptions) s._disconnected();
    for (const c of this.consumers) c._disconnected();
    const authFailed = err.code === "unauthorized" || err.code === "forbidden" || code === 4401;
    const fatal =
      this.options.reconnect === false ||
      (authFailed && (!this.everConnected || !this.options.getToken));
    if (fatal) {
      this.shutdown(err, true);
      this.emit("disconnected", { code, reason: why, error: err, willReconnect: false });
      return;
    }
    const delayMs = backoffDelay(this.attempt++, this.options.backoff);
    this._state = "reconnecting";
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (this._state === "reconnecting") void this.open();
    }, delayMs);
    this.emit("disconnected", { code, reason: why, error: err, willReconnect: true, delayMs });
  }

  /** Stops for good: everything waiting fails with `error`. */
  private shutdown(error: WharfError, notify: boolean): void {
    this._state = "closed";
    this.gen++;
    if (this.ws) detach(this.ws);
    this.ws = null;
    this.stopTimers();
    if (this.reconnectTimer !== null) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    const closed = new WharfError("closed", error.message, { cause: error, closeCode: error.closeCode });
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      clearTimeout(p.timer);
      p.done(closed);
    }
    for (const q of this.outbox) {
      clearTimeout(q.timer);
      q.reject(closed);
    }
    this.outbox = [];
    for (const w of this.waiters.splice(0)) w.reject(error);
    this.routes.clear();
    for (const s of [...this.subscriptions]) s._shutdown(error, notify);
    for (const c of [...this.consumers]) c._shutdown(error, notify);
  }

  private stopTimers(): void {
    if (this.handshakeTimer !== null) clearTimeout(this.handshakeTimer);
    if (this.heartbeatTimer !== null) clearInterval(this.heartbeatTimer);
    if (this.refreshTimer !== null) clearTimeout(this.refreshTimer);
    this.handshakeTimer = this.heartbeatTimer = this.refreshTimer = null;
  }

  private welcomed(f: Record<string, any>): void {
    if (this._state === "connected") return;
    if (this.handshakeTimer !== null) clearTimeout(this.handshakeTimer);
    this.handshakeTimer = null;
    const l = f.limits ?? {};
    this._welcome = {
      session: String(f.session ?? ""),
      clientId: String(f.client_id ?? ""),
      version: Number(f.version ?? 1),
      limits: {
        maxFrame: Number(l.max_frame ?? 0),
        maxPayload: Number(l.max_payload ?? 0),
        outboundLimit: Number(l.outbound_limit ?? 0),
        ratePerS: Number(l.rate_per_s ?? 0),
      },
    };
    this._state = "connected";
    this.attempt = 0;
    this.everConnected = true;
    this.startHeartbeat();
    this.scheduleRefresh();
    for (const s of [...this.subscriptions]) s._start();
    for (const c of [...this.consumers]) c._start();
    const queued = this.outbox;
    this.outbox = [];
    for (const q of queued) {
      clearTimeout(q.timer);
      this.sendNow(q.frame, q.answer).then(q.resolve, q.reject);
    }
    const welcome = this._welcome;
    for (const w of this.waiters.splice(0)) w.resolve(welcome);
    this.emit("connected", welcome);
  }

  private startHeartbeat(): void {
    const every = this.options.heartbeatMs ?? 15_000;
    if (!every) return;
    const gen = this.gen;
    this.heartbeatTimer = setInterval(() => {
      if (this.pinging || gen !== this.gen) return;
      this.pinging = true;
      this.sendNow({ op: "ping" }, true).then(
        () => {
          this.pinging = false;
        },
        (e: WharfError) => {
          this.pinging = false;
          if (gen === this.gen && e.code === "timeout") this.drop(4000, "heartbeat: no pong in time", e);
        },
      );
    }, every);
  }

  private scheduleRefresh(): void {
    if (this.refreshTimer !== null) clearTimeout(this.refreshTimer);
    this.refreshTimer = null;
    if (!this.options.getToken || !this.token || this._state !== "connected") return;
    const delay = refreshDelayMs(this.token, Date.now(), this.options.refreshMarginMs ?? 30_000);
    if (delay === null) return;
    const gen = this.gen;
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = null;
      if (gen !== this.gen) return;
      if (delay > MAX_TIMER_MS) return this.scheduleRefresh();
      this.refresh().catch((e: WharfError) => {
        if (gen !== this.gen) return;
        this.emit("error", new WharfError(e.code, `token refresh failed: ${e.message}`, { cause: e }));
        // Try again shortly; at expiry the broker closes the session and
        // the reconnect fetches a token anyway.
        this.refreshTimer = setTimeout(() => {
          this.refreshTimer = null;
          if (gen === this.gen) this.refresh().catch(noop);
        }, 5000);
      });
    }, Math.min(delay, MAX_TIMER_MS));
  }

  // -- frames ----------------------------------------------------------------

  private write(frame: Frame): boolean {
    const ws = this.ws;
    if (!ws) return false;
    try {
      ws.send(JSON.stringify(frame));
      return true;
    } catch (e) {
      this.drop(4000, "send failed", new WharfError("closed", `send failed: ${String(e)}`, { cause: e }));
      return false;
    }
  }

  /** A request that waits for the next session when disconnected. */
  private request(frame: Frame, answer: boolean): Promise<any> {
    if (this._state === "connected") return this.sendNow(frame, answer);
    if (this._state === "closed") return Promise.reject(new WharfError("closed", "the client was closed"));
    const max = this.options.maxQueued ?? 1000;
    if (this.outbox.length >= max) {
      return Promise.reject(new WharfError("buffer_full", `${max} requests are already waiting for the connection`));
    }
    return new Promise((resolve, reject) => {
      const q: Queued = {
        frame,
        answer,
        resolve,
        reject,
        timer: setTimeout(() => {
          const i = this.outbox.indexOf(q);
          if (i >= 0) this.outbox.splice(i, 1);
          reject(new WharfError("timeout", `not connected within ${this.timeoutMs} ms`));
        }, this.timeoutMs),
      };
      this.outbox.push(q);
    });
  }

  /** Sends on the current session; with `answer`, adds a `rid` and waits for its answer. */
  private sendNow(frame: Frame, answer: boolean): Promise<any> {
    if (this._state !== "connected") {
      return Promise.reject(new WharfError("closed", "not connected"));
    }
    if (!answer) return this.write(frame) ? Promise.resolve(undefined) : Promise.reject(new WharfError("closed", "not connected"));
    return new Promise((resolve, reject) => this.ask(frame, (e, v) => (e ? reject(e) : resolve(v))));
  }

  /** Sends `frame` with a new `rid`; `done` gets the answer (or the failure) as soon as it is known. */
  private ask(frame: Frame, done: Answer): void {
    if (this._state !== "connected") {
      done(new WharfError("closed", "not connected"));
      return;
    }
    const max = this.options.maxPending ?? 10_000;
    if (this.pending.size >= max) {
      done(new WharfError("buffer_full", `${max} requests are already awaiting answers`));
      return;
    }
    const rid = this.nextRid++;
    const timer = setTimeout(() => {
      if (this.pending.delete(rid)) {
        done(new WharfError("timeout", `no answer to ${String(frame.op)} within ${this.timeoutMs} ms`, { rid }));
      }
    }, this.timeoutMs);
    this.pending.set(rid, { done, timer });
    this.write({ ...frame, rid });
  }

  private answer(rid: unknown, value: unknown): void {
    if (typeof rid !== "number") return;
    const p = this.pending.get(rid);
    if (!p) return;
    this.pending.delete(rid);
    clearTimeout(p.timer);
    p.done(null, value);
  }

  private receive(data: unknown): void {
    if (typeof data !== "string") {
      this.emit("error", new WharfError("protocol", "the broker sent a binary frame to a wharf.json client"));
      return;
    }
    let f: any;
    try {
      f = JSON.parse(data);
    } catch {
      this.emit("error", new WharfError("protocol", `a frame that is not JSON: ${data.slice(0, 100)}`));
      return;
    }
    if (!f || typeof f !== "object" || typeof f.op !== "string") {
      this.emit("error", new WharfError("protocol", `a frame without op: ${data.slice(0, 100)}`));
      return;
    }
    switch (f.op) {
      case "welcome":
        this.welcomed(f);
        return;
      case "message": {
        const owner = this.routes.get(f.sub);
        if (owner instanceof Subscription) owner._message(new Message(f));
        return;
      }
      case "delivery": {
        const owner = this.routes.get(f.sub);
        if (owner instanceof Consumer) owner._delivery(f);
        return;
      }
      case "receipt":
      case "pong":
        this.answer(f.rid, undefined);
        return;
      case "enqueued":
      case "subscribed":
      case "draining":
      case "job_reply":
        this.answer(f.rid, f);
        return;
      case "error": {
        const err = new WharfError(String(f.code ?? "internal"), String(f.message ?? ""), {
          rid: typeof f.rid === "number" ? f.rid : undefined,
        });
        const p = typeof f.rid === "number" ? this.pending.get(f.rid) : undefined;
        if (p) {
          this.pending.delete(f.rid);
          clearTimeout(p.timer);
          p.done(err);
          return;
        }
        if (this._state !== "connected") this.handshakeError = err;
        this.emit("error", err);
        return;
      }
      case "dropped":
        this.emit("dropped", Number(f.count ?? 0));
        for (const s of [...this.subscriptions]) s._resync();
        return;
      case "ended": {
        const owner = this.routes.get(f.sub);
        owner?._ended(new WharfError(String(f.code ?? "forbidden"), String(f.message ?? "ended by the broker")));
        return;
      }
      default:
        // A frame of a later protocol revision: ignored.
        return;
    }
  }
}
