/**
 * The one place the HTTP adapters' public options become an internal configuration (as
 * express-rate-limit's `parseOptions`): every option checked with keepcount's error codes and every
 * default filled in, so `node.ts` and `fastify.ts` only adapt a configuration to their own request
 * and response objects. Each parser is generic over the adapter's request type `R` and refusal
 * handler `H`; the adapter says where Node's `IncomingMessage` is in its request (`RawRequest`).
 *
 * @module
 */
import type { IncomingMessage } from 'node:http';
import { invalidType, withCode } from '../errors.js';
import { optionsObject } from '../options.js';
import { syncResult } from './sync-result.js';
import {
  clientIp,
  ipv6SubnetOption,
  prefixKey,
  trustProxyOption,
  type Ipv6Subnet,
  type TrustProxy,
} from './client-ip.js';
import { UpstreamLimit, type UpstreamLimitOptions } from './upstream.js';
import type { RequestLimiter, RequestQuota } from './quota.js';
import { WindowQuota, type WindowQuotaOptions } from './window-quota.js';
import type { HeavyHitters } from '../heavy.js';
import type { Rate } from '../rate.js';
import { talkersOption } from './talkers.js';

/** Where an adapter's request object keeps Node's request (Fastify: `request.raw`). */
export type RawRequest<R> = (request: R) => IncomingMessage;

/** Any function: the shape refusal handlers are checked against. */
type AnyFunction = (...args: never[]) => unknown;

/**
 * `A`'s options or `B`'s, never some of each: the parsers refuse such a pair with
 * `ERR_INCOMPATIBLE_OPTION_PAIR` ({@link refuseMoot}) rather than drop one side, and with the other
 * side's options typed `?: undefined` tsc and editors refuse it too, naming the option that
 * clashes. `undefined`, not `never`: the parsers read an option given as `undefined` as not given,
 * and `never` would refuse that under `exactOptionalPropertyTypes`.
 */
type Exclusive<A, B> = (A & { [K in keyof B]?: undefined }) | (B & { [K in keyof A]?: undefined });

/** A ready quota of type `Q`: it has its own limit, window and counters. */
interface GivenQuota<Q extends RequestQuota> {
  /**
   * A ready quota to count in (e.g. shared by several routes): a `WindowQuota`, or keepcount/redis'
   * `SyncedWindowQuota` for a limit across machines. Not with `limit`, `windowMs` or any other
   * option a new quota is made from.
   */
  quota: Q;
}

/**
 * The options of a new quota: `limit` and `windowMs` (the parser requires them), and either a
 * `rate`, which brings its own sketch (so not with {@link SKETCH_OPTIONS}) and keeps no heavy
 * hitters, or the options of a sketch of the quota's own.
 */
type NewQuota = Pick<WindowQuotaOptions, 'limit' | 'windowMs'> &
  Partial<Omit<WindowQuotaOptions, 'limit' | 'windowMs' | 'rate' | 'heavyHitters' | SketchOption>> &
  (
    | ({ rate: Rate; heavyHitters?: false } & { [K in SketchOption]?: undefined })
    | (Partial<Pick<WindowQuotaOptions, SketchOption | 'heavyHitters'>> & { rate?: undefined })
  );

/**
 * Where `rateLimit` and `rateLimitHook` count: a ready `quota` of type `Q`, or the options of a new
 * one, which is a `WindowQuota` and so offered only when a `WindowQuota` is a `Q`. `Q` is what the
 * middleware's `quota` is typed: inferred from a given `quota`, else the function's default
 * `WindowQuota`; a `Q` that a `WindowQuota` is not (`SyncedWindowQuota`, say) with the options of a
 * new quota does not compile, since the quota made would not be one. Defaults to any
 * {@link RequestQuota}, both ways open. Each side's options are `?: undefined` on the other, as
 * {@link Exclusive} makes them.
 */
export type QuotaSource<Q extends RequestQuota = RequestQuota> =
  | (GivenQuota<Q> & { [K in keyof NewQuota]?: undefined })
  | ((WindowQuota extends Q ? NewQuota : never) & { quota?: undefined });

/** The options `rateLimit` and `rateLimitHook` share, over their request type and refusal handler. */
export type RateLimitInput<R, H extends AnyFunction, Q extends RequestQuota = RequestQuota> = QuotaSource<Q> & {
  headers?: boolean;
  trustProxy?: TrustProxy;
  ipv6Subnet?: Ipv6Subnet;
  key?: (request: R) => string;
  skip?: (request: R) => boolean;
  onLimit?: H;
};

