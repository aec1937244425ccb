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
export declare const VERSION = "0.1.0";
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
export type ClientErrorCode = "timeout" | "closed" | "buffer_full" | "stale_delivery" | "protocol" | "handler" | "token";
/**
 * An error from the broker (its `error` frame: `code` is the broker's
 * code, e.g. `invalid_filter`, `unauthorized`, `forbidden`,
 * `rate_limited`, `overloaded`) or from the client ({@link ClientErrorCode}).
 */
export declare class WharfError extends Error {
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
    constructor(code: string, message: string, details?: {
        rid?: number;
        closeCode?: number;
        cause?: unknown;
    });
}
/** What can be sent as a payload: text (sent as is) or bytes (sent as base64). */
export type Payload = string | Uint8Array | ArrayBuffer | ArrayBufferView;
/** A payload as a JSON frame carries it. */
export interface EncodedPayload {
    /** The text itself, or the bytes' standard base64. */
    payload: string;
    /** `"base64"` when `payload` is base64. */
    encoding?: "base64";
}
/**
 * Standard base64 (with `=` padding) of `bytes`.
 * @param bytes - the bytes to encode
 */
export declare function bytesToBase64(bytes: Uint8Array): string;
/**
 * The bytes of a standard base64 string (padding optional).
 * @param text - base64 text
 * @throws {@link WharfError} `protocol` when `text` is not base64
 */
export declare function base64ToBytes(text: string): Uint8Array;
/**
 * A payload as a JSON frame carries it: a string as is, bytes as base64.
 * @param payload - text or bytes
 */
export declare function encodePayload(payload: Payload): EncodedPayload;
/**
 * The bytes of a frame's `payload` given its `encoding` (absent or
 * `"utf8"`: the text's UTF-8; `"base64"`: decoded).
 * @param payload - the frame's `payload`
 * @param encoding - the frame's `encoding`
 */
export declare function decodePayload(payload: string, encoding?: string): Uint8Array;
/**
 * A received payload: as bytes ({@link Content.payload}), as text
 * ({@link Content.text}) or as JSON ({@link Content.json}). Text payloads
 * (valid UTF-8) arrive as text and are not converted unless read as bytes.
 */
export declare class Content {
    /** The payload as the frame carried it. */
    private readonly raw;
    /** Whether `raw` is base64. */
    private readonly base64;
    private bytes;
    /** @param f - the frame's `payload` and `encoding` */
    constructor(f: {
        payload?: unknown;
        encoding?: unknown;
    });
    /** The payload's bytes. */
    get payload(): Uint8Array;
    /** True when the payload is not valid UTF-8 (it came base64-encoded). */
    get binary(): boolean;
    /** The payload as text (UTF-8; invalid sequences become U+FFFD). */
    text(): string;
    /**
     * The payload parsed as JSON.
     * @throws SyntaxError when it is not JSON
     */
    json<T = unknown>(): T;
}
/** A topic message, as a subscription's `message` event hands it. */
export declare class Message extends Content {
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
    constructor(f: Record<string, any>);
}
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
export declare const DEFAULT_BACKOFF: Readonly<Required<BackoffOptions>>;
/**
 * The delay before reconnect attempt `attempt` (0 for the first after a
 * loss): a uniformly random time between 0 and
 * `min(maxMs, initialMs * factor ** attempt)` ("full jitter"), so that
 * clients that lost the same broker do not all come back at once.
 * @param attempt - failed attempts since the last welcome
 * @param options - the schedule
 * @param random - a source of numbers in [0, 1)
 */
export declare function backoffDelay(attempt: number, options?: BackoffOptions, random?: () => number): number;
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
export declare function jwtTimes(token: string): JwtTimes | null;
/**
 * How long from `nowMs` until a session holding `token` should present a
 * fresh one: `margin` before its `exp`, where `margin` is 10% of the
 * token's lifetime, at least 1 s and at most `marginMs`; 0 when that
 * moment has passed; null for a token without `exp`.
 * @param token - the session's token
 * @param nowMs - the time now (ms since the Unix epoch)
 * @param marginMs - the largest margin (default 30 s)
 */
