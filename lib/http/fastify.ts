/**
 * Fastify adapters: `onRequest` hooks for a route or a scope, and a plugin that installs them.
 * Fastify itself is only a type import here: nothing loads it at runtime.
 *
 * @module
 */
import type { FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';
import { invalidType } from '../errors.js';
import type { Ipv6Subnet, TrustProxy } from './client-ip.js';
import {
  rateLimitHeaders,
  retryAfter,
  retryAfterField,
  type RateLimitDecision,
  type TokenBucketRefusal,
} from './headers.js';
import type { Limiter } from '../limiter.js';
import type { SharedLimiter } from '../shared-limiter.js';
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
import type { WindowQuota } from './window-quota.js';
import type { UpstreamSlot } from './upstream.js';

/** Where Node's request is in Fastify's. */
const raw = (request: FastifyRequest): IncomingMessage => request.raw;

/** An async `onRequest` hook. */
export type OnRequestHook = (request: FastifyRequest, reply: FastifyReply) => Promise<void>;

/**
 * Ends a refused request's hook once its reply is over, so the request never goes on to the route.
 * Fastify runs the route after an `onRequest` hook resolves unless `reply.sent`, which is false
 * while a `send()` still runs async `onSend` hooks (compression, say) and for good when an `onLimit`
 * never sends. Awaiting the reply (Fastify's `then`, what `return reply` in a hook does) waits for
 * the response to end; if the connection closed first, nothing can be answered, and hijacking the
 * reply stops Fastify there. An `onLimit` that never answers leaves the request waiting for its
 * client or the server's timeouts, as with the node middleware.
 */
async function refused(reply: FastifyReply): Promise<void> {
  await reply;
  if (!reply.sent) reply.hijack();
}

/**
 * Sets a refusal's header `fields` on the reply and on Node's response: an `onLimit` that hijacks
 * the reply and answers on `reply.raw` sends them too, as the node middleware's refusals do, and
 * Fastify's own `send` writes the reply's over them. Refusals only: admitted requests keep their
 * fields on the reply alone, where later hooks read them.
 */
function setRefusalFields(reply: FastifyReply, fields: Record<string, string>): void {
  reply.headers(fields);
  if (reply.raw.headersSent) return;
  for (const name in fields) reply.raw.setHeader(name, fields[name]!);
}

/**
 * Options of {@link rateLimitHook}: as the node middleware's, with Fastify's request and reply. A
 * union, so that options the parser refuses together (`ERR_INCOMPATIBLE_OPTION_PAIR`) fail to
 * compile too. `Q` is the type of the `quota` given (see `QuotaSource`); unsaid, any quota.
 */
export type RateLimitHookOptions<Q extends RequestQuota = RequestQuota> = QuotaSource<Q> & RateLimitHookRules;

/** The rules of {@link RateLimitHookOptions}, whichever quota they count in. */
interface RateLimitHookRules {
  /**
   * Send `RateLimit-Policy` and `RateLimit` on every counted reply. Defaults to `true`; with
   * `false` refusals still get `Retry-After` and nothing else is sent (see the node `rateLimit`).
   * An admitted request's fields are on the reply (`reply.getHeaders()`), so a route that hijacks
   * its reply (server-sent events, a raw stream) sends them only if it copies them.
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
   * The key to count the request under. Defaults to the client IP per `trustProxy`, read from the
   * socket and `X-Forwarded-For` (Fastify's own `trustProxy` setting is not consulted). A key
   * longer than 256 UTF-16 code units is counted and listed in a bounded form, as for the node
   * `rateLimit` (`talkerKey`).
   */
  key?: (request: FastifyRequest) => string;
  /** Requests to let through uncounted and without headers. Defaults to none. */
  skip?: (request: FastifyRequest) => boolean;
  /**
   * Answers a refused request (headers already set, on the reply and on `reply.raw`, so a hijacked
   * reply answered on `reply.raw` sends them too) by sending or hijacking the reply; the request
   * goes no further than the hook either way. Defaults to 429 with a short text body.
   */
  onLimit?: RateLimitHookHandler;
}

/** A {@link rateLimitHook} refusal handler (`onLimit`). */
type RateLimitHookHandler = (request: FastifyRequest, reply: FastifyReply, decision: RateLimitDecision) => unknown;

/**
 * An `onRequest` hook that rate-limits like the node `rateLimit` middleware. Its `quota` is typed
 * as that middleware's: a `WindowQuota` made from the options, or the given quota's own type.
 *
 * @example
 * ```ts
 * app.get('/search', { onRequest: rateLimitHook({ limit: 10, windowMs: 1000 }) }, handler);
 * ```
 */
export function rateLimitHook<Q extends RequestQuota = WindowQuota>(
  options: RateLimitHookOptions<Q>,
): OnRequestHook & QuotaTalkers<Q> {
  const { quota, headers, key, skip, onLimit } = rateLimitConfig<FastifyRequest, RateLimitHookHandler, Q>(options, raw);
  const hook: OnRequestHook = async (request, reply) => {
    if (skip?.(request) === true) return;
    const decision = syncResult(CONSUME_RESULT, quota.consume(key(request)));
    if (headers) {
      const fields = rateLimitHeaders(decision);
      if (decision.allowed) reply.headers(fields);
      else setRefusalFields(reply, fields);
    } else if (!decision.allowed) {
      setRefusalFields(reply, { 'Retry-After': retryAfterField(decision) });
    }
    if (decision.allowed) return;
    if (onLimit !== undefined) await onLimit(request, reply, decision);
    else reply.code(429).type('text/plain; charset=utf-8').send('Too Many Requests\n');
    return refused(reply);
  };
  return withQuota(hook, quota);
}

/** Options of {@link tokenBucketHook}: as the node `tokenBucket` middleware's, with Fastify's types. */
export interface TokenBucketHookOptions {
  /**
   * The keepcount `Limiter` holding the buckets, a `Limiter.openShared` one, or keepcount/redis'
   * `SyncedLimiter`. Required.
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
  /** The key to check the request under. Defaults to the client IP per `trustProxy`. */
  key?: (request: FastifyRequest) => string;
  /** The request's cost in the limiter's units. Defaults to 1. */
  cost?: (request: FastifyRequest) => number;
  /** Requests to let through unchecked. Defaults to none. */
  skip?: (request: FastifyRequest) => boolean;
  /**
   * Answers a refused request (`Retry-After` already set when waiting helps, on the reply and on
   * `reply.raw`) by sending or hijacking the reply; the request goes no further than the hook
   * either way. Defaults to 429.
   */
  onLimit?: (request: FastifyRequest, reply: FastifyReply, refusal: TokenBucketRefusal) => unknown;
  /**
   * Counts every request per key for the hook's `topTalkers(n)`, a key longer than 256 UTF-16 code
   * units in its bounded form (`talkerKey`); see the node `tokenBucket`. Defaults to none.
   */
  talkers?: HeavyHitters;
}

/**
 * An `onRequest` hook rate-limiting with a keepcount token-bucket `Limiter`, like the node
 * `tokenBucket` middleware.
 *
 * @example
 * ```ts
 * const limiter = new Limiter({ bestEffort: { requests: { perSecond: 50, burst: 100 } } });
 * app.get('/upload', { onRequest: tokenBucketHook({ limiter }) }, handler);
 * ```
 */
export function tokenBucketHook(options: TokenBucketHookOptions): OnRequestHook & LimiterTalkers {
  const { limiter, key, cost, skip, onLimit, talkers } = tokenBucketConfig(options, raw);
  const hook: OnRequestHook = async (request, reply) => {
    if (skip?.(request) === true) return;
    const k = key(request);
    countTalker(talkers, k);
    const decision = syncResult(CHECK_RESULT, limiter.check(k, cost(request)));
    if (decision.allowed) return;
    const after = retryAfter(decision.retryAfterMs);
    if (after !== undefined) setRefusalFields(reply, { 'Retry-After': after });
    if (onLimit !== undefined) await onLimit(request, reply, { key: k, retryAfterMs: decision.retryAfterMs });
    else reply.code(429).type('text/plain; charset=utf-8').send('Too Many Requests\n');
    return refused(reply);
  };
  return withLimiter(hook, limiter, talkers);
}

/**
 * Options of {@link upstreamLimitHook}: as the node middleware's, with Fastify's request and reply.
 * A union, so that options the parser refuses together (`ERR_INCOMPATIBLE_OPTION_PAIR`) fail to
 * compile too.
 */
export type UpstreamLimitHookOptions = UpstreamLimitSource & UpstreamLimitHookRules;

/** The rules of {@link UpstreamLimitHookOptions}, whichever limit they count in. */
interface UpstreamLimitHookRules {
  /**
   * The upstream a request goes to: a string (anything else fails the request with a `TypeError`).
   * Defaults to `'default'`.
   */
  upstream?: (request: FastifyRequest) => string;
  /** With `perClient`: the proxies to trust for the client IP, as the rate-limit hook's. */
  trustProxy?: TrustProxy;
  /** With `perClient`: how IPv6 clients are grouped, as the rate-limit hook's. */
  ipv6Subnet?: Ipv6Subnet;
  /** With `perClient`: the client a request counts for. Defaults to the client IP per `trustProxy`. */
  key?: (request: FastifyRequest) => string;
  /**
   * Answers a refused request by sending or hijacking the reply; the request goes no further than
   * the hook either way (`slot.clientCount > limit.perClient`: refused for its client). Defaults
   * to 503 with `Retry-After: 1`.
   */
  onLimit?: (request: FastifyRequest, reply: FastifyReply, slot: UpstreamSlot) => unknown;
  /**
   * Counts every request per upstream for the hook's `topTalkers(n)`, an upstream longer than 256
   * UTF-16 code units in its bounded form (`talkerKey`); see the node `upstreamLimit`.
   * Defaults to none.
   */
  talkers?: HeavyHitters;
}

/**
 * An `onRequest` hook capping requests in flight per upstream like the node `upstreamLimit`
 * middleware: 503 over `max`, the slot released when the exchange is over (the response finished,
 * failed or was aborted, or the connection closed, pipelined requests queued on it included; a
 * reply queued behind another on its connection, once the route answered it or destroyed
 * `reply.raw`).
 *
 * @example
 * ```ts
 * app.get('/proxy', { onRequest: upstreamLimitHook({ max: 20 }) }, proxyHandler);
 * ```
 */
export function upstreamLimitHook(options: UpstreamLimitHookOptions): OnRequestHook & UpstreamTalkers {
  const { limit, upstream, client, onLimit, talkers } = upstreamLimitConfig(options, raw);
  const hook: OnRequestHook = async (request, reply) => {
    const u = upstream(request);
    countTalker(talkers, u);
    const slot = limit.enter(u, client?.(request));
    if (!slot.allowed) {
      if (onLimit !== undefined) await onLimit(request, reply, slot);
      else reply.code(503).header('Retry-After', '1').type('text/plain; charset=utf-8').send('Service Unavailable\n');
      return refused(reply);
    }
    onExchangeEnd(request.raw, reply.raw, slot.release);
  };
  return withLimit(hook, limit, talkers);
}

/** Options of {@link keepcountFastify}: which hooks to install. */
export interface KeepcountFastifyOptions {
  /** Installs {@link rateLimitHook} with these options. */
  rateLimit?: RateLimitHookOptions;
  /** Installs {@link tokenBucketHook} with these options (after the rate limit). */
  tokenBucket?: TokenBucketHookOptions;
  /** Installs {@link upstreamLimitHook} with these options (after the rate limits). */
  upstreamLimit?: UpstreamLimitHookOptions;
}

/** The hooks {@link keepcountFastify} installs, by option. */
const HOOKS: readonly string[] = ['rateLimit', 'tokenBucket', 'upstreamLimit'];

/**
 * What Fastify's `register` takes for itself and passes to the plugin along with its own options.
 * Not `prefix`: Fastify ignores it for a plugin that is not encapsulated, so its hooks would limit
 * every route of the scope, a health check's beside `/api`'s ({@link checkPluginOptions}).
 */
const REGISTER_OPTIONS: readonly string[] = ['logLevel', 'logSerializers'];

/**
 * Refuses plugin options that would install no hook or name one that does not exist:
 * `{ limit: 100 }` (@fastify/rate-limit's shape) or `{ ratelimit: ... }` would otherwise register
 * cleanly and protect nothing, where the middleware refuses the same mistake.
 */
function checkPluginOptions(options: unknown): void {
  const expected = 'an object with rateLimit, tokenBucket or upstreamLimit options';
  if (typeof options !== 'object' || options === null)
    throw invalidType('The keepcountFastify options', expected, options);
  const given = options as Record<string, unknown>;
  if (given.prefix !== undefined) {
    throw invalidType(
      'The "prefix" option of keepcountFastify',
      'absent: the plugin installs its hooks on the scope that registers it, which Fastify gives no ' +
        'prefix, so they would limit every route there; register it inside a plugin registered with ' +
        'that prefix',
      given.prefix,
    );
  }
  for (const name of Object.keys(given)) {
    if (!HOOKS.includes(name) && !REGISTER_OPTIONS.includes(name)) {
      throw invalidType(
        `The "${name}" option of keepcountFastify`,
        `absent: the plugin takes ${HOOKS.join(', ')}`,
        given[name],
      );
    }
  }
  if (HOOKS.every((name) => given[name] === undefined)) {
    throw invalidType('The keepcountFastify options', expected, options);
  }
}

/**
 * A Fastify plugin installing the hooks on the scope that registers it (not encapsulated, as
 * `fastify-plugin` would do, so registering on the root protects every route). What the plugin
 * made from options (a rate limit's quota when no `quota` is given, an upstream limit when no
 * `limit` is) is closed when the Fastify instance closes, freeing its counters at once; a quota or
 * limit that was given stays open, as it is the caller's.
 *
 * @example
 * ```ts
 * await app.register(keepcountFastify, { rateLimit: { limit: 100, windowMs: 60_000 } });
 * ```
 */
export const keepcountFastify: FastifyPluginCallback<KeepcountFastifyOptions> = Object.assign(
  (
    instance: Parameters<FastifyPluginCallback<KeepcountFastifyOptions>>[0],
    options: KeepcountFastifyOptions,
    done: (error?: Error) => void,
  ) => {
    try {
      checkPluginOptions(options);
      const made: { close(): void }[] = [];
      if (options.rateLimit !== undefined) {
        const hook = rateLimitHook(options.rateLimit);
        if (options.rateLimit.quota === undefined) made.push(hook.quota as WindowQuota);
        instance.addHook('onRequest', hook);
      }
      if (options.tokenBucket !== undefined) instance.addHook('onRequest', tokenBucketHook(options.tokenBucket));
      if (options.upstreamLimit !== undefined) {
        const hook = upstreamLimitHook(options.upstreamLimit);
        if (options.upstreamLimit.limit === undefined) made.push(hook.limit);
        instance.addHook('onRequest', hook);
      }
      if (made.length > 0) {
        instance.addHook('onClose', (_instance, closed) => {
          for (const owned of made) owned.close();
          closed();
        });
      }
      done();
    } catch (error) {
      done(error as Error);
    }
  },
  // What fastify-plugin sets: skip encapsulation, and the name in Fastify's plugin tree.
  { [Symbol.for('skip-override')]: true, [Symbol.for('fastify.display-name')]: 'keepcount' },
);