/** A parsed {@link RateLimitInput}: the adapter supplies only the default `onLimit`. */
export interface RateLimitConfig<R, H, Q extends RequestQuota = RequestQuota> {
  /** The given quota, or the `WindowQuota` made from the options (a `Q` then, see {@link QuotaSource}). */
  quota: Q;
  /** Whether counted responses carry `RateLimit-Policy` and `RateLimit`. */
  headers: boolean;
  key: (request: R) => string;
  skip: ((request: R) => boolean) | undefined;
  onLimit: H | undefined;
}

/** The options `tokenBucket` and `tokenBucketHook` share. */
export interface TokenBucketInput<R, H extends AnyFunction> {
  limiter: RequestLimiter;
  trustProxy?: TrustProxy;
  ipv6Subnet?: Ipv6Subnet;
  key?: (request: R) => string;
  cost?: (request: R) => number;
  skip?: (request: R) => boolean;
  onLimit?: H;
  talkers?: HeavyHitters;
}

/** A parsed {@link TokenBucketInput}. */
export interface TokenBucketConfig<R, H> {
  limiter: RequestLimiter;
  key: (request: R) => string;
  cost: (request: R) => number;
  skip: ((request: R) => boolean) | undefined;
  onLimit: H | undefined;
  talkers: HeavyHitters | undefined;
}

/** A ready upstream limit: it has its own max and counters. */
interface GivenLimit {
  /**
   * A ready limit to count in (e.g. shared with other routes). Not with `max`, `inflight`,
   * `perClient` or `clientInflight`, the options a new limit is made from.
   */
  limit: UpstreamLimit;
}

/** Where `upstreamLimit` and `upstreamLimitHook` count: a ready `limit`, or the options of a new one. */
export type UpstreamLimitSource = Exclusive<GivenLimit, NewUpstreamLimit>;

/** The options of a new upstream limit: `max` (the parser requires it); `clientInflight` only with `perClient`. */
type NewUpstreamLimit = Omit<UpstreamLimitOptions, 'perClient' | 'clientInflight'> &
  (
    | (Pick<UpstreamLimitOptions, 'clientInflight'> & Required<Pick<UpstreamLimitOptions, 'perClient'>>)
    | { perClient?: undefined; clientInflight?: undefined }
  );

/** The options `upstreamLimit` and `upstreamLimitHook` share. */
export type UpstreamLimitInput<R, H extends AnyFunction> = UpstreamLimitSource & {
  upstream?: (request: R) => string;
  trustProxy?: TrustProxy;
  ipv6Subnet?: Ipv6Subnet;
  key?: (request: R) => string;
  onLimit?: H;
  talkers?: HeavyHitters;
};

/** A parsed {@link UpstreamLimitInput}. */
export interface UpstreamLimitConfig<R, H> {
  limit: UpstreamLimit;
  upstream: (request: R) => string;
  /** The client a request counts for under the limit's `perClient`; `undefined` when it has none. */
  client: ((request: R) => string) | undefined;
  onLimit: H | undefined;
  talkers: HeavyHitters | undefined;
}

/** An optional function option, checked. */
function functionOption<F extends AnyFunction>(name: string, value: F | undefined): F | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw invalidType(`The "${name}" option`, 'of type function', value);
  }
  return value;
}

/**
 * An optional per-request function option (`key`, `skip`, `cost`, `upstream`), checked, and wrapped
 * so that a result that is a promise or another thenable (an `async` function, say) fails the
 * request with a TypeError naming the option instead of going on: the middleware decides
 * synchronously, and would otherwise count a promise as a key, take it as "do not skip", or leave
 * its rejection unhandled (which ends a Node process). A rejected native promise is marked handled
 * first. Other results go on to the counter, which checks them.
 */
function perRequestOption<R, T>(
  name: string,
  value: ((request: R) => T) | undefined,
  required?: string,
): ((request: R) => T) | undefined {
  const fn = functionOption(name, value);
  if (fn === undefined) return undefined;
  return (request) => {
    const result = fn(request);
    // `required` names the type a result must have where what it goes to has a default for
    // `undefined` (a cost of 1, no client): a request missing the header or field the function
    // reads would otherwise escape the limit rather than fail.
    if (result === undefined && required !== undefined) {
      throw invalidType(`The "${name}" option's result`, required, result);
    }
    return syncResult(`The "${name}" option's result`, result);
  };
}