export declare function refreshDelayMs(token: string, nowMs: number, marginMs?: number): number | null;
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
export declare class RecoveryTracker<T extends Positioned> {
    /** The topic's epoch as last learnt ("" before the first answer, or without history). */
    epoch: string;
    /** Every offset up to here was delivered (or skipped knowingly). */
    private mark;
    /** Offsets above `mark` delivered out of order. */
    private readonly ahead;
    /** Messages held until `subscribed` (null when not waiting for it). */
    private held;
    private readonly maxHeld;
    private readonly maxAhead;
    /** Duplicates dropped so far. */
    duplicates: number;
    /**
     * @param start - a position to resume from (null: none)
     * @param limits - `maxHeld`: messages held while waiting for
     *   `subscribed` (default 100000); `maxAhead`: out-of-order offsets
     *   remembered before a gap below them is given up (default 10000)
     */
    constructor(start?: Position | null, limits?: {
        maxHeld?: number;
        maxAhead?: number;
    });
    /** The position to resume from. */
    get position(): Position;
    /** True between {@link RecoveryTracker.begin} and {@link RecoveryTracker.settle}. */
    get awaiting(): boolean;
    /** Starts a (re)subscribe: returns the `recover` field to send. */
    begin(): Position;
    /** Abandons a (re)subscribe whose answer will not come (connection lost). */
    abort(): void;
    /**
     * Takes a message: returns those to deliver now (none while waiting for
     * `subscribed`), or false if the hold overflowed (the held messages are
     * dropped: subscribe again from {@link RecoveryTracker.position}).
     * @param m - a message of the subscription
     */
    offer(m: T): T[] | false;
    /**
     * Takes the broker's `subscribed` answer: when nothing was recovered,
     * the position becomes the topic's latest offset under its (maybe new)
     * epoch, as no older message will come. Returns the held messages to
     * deliver now, duplicates dropped.
     * @param f - the `subscribed` frame
     */
    settle(f: SubscribedFrame): T[];
    /** Records offset `seq`; false when it was delivered already. */
    private accept;
    private absorb;
}
type Listener<A extends unknown[]> = (...args: A) => void;
/** A minimal typed event emitter. */
export declare class Emitter<E extends {
    [K in keyof E]: unknown[];
}> {
    private readonly listeners;
    /**
     * Calls `fn` on each `event`.
     * @returns a function that removes the listener
     */
    on<K extends keyof E>(event: K, fn: Listener<E[K]>): () => void;
    /** Removes a listener added with {@link Emitter.on}. */
    off<K extends keyof E>(event: K, fn: Listener<E[K]>): void;
    /** Calls the listeners of `event`; a listener that throws is reported to {@link Emitter.listenerFailed}. */
    protected emit<K extends keyof E>(event: K, ...args: E[K]): void;
    /** Called when a listener throws; by default does nothing. */
    protected listenerFailed(_event: string, _error: unknown): void;
}
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
type Answer = (error: WharfError | null, value?: any) => void;
type Frame = Record<string, unknown>;
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
 * A topic subscription (from {@link WharfClient.subscribe}). It lives
 * across reconnects until {@link Subscription.unsubscribe}, the broker
 * ends it, or the client closes.
 */
