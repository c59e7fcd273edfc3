/**
 * `(req, res, next)` middleware for node:http and Express (4 and 5: both pass Node's own request
 * and response objects, so one implementation serves both).
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { types } from 'node:util';
import { describe, withCode } from '../errors.js';
import type { Limiter } from '../limiter.js';
import type { SharedLimiter } from '../shared-limiter.js';
import type { Ipv6Subnet, TrustProxy } from './client-ip.js';
import {
  checkDecision,
  policyField,
  rateLimitField,
  retryAfter,
  retryAfterField,
  type RateLimitDecision,
  type TokenBucketRefusal,
} from './headers.js';
import { onExchangeEnd } from './exchange.js';
import {
  rateLimitConfig,
  tokenBucketConfig,
  upstreamLimitConfig,
  type QuotaSource,
  type UpstreamLimitSource,
} from './options.js';
import { CHECK_RESULT, CONSUME_RESULT, syncResult } from './sync-result.js';
import {
  countTalker,
  withLimit,
  withQuota,
  withLimiter,
  type LimiterTalkers,
  type QuotaTalkers,
  type UpstreamTalkers,
} from './talkers.js';
import type { HeavyHitters } from '../heavy.js';
import type { RequestLimiter, RequestQuota } from './quota.js';
import type { UpstreamSlot } from './upstream.js';
import type { WindowQuota } from './window-quota.js';

/**
 * A middleware's `next`: called with no argument to go on, with an error to fail the request.
 *
 * An error (a `key`, `cost`, `skip` or `upstream` function that throws or returns a promise, a cost
 * the limiter refuses such as `NaN`, an `onLimit` that throws or whose promise rejects) goes to
 * `next(error)` only when `next` declares a parameter, as Express's and Connect's do: a `next`
 * written `() => handle(req, res)` cannot tell an error from going on, so the middleware answers
 * `500 Internal Server Error` itself and does not call it. Either way an error never admits the
 * request.
 */
export type Next = (error?: unknown) => void;

/**
 * Fails the request with `error`: hands it to `next` when `next` takes an argument (Express's
 * error path), else answers 500 (see {@link Next}). Never goes on to the handler.
 */
function fail(res: ServerResponse, next: Next, error: unknown): void {
  if (next.length > 0) return next(nextError(error));
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.statusCode = 500;
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.end('Internal Server Error\n');
}

/**
 * What {@link fail} hands `next` for `error`: the error itself, unless Express would not take it
 * for one. Express reads a falsy argument (`undefined`, `null`, `0`, `''`, `false`) as "go on" and
 * `'route'`/`'router'` as "skip to the next route/router": either would admit the request. Those
 * are wrapped in an `ERR_KEEPCOUNT_CALLBACK` error, the value as its `cause`.
 */
function nextError(error: unknown): unknown {
  if (error && error !== 'route' && error !== 'router') return error;
  return withCode(
    new Error(
      `A function given to a keepcount middleware threw or rejected with ${describe(error)}, ` +
        'which Express would take for going on',
      { cause: error },
    ),
    'ERR_KEEPCOUNT_CALLBACK',
  );
}

/**
 * Runs a refusal handler (`onLimit`, called as `refusal`): an exception it throws, or the rejection
 * of a promise it returns (an `async` handler), fails the request as {@link fail} does instead of
 * escaping the middleware or going unhandled.
 */
function refuse(res: ServerResponse, next: Next, refusal: () => unknown): void {
  let answered: unknown;
  try {
    answered = refusal();
  } catch (error) {
    return fail(res, next, error);
  }
  // isPromise, not instanceof: a promise from another realm (a `vm` context) rejects unhandled too.
  if (types.isPromise(answered)) {
    Promise.prototype.then.call(answered, undefined, (error: unknown) => fail(res, next, error));
  }
}

/**
 * Answers a refusal with `status` and a short text body; when the headers are already sent (by a
 * handler before the middleware) the refusal can no longer be told, so the connection ends, as in
 * {@link fail}.
 */
function answer(res: ServerResponse, status: number, text: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.end(text);
}

/**
 * Sets the fields of `rateLimitHeaders(decision)` on `res`, without its object and entries array
 * per request; none once a handler before the middleware sent the headers (the decision stands
 * without them). Tried rather than asked first: Express swaps each response's prototype, so
 * reading `res.headersSent` there (a getter up that chain) cost about 4k instructions a request
 * under callgrind (0.4 % of a hello-world's), while a `try` costs nothing until `setHeader`
 * throws `ERR_HTTP_HEADERS_SENT`.
 */
function setFields(res: ServerResponse, decision: RateLimitDecision): void {
  try {
    res.setHeader('RateLimit-Policy', policyField(decision));
    res.setHeader('RateLimit', rateLimitField(decision));
    if (!decision.allowed) res.setHeader('Retry-After', retryAfterField(decision));
  } catch (error) {
    if (!res.headersSent) throw error;
  }
}