/** A required number option, checked for type here and for range by the class it goes to. */
function numberOption(name: string, value: number | undefined): number {
  if (typeof value !== 'number') throw invalidType(`The "${name}" option`, 'of type number', value);
  return value;
}

/**
 * The default key: the client IP per `trustProxy`, an IPv6 one by its `ipv6Subnet` prefix. Made
 * (so both options checked) even where a `key` function replaces it: a value that is wrong there
 * (Express's `trustProxy: 'loopback'`, say) is refused as it is everywhere else, rather than
 * accepted until the `key` goes.
 */
function clientKey<R>(
  options: { trustProxy?: TrustProxy; ipv6Subnet?: Ipv6Subnet },
  raw: RawRequest<R>,
): (request: R) => string {
  const trust = trustProxyOption(options.trustProxy);
  const subnet = ipv6SubnetOption(options.ipv6Subnet);
  let checked = options.trustProxy !== undefined;
  return (request) => {
    const req = raw(request);
    if (!checked) checked = warnIfFrameworkTrustsProxy(request, req);
    return prefixKey(clientIp(req, trust), subnet);
  };
}

/** Whether {@link warnIfFrameworkTrustsProxy} warned: once a process. */
let warnedTrustProxy = false;

/**
 * Warns once a process when the app told its framework to trust a proxy (Express's `trust proxy`,
 * Fastify's `trustProxy`: the framework's `ip` is not the socket's on a forwarded request) and
 * keepcount was given no `trustProxy`: keepcount does not read the framework's setting, so behind
 * the proxy every client would share the proxy's address and one limit. Before, nothing said so.
 * Returns whether the check is done: on the first request with an `X-Forwarded-For`.
 */
function warnIfFrameworkTrustsProxy(request: unknown, req: IncomingMessage): boolean {
  if (warnedTrustProxy) return true;
  if (req.headers?.['x-forwarded-for'] === undefined) return false;
  const ip = (request as { ip?: unknown }).ip ?? (req as { ip?: unknown }).ip;
  if (typeof ip !== 'string' || ip === req.socket?.remoteAddress) return true;
  warnedTrustProxy = true;
  process.emitWarning(
    'The framework reads client addresses from X-Forwarded-For (Express\'s "trust proxy", Fastify\'s ' +
      '"trustProxy"), but keepcount keys clients by the socket\'s address unless given its own "trustProxy" ' +
      'option (the number of proxies in front, e.g. 1): behind a proxy every client would share one limit',
    { type: 'KeepcountWarning', code: 'KEEPCOUNT_TRUST_PROXY' },
  );
  return true;
}

/** Parses the options of `rateLimit`/`rateLimitHook`. */
export function rateLimitConfig<R, H extends AnyFunction, Q extends RequestQuota = RequestQuota>(
  options: RateLimitInput<R, H, Q>,
  raw: RawRequest<R>,
): RateLimitConfig<R, H, Q> {
  const o = optionsObject<RateLimitInput<R, H>>(options);
  const byAddress = clientKey(o, raw);
  return {
    // The given quota is a `Q`; a made one is a `WindowQuota`, which `QuotaSource<Q>` offers only
    // when a `WindowQuota` is a `Q`.
    quota: windowQuota(o) as Q,
    headers: headersOption(o.headers),
    key: perRequestOption('key', o.key) ?? byAddress,
    skip: perRequestOption('skip', o.skip),
    onLimit: functionOption('onLimit', o.onLimit),
  };
}

/** The `headers` option: `true` unless `false`. */
function headersOption(value: unknown): boolean {
  if (value === undefined) return true;
  if (typeof value !== 'boolean') throw invalidType('The "headers" option', 'a boolean', value);
  return value;
}

/**
 * Refuses options that `given` makes moot, which would otherwise be dropped without a word (a
 * `quota` with a `limit` ran on the quota's limit): `what` says why they go unused.
 */
function refuseMoot(given: string, options: Record<string, unknown>, moot: readonly string[], what: string): void {
  const passed = moot.filter((name) => options[name] !== undefined);
  if (passed.length > 0) {
    const names = passed.map((name) => `"${name}"`).join(', ');
    const message = `The "${given}" option cannot be used with ${names}: ${what}`;
    throw withCode(new TypeError(message), 'ERR_INCOMPATIBLE_OPTION_PAIR');
  }
}