export declare class Subscription extends Emitter<SubscriptionEvents> {
    /** The topic (or filter). */
    readonly topic: string;
    /** Whether it recovers missed messages after reconnects. */
    readonly recovering: boolean;
    /**
     * Resolves with the first subscribe's outcome; rejects with the
     * broker's error (e.g. `invalid_filter`) or `closed`.
     */
    readonly ready: Promise<RecoveryInfo>;
    private readonly link;
    private readonly tracker;
    private readonly started;
    private wire;
    private live;
    private subscribedOnce;
    private readonly givenPosition;
    private retryTimer;
    private overflowed;
    /** Made by {@link WharfClient.subscribe}, not by applications. */
    constructor(link: Link, topic: string, options: SubscribeOptions);
    /**
     * Where the subscription stands: the topic's epoch and the offset of
     * the last message received (null before the topic's epoch is known,
     * and for subscriptions without recovery). Pass it as `recover` to a
     * later subscription (e.g. after a page reload) to resume from here.
     */
    get position(): Position | null;
    /** False once unsubscribed or ended. */
    get active(): boolean;
    /** Duplicates dropped so far (a safety net; normally 0). */
    get duplicates(): number;
    /**
     * Ends the subscription. Resolves once the broker confirmed (at once
     * while disconnected).
     */
    unsubscribe(): Promise<void>;
    protected listenerFailed(event: string, error: unknown): void;
    /** Ends the current subscribe on the broker and subscribes again from the position. */
    private restart;
    private stop;
    private subscribed;
    private refused;
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
export declare class Delivery extends Content {
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
    private readonly consumer;
    private readonly wire;
    private done;
    /** Made by its {@link Consumer}, not by applications. */
    constructor(consumer: Consumer, wire: string, f: Record<string, any>);
    /** Whether `ack`, `nack` or `reject` was called. */
    get settled(): boolean;
    /** The message is done: the queue deletes it. Resolves once that is durable. */
    ack(): Promise<void>;
    /**
     * Gives the message back, to be delivered again after `delayMs` (absent:
     * the queue's backoff schedule; 0: at once).
     */
    nack(options?: {
        delayMs?: number;
    }): Promise<void>;
    /** Sends the message to the queue's dead-letter queue at once. */
    reject(): Promise<void>;
    /** Still working on it: the ack deadline becomes `extendMs` from now (absent: the queue's ack timeout). */
    touch(extendMs?: number): Promise<void>;
    private settle;
}
/**
 * A queue consumer (from {@link WharfClient.consume}). It lives across
 * reconnects until {@link Consumer.cancel}, the broker ends it, or the
 * client closes; unacknowledged deliveries go back to the queue when a
 * connection ends, and come again.
 */
export declare class Consumer extends Emitter<ConsumerEvents> {
    /** The queue. */
    readonly queue: string;
    /** Its credit. */
    readonly prefetch: number;
    /** Resolves once the broker attached the first consumer; rejects with its error. */
    readonly ready: Promise<void>;
    private readonly link;
    private readonly handler;
    private readonly started;
    private wire;
    private live;
    private retryTimer;
    /** Made by {@link WharfClient.consume}, not by applications. */
    constructor(link: Link, queue: string, options: ConsumeOptions, handler: DeliveryHandler);
    /** False once cancelled or ended. */
    get active(): boolean;
    /** Stops consuming; unacknowledged deliveries go back to the queue. */
    cancel(): Promise<void>;
    protected listenerFailed(event: string, error: unknown): void;
    private stop;
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
export declare class WharfClient extends Emitter<ClientEvents> {
    /** The WebSocket URL. */
    readonly url: string;
    private readonly options;
    private readonly WS;
    private readonly timeoutMs;
    private ws;
    /** Bumped at each socket's start and end: stale callbacks compare it. */
    private gen;
    private _state;
    private _welcome;
    private attempt;
    private everConnected;
    private nextRid;
    private nextId;
    private token;
    private readonly pending;
    private outbox;
    private readonly routes;
    private readonly subscriptions;
    private readonly consumers;
    private readonly waiters;
    private handshakeError;
    private socketError;
    private handshakeTimer;
    private reconnectTimer;
    private heartbeatTimer;
    private refreshTimer;
    private pinging;
    private readonly link;
    /**
     * @param url - `ws://HOST:PORT/ws` (`http://HOST:PORT` works too)
     * @param options - see {@link WharfClientOptions}
     * @throws TypeError when there is no WebSocket to use
     */
    constructor(url: string, options?: WharfClientOptions);
    /** The connection's state. */
    get state(): ConnectionState;
    /** The current session's `welcome` (null while disconnected). */
    get welcome(): Welcome | null;
    /**
     * Connects, and keeps reconnecting after losses until {@link WharfClient.close}.
     * Resolves at the first `welcome`. Rejects when the broker refuses the
     * credentials (`unauthorized`, `forbidden`: the client then stops) or
     * the client is closed; network failures are retried with backoff
     * meanwhile (race it with a timer for a deadline).
     */
    connect(): Promise<Welcome>;
    /**
     * Closes the connection for good: requests waiting fail with `closed`,
     * subscriptions and consumers end (without `ended` events).
     */
    close(): Promise<void>;
    /**
     * Subscribes to a topic (or a filter, without recovery). Sent now if
     * connected, else at the next session; restored after every reconnect.
     * @param topic - a topic name, or a filter with `+` / `#`
     * @param options - callbacks and recovery; a function is taken as `onMessage`
     * @throws TypeError for an empty topic, or recovery asked on a filter with wildcards
     */
    subscribe(topic: string, options?: SubscribeOptions | ((message: Message) => void)): Subscription;
    /**
     * Consumes a queue: `handler` gets each delivery, to settle with
     * `ack()`, `nack()` or `reject()`. A handler that throws (or whose
     * promise rejects) before settling nacks the delivery.
     * @param queue - the queue (created if missing)
     * @param options - `prefetch`
     * @param handler - called with each delivery
     */
    consume(queue: string, options: ConsumeOptions, handler: DeliveryHandler): Consumer;
    /**
     * Publishes a message. Resolves once the broker's receipt came (the
     * message was queued for every current subscriber), or with
     * `confirm: false` once written. Text goes as is; bytes as base64.
     * @param topic - a topic name
     * @param payload - text or bytes
     * @param options - headers, retain, priority, confirm
     */
    publish(topic: string, payload: Payload, options?: PublishOptions): Promise<void>;
    /**
     * Puts a message on a queue. Resolves with its `seq` once it is durable.
     * @param queue - the queue (created if missing)
     * @param payload - text or bytes
     * @param options - headers, priority (0-9), ttlMs
     */
    enqueue(queue: string, payload: Payload, options?: EnqueueOptions): Promise<Enqueued>;
    /** Pings the broker; resolves with the round trip in ms. */
    ping(): Promise<number>;
    /**
     * Presents a fresh token for the session (`refresh`): `token`, or one
     * from `getToken`. Later reconnects use it too. Usually automatic: a
     * JWT with `exp` is refreshed before it expires when `getToken` is set.
     * @param token - the new token (default: from `getToken`)
     */
    refresh(token?: string): Promise<void>;
    protected listenerFailed(event: string, error: unknown): void;
    private fetchToken;
    private connectTimeoutMs;
    private open;
    /** Closes the socket from this side and handles the loss at once. */
    private drop;
    private lost;
    /** Stops for good: everything waiting fails with `error`. */
    private shutdown;
    private stopTimers;
    private welcomed;
    private startHeartbeat;
    private scheduleRefresh;
    private write;
    /** A request that waits for the next session when disconnected. */
    private request;
    /** Sends on the current session; with `answer`, adds a `rid` and waits for its answer. */
    private sendNow;
    /** Sends `frame` with a new `rid`; `done` gets the answer (or the failure) as soon as it is known. */
    private ask;
    private answer;
    private receive;
}
export {};
