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
/**
 * An error from the broker (its `error` frame: `code` is the broker's
 * code, e.g. `invalid_filter`, `unauthorized`, `forbidden`,
 * `rate_limited`, `overloaded`) or from the client ({@link ClientErrorCode}).
 */
export class WharfError extends Error {
    /**
     * @param code - the broker's code or a {@link ClientErrorCode}
     * @param message - what happened, for people
     * @param details - the request id, close code and cause, when known
     */
    constructor(code, message, details = {}) {
        super(message);
        this.name = "WharfError";
        this.code = code;
        if (details.rid !== undefined)
            this.rid = details.rid;
        if (details.closeCode !== undefined)
            this.closeCode = details.closeCode;
        if (details.cause !== undefined)
            this.cause = details.cause;
    }
}
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_INDEX = (() => {
    const t = new Int16Array(128).fill(-1);
    for (let i = 0; i < 64; i++)
        t[B64.charCodeAt(i)] = i;
    return t;
})();
/**
 * Standard base64 (with `=` padding) of `bytes`.
 * @param bytes - the bytes to encode
 */
export function bytesToBase64(bytes) {
    const parts = [];
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
export function base64ToBytes(text) {
    let end = text.length;
    while (end > 0 && text.charCodeAt(end - 1) === 61 /* = */)
        end--;
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
        if (v < 0)
            throw new WharfError("protocol", `invalid base64: character ${JSON.stringify(text[i])}`);
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
function toBytes(p) {
    if (p instanceof Uint8Array)
        return p;
    if (ArrayBuffer.isView(p))
        return new Uint8Array(p.buffer, p.byteOffset, p.byteLength);
    if (p instanceof ArrayBuffer || Object.prototype.toString.call(p) === "[object ArrayBuffer]") {
        return new Uint8Array(p);
    }
    throw new TypeError("a payload is a string, a Uint8Array, an ArrayBuffer or an ArrayBufferView");
}
/**
 * A payload as a JSON frame carries it: a string as is, bytes as base64.
 * @param payload - text or bytes
 */
export function encodePayload(payload) {
    if (typeof payload === "string")
        return { payload };
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
export function decodePayload(payload, encoding) {
    return encoding === "base64" ? base64ToBytes(payload) : utf8Encoder.encode(payload);
}
/**
 * A received payload: as bytes ({@link Content.payload}), as text
 * ({@link Content.text}) or as JSON ({@link Content.json}). Text payloads
 * (valid UTF-8) arrive as text and are not converted unless read as bytes.
 */
export class Content {
    /** @param f - the frame's `payload` and `encoding` */
    constructor(f) {
        this.raw = typeof f.payload === "string" ? f.payload : "";
        this.base64 = f.encoding === "base64";
    }
    /** The payload's bytes. */
    get payload() {
        if (this.bytes === undefined)
            this.bytes = decodePayload(this.raw, this.base64 ? "base64" : undefined);
        return this.bytes;
    }
    /** True when the payload is not valid UTF-8 (it came base64-encoded). */
    get binary() {
        return this.base64;
    }
    /** The payload as text (UTF-8; invalid sequences become U+FFFD). */
    text() {
        return this.base64 ? utf8Decoder.decode(this.payload) : this.raw;
    }
    /**
     * The payload parsed as JSON.
     * @throws SyntaxError when it is not JSON
     */
    json() {
        return JSON.parse(this.text());
    }
}
/** A topic message, as a subscription's `message` event hands it. */
export class Message extends Content {
    /** @param f - a `message` frame */
    constructor(f) {
        super(f);
        this.topic = String(f.topic ?? "");
        this.seq = Number(f.seq ?? 0);
        this.retained = f.retained === true;
        this.headers = (f.headers && typeof f.headers === "object" ? f.headers : {});
    }
}
/** The defaults of {@link BackoffOptions}. */
export const DEFAULT_BACKOFF = Object.freeze({
    initialMs: 500,
    maxMs: 30000,
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
export function backoffDelay(attempt, options = {}, random = Math.random) {
    const initial = options.initialMs ?? DEFAULT_BACKOFF.initialMs;
    const max = options.maxMs ?? DEFAULT_BACKOFF.maxMs;
    const factor = options.factor ?? DEFAULT_BACKOFF.factor;
    const cap = Math.min(max, initial * Math.pow(factor, Math.max(0, Math.min(attempt, 64))));
    return Math.floor(random() * cap);
}
/**
 * The `exp` (and `iat`) of a JWT, read without checking its signature;
 * null when `token` is not a JWT with a numeric `exp` (a service token).
 * @param token - a token
 */
export function jwtTimes(token) {
    const parts = token.split(".");
    if (parts.length !== 3)
        return null;
    try {
        const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
        const claims = JSON.parse(utf8Decoder.decode(base64ToBytes(b64)));
        if (!claims || typeof claims.exp !== "number" || !isFinite(claims.exp))
            return null;
        const times = { exp: claims.exp };
        if (typeof claims.iat === "number" && isFinite(claims.iat))
            times.iat = claims.iat;
        return times;
    }
    catch {
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
export function refreshDelayMs(token, nowMs, marginMs = 30000) {
    const t = jwtTimes(token);
    if (!t)
        return null;
    const expMs = t.exp * 1000;
    const issuedMs = t.iat !== undefined && t.iat * 1000 <= nowMs ? t.iat * 1000 : nowMs;
    const lifetime = Math.max(0, expMs - issuedMs);
    const margin = Math.min(marginMs, Math.max(1000, lifetime / 10));
    return Math.max(0, Math.floor(expMs - margin - nowMs));
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
export class RecoveryTracker {
    /**
     * @param start - a position to resume from (null: none)
     * @param limits - `maxHeld`: messages held while waiting for
     *   `subscribed` (default 100000); `maxAhead`: out-of-order offsets
     *   remembered before a gap below them is given up (default 10000)
     */
    constructor(start, limits = {}) {
        /** Offsets above `mark` delivered out of order. */
        this.ahead = new Set();
        /** Messages held until `subscribed` (null when not waiting for it). */
        this.held = null;
        /** Duplicates dropped so far. */
        this.duplicates = 0;
        this.epoch = start?.epoch ?? "";
        this.mark = start?.offset ?? 0;
        this.maxHeld = limits.maxHeld ?? 100000;
        this.maxAhead = limits.maxAhead ?? 10000;
    }
    /** The position to resume from. */
    get position() {
        return { epoch: this.epoch, offset: this.mark };
    }
    /** True between {@link RecoveryTracker.begin} and {@link RecoveryTracker.settle}. */
    get awaiting() {
        return this.held !== null;
    }
    /** Starts a (re)subscribe: returns the `recover` field to send. */
    begin() {
        this.held = [];
        return this.position;
    }
    /** Abandons a (re)subscribe whose answer will not come (connection lost). */
    abort() {
        this.held = null;
    }
    /**
     * Takes a message: returns those to deliver now (none while waiting for
     * `subscribed`), or false if the hold overflowed (the held messages are
     * dropped: subscribe again from {@link RecoveryTracker.position}).
     * @param m - a message of the subscription
     */
    offer(m) {
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
    settle(f) {
        const held = this.held ?? [];
        this.held = null;
        if (!f.recovered) {
            this.epoch = f.epoch;
            this.mark = f.offset;
            this.ahead.clear();
        }
        const out = [];
        for (const m of held)
            if (m.retained || this.accept(m.seq))
                out.push(m);
        return out;
    }
    /** Records offset `seq`; false when it was delivered already. */
    accept(seq) {
        if (seq <= this.mark || this.ahead.has(seq)) {
            this.duplicates++;
            return false;
        }
        if (seq === this.mark + 1) {
            this.mark = seq;
            this.absorb();
        }
        else {
            this.ahead.add(seq);
            if (this.ahead.size > this.maxAhead) {
                // The offsets below the lowest one ahead are not coming (dropped by
                // the broker's slow-consumer policy): give them up.
                let low = Infinity;
                for (const s of this.ahead)
                    if (s < low)
                        low = s;
                this.ahead.delete(low);
                this.mark = low;
                this.absorb();
            }
        }
        return true;
    }
    absorb() {
        while (this.ahead.delete(this.mark + 1))
            this.mark++;
    }
}
/** A minimal typed event emitter. */
export class Emitter {
    constructor() {
        this.listeners = {};
    }
    /**
     * Calls `fn` on each `event`.
     * @returns a function that removes the listener
     */
    on(event, fn) {
        var _a;
        ((_a = this.listeners)[event] ?? (_a[event] = new Set())).add(fn);
        return () => this.off(event, fn);
    }
    /** Removes a listener added with {@link Emitter.on}. */
    off(event, fn) {
        this.listeners[event]?.delete(fn);
    }
    /** Calls the listeners of `event`; a listener that throws is reported to {@link Emitter.listenerFailed}. */
    emit(event, ...args) {
        const set = this.listeners[event];
        if (!set)
            return;
        for (const fn of [...set]) {
            try {
                fn(...args);
            }
            catch (e) {
                this.listenerFailed(String(event), e);
            }
        }
    }
    /** Called when a listener throws; by default does nothing. */
    listenerFailed(_event, _error) { }
}
const noop = () => { };
/**
 * Ends a subscription or consumer `wire` on the broker: resolves once it
 * confirmed, at once while disconnected (the broker ended it with the
 * session), and when it no longer knew it.
 */
function endOnBroker(link, wire) {
    if (wire === null || !link.connected())
        return Promise.resolve();
    return link.ask({ op: "unsubscribe", id: wire }).then(() => undefined, (e) => {
        if (e.code === "closed" || e.code === "unknown_subscription")
            return;
        throw e;
    });
}
function handlerError(what, e) {
    return new WharfError("handler", `${what} threw: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
}
function deferred() {
    let resolve;
    let reject;
    const promise = new Promise((res, rej) => {
        resolve = res;
        reject = rej;
    });
    // Awaiting is optional: an unobserved rejection must not crash Node.
    promise.catch(noop);
    return { promise, resolve, reject };
}
/** Returns `p`, marked handled: leaving its rejection unobserved is allowed. */
function quiet(p) {
    p.catch(noop);
    return p;
}
/** Whether `filter` has wildcards (`+`, `#`). */
function isWildcard(filter) {
    return filter.split("/").some((l) => l === "+" || l === "#");
}
/**
 * A topic subscription (from {@link WharfClient.subscribe}). It lives
 * across reconnects until {@link Subscription.unsubscribe}, the broker
 * ends it, or the client closes.
 */
export class Subscription extends Emitter {
    /** Made by {@link WharfClient.subscribe}, not by applications. */
    constructor(link, topic, options) {
        super();
        this.started = deferred();
        this.wire = null;
        this.live = true;
        this.subscribedOnce = false;
        this.retryTimer = null;
        this.overflowed = false;
        this.link = link;
        this.topic = topic;
        const recover = options.recover ?? !isWildcard(topic);
        this.recovering = recover !== false;
        const start = typeof recover === "object" && recover !== null ? recover : null;
        this.givenPosition = start !== null && start.epoch !== "";
        this.tracker = this.recovering ? new RecoveryTracker(start, { maxHeld: options.maxHeld }) : null;
        this.ready = this.started.promise;
        if (options.onMessage)
            this.on("message", options.onMessage);
        if (options.onRecovery)
            this.on("recovery", options.onRecovery);
        if (options.onEnded)
            this.on("ended", options.onEnded);
    }
    /**
     * Where the subscription stands: the topic's epoch and the offset of
     * the last message received (null before the topic's epoch is known,
     * and for subscriptions without recovery). Pass it as `recover` to a
     * later subscription (e.g. after a page reload) to resume from here.
     */
    get position() {
        if (!this.tracker || this.tracker.epoch === "")
            return null;
        return this.tracker.position;
    }
    /** False once unsubscribed or ended. */
    get active() {
        return this.live;
    }
    /** Duplicates dropped so far (a safety net; normally 0). */
    get duplicates() {
        return this.tracker?.duplicates ?? 0;
    }
    /**
     * Ends the subscription. Resolves once the broker confirmed (at once
     * while disconnected).
     */
    unsubscribe() {
        if (!this.live)
            return Promise.resolve();
        const wire = this.wire;
        this.stop(new WharfError("closed", "unsubscribed"));
        return endOnBroker(this.link, wire);
    }
    listenerFailed(event, error) {
        this.link.report(handlerError(`a subscription's ${event} listener`, error));
    }
    /** @internal Sends the subscribe (a session is up). */
    _start() {
        if (!this.live)
            return;
        if (this.retryTimer !== null) {
            clearTimeout(this.retryTimer);
            this.retryTimer = null;
        }
        const wire = this.link.newId("s");
        this.wire = wire;
        this.link.route(wire, this);
        const frame = { op: "subscribe", id: wire, filter: this.topic };
        const resumed = this.subscribedOnce || this.givenPosition || this.overflowed;
        this.overflowed = false;
        if (this.tracker)
            frame.recover = this.tracker.begin();
        // The answer is handled as soon as it is read: the messages after it
        // must find the tracker settled.
        this.link.askNow(frame, (e, answer) => {
            if (this.wire !== wire)
                return;
            if (e)
                this.refused(wire, e);
            else
                this.subscribed(answer, resumed);
        });
    }
    /** @internal The connection ended: the next session subscribes again. */
    _disconnected() {
        this.wire = null;
        this.tracker?.abort();
        if (this.retryTimer !== null) {
            clearTimeout(this.retryTimer);
            this.retryTimer = null;
        }
    }
    /** @internal A `message` frame for this subscription. */
    _message(m) {
        if (!this.live)
            return;
        if (!this.tracker) {
            this.emit("message", m);
            return;
        }
        const out = this.tracker.offer(m);
        if (out === false) {
            this.link.report(new WharfError("buffer_full", `subscription to ${this.topic}: too many messages before the broker's answer; subscribing again`));
            // What was held is gone: the next answer must say whether it came back.
            this.overflowed = true;
            this.restart();
            return;
        }
        for (const x of out)
            this.emit("message", x);
    }
    /**
     * @internal Subscribes again from the current position (after the
     * broker dropped messages for this session), if it recovers.
     */
    _resync() {
        if (!this.live || !this.tracker || this.wire === null || !this.link.connected())
            return;
        // One attempt at a time; and without history there is nothing to get back.
        if (this.tracker.awaiting || this.tracker.epoch === "")
            return;
        this.restart();
    }
    /** Ends the current subscribe on the broker and subscribes again from the position. */
    restart() {
        if (this.wire === null || !this.link.connected())
            return;
        this.link.tell({ op: "unsubscribe", id: this.wire });
        this.link.unroute(this.wire);
        this._start();
    }
    /** @internal The broker ended it (`ended`). */
    _ended(error) {
        if (!this.live)
            return;
        this.stop(error);
        this.emit("ended", error);
    }
    /** @internal The client stopped for good. */
    _shutdown(error, notify) {
        if (!this.live)
            return;
        this.stop(error);
        if (notify)
            this.emit("ended", error);
    }
    stop(error) {
        this.live = false;
        if (this.wire !== null)
            this.link.unroute(this.wire);
        this.wire = null;
        this.tracker?.abort();
        if (this.retryTimer !== null)
            clearTimeout(this.retryTimer);
        this.retryTimer = null;
        this.link.forget(this);
        this.started.reject(error);
    }
    subscribed(answer, resumed) {
        let info;
        let release = [];
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
            if (typeof answer.reason === "string")
                info.reason = answer.reason;
        }
        else {
            info = { recovered: false, resumed, gap: resumed, epoch: "", offset: 0, replayed: 0 };
            if (resumed)
                info.reason = "subscribed without recovery: messages published while disconnected are not replayed";
        }
        this.subscribedOnce = true;
        this.started.resolve(info);
        this.emit("recovery", info);
        for (const m of release) {
            if (!this.live)
                return;
            this.emit("message", m);
        }
    }
    refused(wire, e) {
        if (e.code === "closed")
            return; // the next session subscribes again
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
                if (this.live && this.wire === wire && this.link.connected())
                    this._start();
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
    /** Made by its {@link Consumer}, not by applications. */
    constructor(consumer, wire, f) {
        super(f);
        this.done = false;
        this.consumer = consumer;
        this.wire = wire;
        this.queue = String(f.queue ?? "");
        this.id = Number(f.id ?? 0);
        this.seq = Number(f.seq ?? 0);
        this.count = Number(f.count ?? 1);
        this.priority = Number(f.priority ?? 0);
        this.headers = (f.headers && typeof f.headers === "object" ? f.headers : {});
    }
    /** Whether `ack`, `nack` or `reject` was called. */
    get settled() {
        return this.done;
    }
    /** The message is done: the queue deletes it. Resolves once that is durable. */
    ack() {
        return this.settle("ack", {});
    }
    /**
     * Gives the message back, to be delivered again after `delayMs` (absent:
     * the queue's backoff schedule; 0: at once).
     */
    nack(options = {}) {
        return this.settle("nack", options.delayMs === undefined ? {} : { delay_ms: options.delayMs });
    }
    /** Sends the message to the queue's dead-letter queue at once. */
    reject() {
        return this.settle("reject", {});
    }
    /** Still working on it: the ack deadline becomes `extendMs` from now (absent: the queue's ack timeout). */
    touch(extendMs) {
        if (this.done)
            return quiet(Promise.reject(new WharfError("stale_delivery", `delivery ${this.id} was already settled`)));
        return quiet(this.consumer._settle(this.wire, "touch", this.id, extendMs === undefined ? {} : { extend_ms: extendMs }));
    }
    settle(op, extra) {
        if (this.done)
            return quiet(Promise.reject(new WharfError("stale_delivery", `delivery ${this.id} was already settled`)));
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
export class Consumer extends Emitter {
    /** Made by {@link WharfClient.consume}, not by applications. */
    constructor(link, queue, options, handler) {
        super();
        this.started = deferred();
        this.wire = null;
        this.live = true;
        this.retryTimer = null;
        this.link = link;
        this.queue = queue;
        this.prefetch = options.prefetch ?? 10;
        this.handler = handler;
        this.ready = this.started.promise;
    }
    /** False once cancelled or ended. */
    get active() {
        return this.live;
    }
    /** Stops consuming; unacknowledged deliveries go back to the queue. */
    cancel() {
        if (!this.live)
            return Promise.resolve();
        const wire = this.wire;
        this.stop(new WharfError("closed", "cancelled"));
        return endOnBroker(this.link, wire);
    }
    listenerFailed(event, error) {
        this.link.report(handlerError(`a consumer's ${event} listener`, error));
    }
    /** @internal Sends the consume (a session is up). */
    _start() {
        if (!this.live)
            return;
        const wire = this.link.newId("c");
        this.wire = wire;
        this.link.route(wire, this);
        this.link.askNow({ op: "consume", id: wire, queue: this.queue, prefetch: this.prefetch }, (e) => {
            if (this.wire !== wire)
                return;
            if (!e) {
                this.started.resolve();
            }
            else {
                if (e.code === "closed")
                    return;
                if (e.code === "timeout")
                    return this.link.unhealthy(`consume ${this.queue}`, e);
                if (e.code === "overloaded") {
                    this.link.unroute(wire);
                    this.retryTimer = setTimeout(() => {
                        this.retryTimer = null;
                        if (this.live && this.wire === wire && this.link.connected())
                            this._start();
                    }, 1000);
                    return;
                }
                this._ended(e);
            }
        });
    }
    /** @internal The connection ended. */
    _disconnected() {
        this.wire = null;
        if (this.retryTimer !== null)
            clearTimeout(this.retryTimer);
        this.retryTimer = null;
    }
    /** @internal A `delivery` frame for this consumer. */
    _delivery(f) {
        if (!this.live || this.wire === null)
            return;
        const d = new Delivery(this, this.wire, f);
        const failed = (e) => {
            this.link.report(handlerError(`the delivery handler of ${this.queue}`, e));
            if (!d.settled)
                d.nack().catch(noop);
        };
        try {
            const r = this.handler(d);
            if (r && typeof r.then === "function")
                r.then(undefined, failed);
        }
        catch (e) {
            failed(e);
        }
    }
    /** @internal Settles delivery `id`, received under wire id `wire`. */
    _settle(wire, op, id, extra) {
        if (wire !== this.wire || !this.live || !this.link.connected()) {
            return Promise.reject(new WharfError("stale_delivery", `delivery ${id} came over an earlier connection (or its consumer ended): the broker gave it back to ${this.queue}`));
        }
        return this.link.ask({ op, sub: wire, ids: [id], ...extra }).then(() => undefined);
    }
    /** @internal The broker ended it. */
    _ended(error) {
        if (!this.live)
            return;
        this.stop(error);
        this.emit("ended", error);
    }
    /** @internal The client stopped for good. */
    _shutdown(error, notify) {
        if (!this.live)
            return;
        this.stop(error);
        if (notify)
            this.emit("ended", error);
    }
    stop(error) {
        this.live = false;
        if (this.wire !== null)
            this.link.unroute(this.wire);
        this.wire = null;
        if (this.retryTimer !== null)
            clearTimeout(this.retryTimer);
        this.retryTimer = null;
        this.link.forget(this);
        this.started.reject(error);
    }
}
/** The longest delay `setTimeout` takes. */
const MAX_TIMER_MS = 2147483647;
function detach(ws) {
    ws.onopen = noop;
    ws.onmessage = noop;
    ws.onclose = noop;
    // `ws` throws an 'error' event nobody listens to: keep a listener.
    ws.onerror = noop;
}
/** `http(s)://` becomes `ws(s)://`, and an empty path `/ws`. */
function normalizeUrl(url) {
    const base = globalThis.location?.href;
    const u = base ? new URL(url, base) : new URL(url);
    if (u.protocol === "http:")
        u.protocol = "ws:";
    else if (u.protocol === "https:")
        u.protocol = "wss:";
    if (u.pathname === "" || u.pathname === "/")
        u.pathname = "/ws";
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
export class WharfClient extends Emitter {
    /**
     * @param url - `ws://HOST:PORT/ws` (`http://HOST:PORT` works too)
     * @param options - see {@link WharfClientOptions}
     * @throws TypeError when there is no WebSocket to use
     */
    constructor(url, options = {}) {
        super();
        this.ws = null;
        /** Bumped at each socket's start and end: stale callbacks compare it. */
        this.gen = 0;
        this._state = "idle";
        this._welcome = null;
        this.attempt = 0;
        this.everConnected = false;
        this.nextRid = 1;
        this.nextId = 1;
        this.pending = new Map();
        this.outbox = [];
        this.routes = new Map();
        this.subscriptions = new Set();
        this.consumers = new Set();
        this.waiters = [];
        this.handshakeError = null;
        this.socketError = "";
        this.handshakeTimer = null;
        this.reconnectTimer = null;
        this.heartbeatTimer = null;
        this.refreshTimer = null;
        this.pinging = false;
        this.url = normalizeUrl(url);
        this.options = { ...options };
        const WS = options.WebSocket ?? globalThis.WebSocket;
        if (!WS) {
            throw new TypeError("no WebSocket: pass the `WebSocket` option (e.g. the `ws` package's) on Node before 22");
        }
        this.WS = WS;
        this.timeoutMs = options.requestTimeoutMs ?? 10000;
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
                if (owner instanceof Subscription)
                    this.subscriptions.delete(owner);
                else
                    this.consumers.delete(owner);
            },
            report: (e) => this.emit("error", e),
            unhealthy: (why, e) => this.drop(4000, `${why}: ${e.message}`.slice(0, 120), e),
        };
    }
    /** The connection's state. */
    get state() {
        return this._state;
    }
    /** The current session's `welcome` (null while disconnected). */
    get welcome() {
        return this._state === "connected" ? this._welcome : null;
    }
    /**
     * Connects, and keeps reconnecting after losses until {@link WharfClient.close}.
     * Resolves at the first `welcome`. Rejects when the broker refuses the
     * credentials (`unauthorized`, `forbidden`: the client then stops) or
     * the client is closed; network failures are retried with backoff
     * meanwhile (race it with a timer for a deadline).
     */
    connect() {
        if (this._state === "closed")
            return Promise.reject(new WharfError("closed", "the client was closed"));
        if (this._state === "connected" && this._welcome)
            return Promise.resolve(this._welcome);
        const p = new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
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
    close() {
        if (this._state === "closed")
            return Promise.resolve();
        const ws = this.ws;
        const wasConnected = this._state === "connected";
        this.shutdown(new WharfError("closed", "the client was closed"), false);
        if (ws)
            this.emit("disconnected", { code: 1000, reason: "client closed", willReconnect: false });
        if (!ws)
            return Promise.resolve();
        return new Promise((resolve) => {
            const done = () => {
                clearTimeout(t);
                detach(ws);
                resolve();
            };
            const t = setTimeout(done, 1000);
            ws.onclose = done;
            try {
                if (wasConnected)
                    ws.send(JSON.stringify({ op: "close" }));
                ws.close(1000, "client closed");
            }
            catch {
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
    subscribe(topic, options = {}) {
        if (typeof topic !== "string" || topic === "")
            throw new TypeError("subscribe: the topic must be a non-empty string");
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
        if (this._state === "connected")
            sub._start();
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
    consume(queue, options, handler) {
        if (typeof queue !== "string" || queue === "")
            throw new TypeError("consume: the queue must be a non-empty string");
        if (typeof handler !== "function")
            throw new TypeError("consume: a handler is required");
        const c = new Consumer(this.link, queue, options ?? {}, handler);
        if (this._state === "closed") {
            c._shutdown(new WharfError("closed", "the client was closed"), false);
            return c;
        }
        this.consumers.add(c);
        if (this._state === "connected")
            c._start();
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
    publish(topic, payload, options = {}) {
        const frame = { op: "publish", topic, ...encodePayload(payload) };
        if (options.headers)
            frame.headers = options.headers;
        if (options.retain)
            frame.retain = true;
        if (options.priority && options.priority !== "normal")
            frame.priority = options.priority;
        return this.request(frame, options.confirm !== false).then(() => undefined);
    }
    /**
     * Puts a message on a queue. Resolves with its `seq` once it is durable.
     * @param queue - the queue (created if missing)
     * @param payload - text or bytes
     * @param options - headers, priority (0-9), ttlMs
     */
    enqueue(queue, payload, options = {}) {
        const frame = { op: "enqueue", queue, ...encodePayload(payload) };
        if (options.headers)
            frame.headers = options.headers;
        if (options.priority)
            frame.priority = options.priority;
        if (options.ttlMs)
            frame.ttl_ms = options.ttlMs;
        return this.request(frame, true).then((a) => ({ queue: String(a?.queue ?? queue), seq: Number(a?.seq ?? 0) }));
    }
    /** Pings the broker; resolves with the round trip in ms. */
    ping() {
        const t0 = Date.now();
        return this.sendNow({ op: "ping" }, true).then(() => Date.now() - t0);
    }
    /**
     * Presents a fresh token for the session (`refresh`): `token`, or one
     * from `getToken`. Later reconnects use it too. Usually automatic: a
     * JWT with `exp` is refreshed before it expires when `getToken` is set.
     * @param token - the new token (default: from `getToken`)
     */
    async refresh(token) {
        let t = token;
        if (t === undefined && this.options.getToken)
            t = await this.fetchToken();
        if (!t)
            throw new WharfError("token", "refresh: no token given and no getToken option");
        await this.sendNow({ op: "refresh", token: t }, true);
        this.token = t;
        if (!this.options.getToken)
            this.options.token = t;
        this.scheduleRefresh();
    }
    listenerFailed(event, error) {
        if (event !== "error")
            this.emit("error", handlerError(`a client ${event} listener`, error));
    }
    // -- connection ------------------------------------------------------------
    async fetchToken() {
        const getToken = this.options.getToken;
        let timer;
        try {
            const t = await Promise.race([
                Promise.resolve().then(() => getToken()),
                new Promise((_, reject) => {
                    timer = setTimeout(() => reject(new WharfError("timeout", "getToken did not answer in time")), this.connectTimeoutMs());
                }),
            ]);
            if (typeof t !== "string" || t === "")
                throw new WharfError("token", "getToken gave no token");
            return t;
        }
        catch (e) {
            if (e instanceof WharfError)
                throw e;
            throw new WharfError("token", `getToken failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
        }
        finally {
            clearTimeout(timer);
        }
    }
    connectTimeoutMs() {
        return this.options.connectTimeoutMs ?? 10000;
    }
    async open() {
        const gen = ++this.gen;
        this.handshakeError = null;
        this.socketError = "";
        if (this.options.getToken) {
            try {
                const t = await this.fetchToken();
                if (gen !== this.gen)
                    return;
                this.token = t;
            }
            catch (e) {
                if (gen !== this.gen)
                    return;
                this.lost(gen, 1006, "no token", e);
                return;
            }
        }
        else {
            this.token = this.options.token;
        }
        let ws;
        try {
            ws = new this.WS(this.url, "wharf.json");
        }
        catch (e) {
            this.lost(gen, 1006, "WebSocket failed", new WharfError("closed", `new WebSocket failed: ${String(e)}`, { cause: e }));
            return;
        }
        this.ws = ws;
        this.handshakeTimer = setTimeout(() => {
            if (gen === this.gen)
                this.drop(4000, "no welcome in time", new WharfError("timeout", `no welcome within ${this.connectTimeoutMs()} ms`));
        }, this.connectTimeoutMs());
        ws.onopen = () => {
            if (gen !== this.gen)
                return;
            const hello = { op: "hello" };
            if (this.options.clientId)
                hello.client_id = this.options.clientId;
            if (this.token)
                hello.token = this.token;
            this.write(hello);
        };
        ws.onmessage = (ev) => {
            if (gen === this.gen)
                this.receive(ev.data);
        };
        ws.onerror = (ev) => {
            if (gen === this.gen)
                this.socketError = String(ev?.message ?? ev?.error?.message ?? "");
        };
        ws.onclose = (ev) => {
            if (gen === this.gen)
                this.lost(gen, Number(ev?.code ?? 1006), String(ev?.reason ?? ""));
        };
    }
    /** Closes the socket from this side and handles the loss at once. */
    drop(code, reason, error) {
        const ws = this.ws;
        if (!ws)
            return;
        detach(ws);
        try {
            ws.close(code, reason);
        }
        catch {
            // Closing a socket that is not open: nothing to do.
        }
        this.lost(this.gen, code, reason, error);
    }
    lost(gen, code, reason, error) {
        if (gen !== this.gen || this._state === "closed")
            return;
        if (this.ws)
            detach(this.ws);
        this.ws = null;
        this.gen++;
        this.stopTimers();
        const why = reason || this.socketError;
        const err = error ??
            this.handshakeError ??
            new WharfError("closed", `the connection closed (${code}${why ? `: ${why}` : ""})`, { closeCode: code });
        const pending = [...this.pending.values()];
        this.pending.clear();
        for (const p of pending) {
            clearTimeout(p.timer);
            p.done(new WharfError("closed", "the connection closed before the answer came: the request may or may not have been carried out", {
                closeCode: code,
                cause: err,
            }));
        }
        this.pinging = false;
        this.routes.clear();
        for (const s of this.subscriptions)
            s._disconnected();
        for (const c of this.consumers)
            c._disconnected();
        const authFailed = err.code === "unauthorized" || err.code === "forbidden" || code === 4401;
        const fatal = this.options.reconnect === false ||
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
            if (this._state === "reconnecting")
                void this.open();
        }, delayMs);
        this.emit("disconnected", { code, reason: why, error: err, willReconnect: true, delayMs });
    }
    /** Stops for good: everything waiting fails with `error`. */
    shutdown(error, notify) {
        this._state = "closed";
        this.gen++;
        if (this.ws)
            detach(this.ws);
        this.ws = null;
        this.stopTimers();
        if (this.reconnectTimer !== null)
            clearTimeout(this.reconnectTimer);
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
        for (const w of this.waiters.splice(0))
            w.reject(error);
        this.routes.clear();
        for (const s of [...this.subscriptions])
            s._shutdown(error, notify);
        for (const c of [...this.consumers])
            c._shutdown(error, notify);
    }
    stopTimers() {
        if (this.handshakeTimer !== null)
            clearTimeout(this.handshakeTimer);
        if (this.heartbeatTimer !== null)
            clearInterval(this.heartbeatTimer);
        if (this.refreshTimer !== null)
            clearTimeout(this.refreshTimer);
        this.handshakeTimer = this.heartbeatTimer = this.refreshTimer = null;
    }
    welcomed(f) {
        if (this._state === "connected")
            return;
        if (this.handshakeTimer !== null)
            clearTimeout(this.handshakeTimer);
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
        for (const s of [...this.subscriptions])
            s._start();
        for (const c of [...this.consumers])
            c._start();
        const queued = this.outbox;
        this.outbox = [];
        for (const q of queued) {
            clearTimeout(q.timer);
            this.sendNow(q.frame, q.answer).then(q.resolve, q.reject);
        }
        const welcome = this._welcome;
        for (const w of this.waiters.splice(0))
            w.resolve(welcome);
        this.emit("connected", welcome);
    }
    startHeartbeat() {
        const every = this.options.heartbeatMs ?? 15000;
        if (!every)
            return;
        const gen = this.gen;
        this.heartbeatTimer = setInterval(() => {
            if (this.pinging || gen !== this.gen)
                return;
            this.pinging = true;
            this.sendNow({ op: "ping" }, true).then(() => {
                this.pinging = false;
            }, (e) => {
                this.pinging = false;
                if (gen === this.gen && e.code === "timeout")
                    this.drop(4000, "heartbeat: no pong in time", e);
            });
        }, every);
    }
    scheduleRefresh() {
        if (this.refreshTimer !== null)
            clearTimeout(this.refreshTimer);
        this.refreshTimer = null;
        if (!this.options.getToken || !this.token || this._state !== "connected")
            return;
        const delay = refreshDelayMs(this.token, Date.now(), this.options.refreshMarginMs ?? 30000);
        if (delay === null)
            return;
        const gen = this.gen;
        this.refreshTimer = setTimeout(() => {
            this.refreshTimer = null;
            if (gen !== this.gen)
                return;
            if (delay > MAX_TIMER_MS)
                return this.scheduleRefresh();
            this.refresh().catch((e) => {
                if (gen !== this.gen)
                    return;
                this.emit("error", new WharfError(e.code, `token refresh failed: ${e.message}`, { cause: e }));
                // Try again shortly; at expiry the broker closes the session and
                // the reconnect fetches a token anyway.
                this.refreshTimer = setTimeout(() => {
                    this.refreshTimer = null;
                    if (gen === this.gen)
                        this.refresh().catch(noop);
                }, 5000);
            });
        }, Math.min(delay, MAX_TIMER_MS));
    }
    // -- frames ----------------------------------------------------------------
    write(frame) {
        const ws = this.ws;
        if (!ws)
            return false;
        try {
            ws.send(JSON.stringify(frame));
            return true;
        }
        catch (e) {
            this.drop(4000, "send failed", new WharfError("closed", `send failed: ${String(e)}`, { cause: e }));
            return false;
        }
    }
    /** A request that waits for the next session when disconnected. */
    request(frame, answer) {
        if (this._state === "connected")
            return this.sendNow(frame, answer);
        if (this._state === "closed")
            return Promise.reject(new WharfError("closed", "the client was closed"));
        const max = this.options.maxQueued ?? 1000;
        if (this.outbox.length >= max) {
            return Promise.reject(new WharfError("buffer_full", `${max} requests are already waiting for the connection`));
        }
        return new Promise((resolve, reject) => {
            const q = {
                frame,
                answer,
                resolve,
                reject,
                timer: setTimeout(() => {
                    const i = this.outbox.indexOf(q);
                    if (i >= 0)
                        this.outbox.splice(i, 1);
                    reject(new WharfError("timeout", `not connected within ${this.timeoutMs} ms`));
                }, this.timeoutMs),
            };
            this.outbox.push(q);
        });
    }
    /** Sends on the current session; with `answer`, adds a `rid` and waits for its answer. */
    sendNow(frame, answer) {
        if (this._state !== "connected") {
            return Promise.reject(new WharfError("closed", "not connected"));
        }
        if (!answer)
            return this.write(frame) ? Promise.resolve(undefined) : Promise.reject(new WharfError("closed", "not connected"));
        return new Promise((resolve, reject) => this.ask(frame, (e, v) => (e ? reject(e) : resolve(v))));
    }
    /** Sends `frame` with a new `rid`; `done` gets the answer (or the failure) as soon as it is known. */
    ask(frame, done) {
        if (this._state !== "connected") {
            done(new WharfError("closed", "not connected"));
            return;
        }
        const max = this.options.maxPending ?? 10000;
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
    answer(rid, value) {
        if (typeof rid !== "number")
            return;
        const p = this.pending.get(rid);
        if (!p)
            return;
        this.pending.delete(rid);
        clearTimeout(p.timer);
        p.done(null, value);
    }
    receive(data) {
        if (typeof data !== "string") {
            this.emit("error", new WharfError("protocol", "the broker sent a binary frame to a wharf.json client"));
            return;
        }
        let f;
        try {
            f = JSON.parse(data);
        }
        catch {
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
                if (owner instanceof Subscription)
                    owner._message(new Message(f));
                return;
            }
            case "delivery": {
                const owner = this.routes.get(f.sub);
                if (owner instanceof Consumer)
                    owner._delivery(f);
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
                if (this._state !== "connected")
                    this.handshakeError = err;
                this.emit("error", err);
                return;
            }
            case "dropped":
                this.emit("dropped", Number(f.count ?? 0));
                for (const s of [...this.subscriptions])
                    s._resync();
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