/** What `rateLimit` builds its quota from, all moot with a `quota`. */
const QUOTA_OPTIONS: readonly (keyof WindowQuotaOptions)[] = [
  'limit',
  'windowMs',
  'policy',
  'clients',
  'hashes',
  'slots',
  'seed',
  'clock',
  'heavyHitters',
  'rate',
];

/** What sizes, seeds and times `rateLimit`'s own sketch, all moot with a `rate`. */
const SKETCH_OPTIONS = ['clients', 'hashes', 'slots', 'seed', 'clock'] as const;

/** One of {@link SKETCH_OPTIONS}: the list the parser refuses beside a `rate` is the one its type does. */
type SketchOption = (typeof SKETCH_OPTIONS)[number];

/** The quota `options` name, or a new one from their `limit`/`windowMs`/... */
function windowQuota(options: Partial<RateLimitInput<never, AnyFunction>>): RequestQuota {
  const { quota, limit, windowMs, policy, clients, hashes, slots, seed, clock, heavyHitters, rate } = options;
  if (quota !== undefined) {
    if (typeof quota !== 'object' || quota === null || typeof quota.consume !== 'function') {
      throw invalidType('The "quota" option', 'a WindowQuota or an object with a consume() method', quota);
    }
    refuseMoot('quota', options, QUOTA_OPTIONS, 'a quota has its own limit, window and counters');
    return quota;
  }
  if (rate !== undefined) {
    refuseMoot(
      'rate',
      options,
      SKETCH_OPTIONS,
      'a Rate has its own shape, seed and clock (size a shared one with slotsFor)',
    );
  }
  return new WindowQuota({
    limit: numberOption('limit', limit),
    windowMs: numberOption('windowMs', windowMs),
    policy,
    clients,
    hashes,
    slots,
    seed,
    clock,
    heavyHitters,
    rate,
  });
}

/** Parses the options of `tokenBucket`/`tokenBucketHook`. */
export function tokenBucketConfig<R, H extends AnyFunction>(
  options: TokenBucketInput<R, H>,
  raw: RawRequest<R>,
): TokenBucketConfig<R, H> {
  const o = optionsObject(options);
  const byAddress = clientKey(o, raw);
  return {
    limiter: limiterOption(o.limiter),
    key: perRequestOption('key', o.key) ?? byAddress,
    cost: perRequestOption('cost', o.cost, 'of type number') ?? (() => 1),
    skip: perRequestOption('skip', o.skip),
    onLimit: functionOption('onLimit', o.onLimit),
    talkers: talkersOption(o.talkers),
  };
}

/** The `limiter` option: a `Limiter`, or an object with a `check()` method (e.g. a `SyncedLimiter`). */
function limiterOption(limiter: unknown): RequestLimiter {
  if (typeof limiter !== 'object' || limiter === null || typeof (limiter as RequestLimiter).check !== 'function') {
    throw invalidType('The "limiter" option', 'a Limiter or an object with a check() method', limiter);
  }
  return limiter as RequestLimiter;
}

/** Parses the options of `upstreamLimit`/`upstreamLimitHook`. */
export function upstreamLimitConfig<R, H extends AnyFunction>(
  options: UpstreamLimitInput<R, H>,
  raw: RawRequest<R>,
): UpstreamLimitConfig<R, H> {
  const o = optionsObject(options);
  const limit = upstreamLimit(o);
  const key = perRequestOption('key', o.key, 'of type string');
  const byAddress = clientKey(o, raw);
  return {
    limit,
    upstream: perRequestOption('upstream', o.upstream) ?? (() => 'default'),
    client: limit.perClient === Infinity ? undefined : (key ?? byAddress),
    onLimit: functionOption('onLimit', o.onLimit),
    talkers: talkersOption(o.talkers),
  };
}

/** The limit `options` name, or a new one from their `max`, `inflight`, `perClient` and `clientInflight`. */
function upstreamLimit(options: Partial<UpstreamLimitInput<never, AnyFunction>>): UpstreamLimit {
  const { limit, max, inflight, perClient, clientInflight } = options;
  if (limit !== undefined) {
    if (!(limit instanceof UpstreamLimit)) throw invalidType('The "limit" option', 'an UpstreamLimit', limit);
    const moot: readonly (keyof UpstreamLimitOptions)[] = ['max', 'inflight', 'perClient', 'clientInflight'];
    refuseMoot('limit', options, moot, 'an UpstreamLimit has its own max and counters');
    return limit;
  }
  return new UpstreamLimit({ max: numberOption('max', max), inflight, perClient, clientInflight });
}