/** A `(req, res, next)` middleware, usable with `app.use()` and from a node:http handler. */
export type Middleware<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse> = (
  req: Req,
  res: Res,
  next: Next,
) => void;

/**
 * A {@link rateLimit} middleware, with the quota it counts in and its top talkers. `Q` is the
 * quota's type, as {@link rateLimit} returns it: `WindowQuota` when made from options, the given
 * quota's own type otherwise; unsaid, any quota (an annotation that takes every rate limit).
 */
export type RateLimitMiddleware<
  Req extends IncomingMessage = IncomingMessage,
  Res extends ServerResponse = ServerResponse,
  Q extends RequestQuota = RequestQuota,
> = Middleware<Req, Res> & QuotaTalkers<Q>;

/**
 * Options of {@link rateLimit}: a `WindowQuotaOptions` quota (or a ready `WindowQuota`, or
 * keepcount/redis' `SyncedWindowQuota` for a limit across machines) and the rules. A union, so
 * that options the parser refuses together (`ERR_INCOMPATIBLE_OPTION_PAIR`) fail to compile too.
 * `Q` is the type of the `quota` given (see `QuotaSource`); unsaid, any quota.
 */
export type RateLimitOptions<
  Req extends IncomingMessage = IncomingMessage,
  Res extends ServerResponse = ServerResponse,
  Q extends RequestQuota = RequestQuota,
> = QuotaSource<Q> & RateLimitRules<Req, Res>;

/** The rules of {@link RateLimitOptions}, whichever quota they count in. */
interface RateLimitRules<Req extends IncomingMessage, Res extends ServerResponse> {
  /**
   * Send `RateLimit-Policy` and `RateLimit` on every counted response. Defaults to `true`. With
   * `false` refusals still get `Retry-After` and nothing else is sent: for servers whose clients do
   * not read the fields, since Node validates and serializes each field it sends (on a node:http
   * hello-world the two fields alone cost 2–3 % of its throughput and 7–8 % of its CPU per request:
   * benchmark/RESULTS.md, `node-headers`).
   */
  headers?: boolean;
  /** Which proxies to believe for the default key; see {@link TrustProxy}. Defaults to `false`. */
  trustProxy?: TrustProxy;
  /**
   * How much of an IPv6 client address is one client in the default key: a prefix length in
   * [32, 64], or `false` for the whole address; see {@link Ipv6Subnet}. IPv4 addresses, also
   * IPv4-mapped ones, are keyed whole. Ignored when `key` is set (use `ipKey` there). Defaults
   * to 56, as express-rate-limit v8.
   */
  ipv6Subnet?: Ipv6Subnet;
  /**
   * The key to count the request under. Defaults to the client IP per `trustProxy`. A key longer
   * than 256 UTF-16 code units (a header the client fills, say) is counted and listed by
   * `topTalkers` in a bounded form, so that it cannot make the heavy-hitter tables large: its first
   * 240 units, `'…'`, 16 hex digits of its SHA-256 (`talkerKey`).
   */
  key?: (req: Req) => string;
  /** Requests to let through uncounted and without headers, e.g. health checks. Defaults to none. */
  skip?: (req: Req) => boolean;
  /**
   * Answers a refused request; the RateLimit and Retry-After headers are already set. Defaults to
   * `429 Too Many Requests` with a short text body.
   */
  onLimit?: RateLimitHandler<Req, Res>;
}

/** A {@link rateLimit} refusal handler (`onLimit`). */
type RateLimitHandler<Req, Res> = (req: Req, res: Res, decision: RateLimitDecision) => void;

const tooMany = (_req: IncomingMessage, res: ServerResponse): void => answer(res, 429, 'Too Many Requests\n');

/**
 * Rate-limits requests: counts each (unless `skip`ped) under its key, sets `RateLimit-Policy` and
 * `RateLimit` on every counted response (unless `headers: false`), and answers requests over the
 * quota with `onLimit` (429 and `Retry-After` by default).
 *
 * The middleware's `quota` is typed as what counts: a `WindowQuota` made from the options (with its
 * `stats()` and `topTalkers(n)`), or the `quota` given, as its own type (`Q`, inferred). Type
 * arguments given explicitly leave `Q` at `WindowQuota` unless given too: with another `quota`,
 * write `rateLimit<Req, Res, typeof quota>` (or type the `key` parameter and let tsc infer).
 *
 * @example
 * ```ts
 * app.use(rateLimit({ limit: 100, windowMs: 60_000, trustProxy: 1 }));
 * // node:http
 * const limit = rateLimit({ limit: 100, windowMs: 60_000 });
 * http.createServer((req, res) => limit(req, res, () => handle(req, res)));
 * ```
 */
export function rateLimit<
  Req extends IncomingMessage = IncomingMessage,
  Res extends ServerResponse = ServerResponse,
  Q extends RequestQuota = WindowQuota,
>(options: RateLimitOptions<Req, Res, Q>): RateLimitMiddleware<Req, Res, Q> {
  const {
    quota,
    headers,
    key,
    skip,
    onLimit = tooMany,
  } = rateLimitConfig<Req, RateLimitHandler<Req, Res>, Q>(options, (req: Req) => req);
  const middleware: Middleware<Req, Res> = (req, res, next) => {
    let decision: RateLimitDecision | undefined;
    try {
      if (skip?.(req) !== true) {
        decision = syncResult(CONSUME_RESULT, quota.consume(key(req)));
        if (headers) {
          checkDecision(decision);
          setFields(res, decision);
        } else if (!decision.allowed && !res.headersSent) res.setHeader('Retry-After', retryAfterField(decision));
      }
    } catch (error) {
      return fail(res, next, error);
    }
    if (decision === undefined || decision.allowed) return next();
    const refused = decision;
    refuse(res, next, () => onLimit(req, res, refused));
  };
  return withQuota(middleware, quota);
}

/** Options of {@link tokenBucket}. */
export interface TokenBucketOptions<
  Req extends IncomingMessage = IncomingMessage,
  Res extends ServerResponse = ServerResponse,
> {
  /**
   * What holds the buckets: a keepcount `Limiter` (per-key quotas and the best-effort bucket), a
   * `Limiter.openShared` one (a bucket per client for every process of the host), or
   * keepcount/redis' `SyncedLimiter` (per-key quotas across machines). Required.
   */
  limiter: Limiter | SharedLimiter | RequestLimiter;
  /** Which proxies to believe for the default key; see {@link TrustProxy}. Defaults to `false`. */
  trustProxy?: TrustProxy;
  /**
   * How much of an IPv6 client address is one client in the default key: a prefix length in
   * [32, 64], or `false` for the whole address; see {@link Ipv6Subnet}. IPv4 addresses, also
   * IPv4-mapped ones, are keyed whole. Ignored when `key` is set (use `ipKey` there). Defaults
   * to 56, as express-rate-limit v8.
   */
  ipv6Subnet?: Ipv6Subnet;
  /** The key to check the request under (a key in the limiter's table, say an API key). Defaults to the client IP. */
  key?: (req: Req) => string;
  /** The request's cost in the limiter's units (e.g. its Content-Length). Defaults to 1. */
  cost?: (req: Req) => number;
  /** Requests to let through unchecked. Defaults to none. */
  skip?: (req: Req) => boolean;
  /** Answers a refused request (`Retry-After` already set when waiting helps). Defaults to 429. */
  onLimit?: (req: Req, res: Res, refusal: TokenBucketRefusal) => void;
  /**
   * Counts every request here too, per key, so that the middleware's `topTalkers(n)` can list who
   * sends the most (a {@link Limiter} keeps no counts to list). One more count per request;
   * without it `topTalkers` lists nobody. A key longer than 256 UTF-16 code units is counted
   * here in its bounded form (`talkerKey`: first 240 units, `'…'`, 16 hex digits of its
   * SHA-256), so that clients choosing long keys cannot make the table large; the limiter still
   * checks the key as given. Defaults to none.
   */
  talkers?: HeavyHitters;
}

/**
 * Rate-limits requests with a keepcount token-bucket `Limiter` instead of a fixed-window
 * {@link WindowQuota}: per-key quotas for the keys in its table (customers, API keys), one shared
 * best-effort bucket for everyone else, bursts allowed up to each bucket's size. Refusals get 429
 * and `Retry-After` (omitted when waiting never helps, e.g. a cost above the burst). No RateLimit
 * headers: a token bucket has no window, and the limiter does not report remaining tokens.
 *
 * @example
 * ```ts
 * const limiter = new Limiter({
 *   bestEffort: { requests: { perSecond: 50, burst: 100 } },
 *   keys: [['key-of-acme', { requests: { perSecond: 500, burst: 1000 } }]],
 * });
 * app.use(tokenBucket({ limiter, key: (req) => String(req.headers['x-api-key'] ?? '') }));
 *
 * // One bucket per client IP for all the processes of a host (node:cluster, PM2):
 * const seed = BigInt(process.env.KEEPCOUNT_SEED!); // a secret, the same in every process
 * const perClient = Limiter.openShared('clients', { quota: { requests: { perSecond: 10, burst: 20 } }, seed });
 * app.use(tokenBucket({ limiter: perClient }));
 * ```
 */
export function tokenBucket<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  options: TokenBucketOptions<Req, Res>,
): Middleware<Req, Res> & LimiterTalkers {
  const { limiter, key, cost, skip, onLimit = tooMany, talkers } = tokenBucketConfig(options, (req: Req) => req);
  const middleware: Middleware<Req, Res> = (req, res, next) => {
    let refusal: TokenBucketRefusal | undefined;
    try {
      if (skip?.(req) !== true) {
        const k = key(req);
        countTalker(talkers, k);
        const decision = syncResult(CHECK_RESULT, limiter.check(k, cost(req)));
        if (!decision.allowed) {
          refusal = { key: k, retryAfterMs: decision.retryAfterMs };
          const after = retryAfter(decision.retryAfterMs);
          if (after !== undefined && !res.headersSent) res.setHeader('Retry-After', after);
        }
      }
    } catch (error) {
      return fail(res, next, error);
    }
    if (refusal === undefined) return next();
    const refused = refusal;
    refuse(res, next, () => onLimit(req, res, refused));
  };
  return withLimiter(middleware, limiter, talkers);
}

/**
 * Options of {@link upstreamLimit}: an `UpstreamLimitOptions` limit (or a ready `UpstreamLimit`)
 * and the rules. A union, so that options the parser refuses together
 * (`ERR_INCOMPATIBLE_OPTION_PAIR`) fail to compile too.
 */
export type UpstreamLimitMiddlewareOptions<
  Req extends IncomingMessage = IncomingMessage,
  Res extends ServerResponse = ServerResponse,
> = UpstreamLimitSource & UpstreamLimitRules<Req, Res>;

/** The rules of {@link UpstreamLimitMiddlewareOptions}, whichever limit they count in. */
interface UpstreamLimitRules<Req extends IncomingMessage, Res extends ServerResponse> {
  /**
   * The upstream a request goes to: a string (anything else fails the request with a `TypeError`).
   * Defaults to `'default'`: one limit for the route.
   */
  upstream?: (req: Req) => string;
  /** With `perClient`: the proxies to trust for the client IP, as `RateLimitOptions.trustProxy`. */
  trustProxy?: TrustProxy;
  /** With `perClient`: how IPv6 clients are grouped, as `RateLimitOptions.ipv6Subnet`. */
  ipv6Subnet?: Ipv6Subnet;
  /** With `perClient`: the client a request counts for. Defaults to the client IP per `trustProxy`. */
  key?: (req: Req) => string;
  /**
   * Answers a refused request (`slot.clientCount > limit.perClient`: refused for its client).
   * Defaults to `503 Service Unavailable` with `Retry-After: 1`.
   */
  onLimit?: (req: Req, res: Res, slot: UpstreamSlot) => void;
  /**
   * Counts every request here too, per upstream, so that the middleware's `topTalkers(n)` can list
   * the busiest upstreams, an upstream longer than 256 UTF-16 code units in its bounded form (see
   * `TokenBucketOptions.talkers`). Defaults to none (`topTalkers` lists nobody).
   */
  talkers?: HeavyHitters;
}

const unavailable = (_req: IncomingMessage, res: ServerResponse): void => {
  if (!res.headersSent) res.setHeader('Retry-After', '1');
  answer(res, 503, 'Service Unavailable\n');
};

/**
 * Caps requests in flight per upstream: counts the request in, answers 503 (`onLimit`) when that
 * takes the upstream over `max`, and otherwise counts it out when the exchange is over: the
 * response finished, failed or was aborted, or the connection closed (which also ends requests a
 * pipelining client queued and left; their responses never emit `close`). A response queued
 * behind another on its connection counts out once the handler ends or destroys it: Node sends
 * it, and emits its `close`, only after the answers ahead, which a client can hold open.
 *
 * @example
 * ```ts
 * app.get('/api/:service', upstreamLimit({ max: 20, upstream: (req: express.Request) => String(req.params.service) }), proxy);
 * ```
 */
export function upstreamLimit<
  Req extends IncomingMessage = IncomingMessage,
  Res extends ServerResponse = ServerResponse,
>(options: UpstreamLimitMiddlewareOptions<Req, Res>): Middleware<Req, Res> & UpstreamTalkers {
  const { limit, upstream, client, onLimit = unavailable, talkers } = upstreamLimitConfig(options, (req: Req) => req);
  const middleware: Middleware<Req, Res> = (req, res, next) => {
    let slot: UpstreamSlot;
    try {
      const u = upstream(req);
      countTalker(talkers, u);
      slot = limit.enter(u, client?.(req));
    } catch (error) {
      return fail(res, next, error);
    }
    if (!slot.allowed) return refuse(res, next, () => onLimit(req, res, slot));
    onExchangeEnd(req, res, slot.release);
    next();
  };
  return withLimit(middleware, limit, talkers);
}
