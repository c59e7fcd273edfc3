/**
 * keepcount/http: HTTP protection on keepcount's counters, framework-neutral at the core.
 *
 * - {@link WindowQuota} (requests per key per window, with IETF RateLimit headers; clients near
 *   their limit counted exactly, so none within it is refused, and the top talkers listed) and
 *   {@link UpstreamLimit} (in-flight calls per upstream), {@link withDeadline} for upstream calls.
 * - `(req, res, next)` middleware for node:http and Express: {@link rateLimit}, {@link tokenBucket}
 *   (a token-bucket `Limiter` instead of a window), {@link upstreamLimit}.
 * - Fastify hooks and plugin live in `keepcount/fastify` (`lib/http/fastify.ts`), so this entry's
 *   declarations never name fastify's types and compile without fastify installed.
 * - Drop-in stores: {@link KeepcountStore} for express-rate-limit, {@link KeepcountFastifyStore}
 *   for @fastify/rate-limit.
 *
 * Express, Fastify and the rate-limit packages are optional peer dependencies: nothing here loads
 * them at runtime.
 *
 * @module
 */
export { clientIp, ipKey, type Ipv6Subnet, type TrustProxy } from './client-ip.js';
export { rateLimitHeaders, type RateLimitDecision, type TokenBucketRefusal } from './headers.js';
export {
  rateLimit,
  tokenBucket,
  upstreamLimit,
  type Middleware,
  type Next,
  type RateLimitMiddleware,
  type RateLimitOptions,
  type TokenBucketOptions,
  type UpstreamLimitMiddlewareOptions,
} from './node.js';
export {
  type LimiterTalkers,
  type QuotaTalkers,
  type Talkers,
  type TalkersWindow,
  type UpstreamTalkers,
} from './talkers.js';
/** The bounded form of long client keys, under the names this entry has always exported. */
export { MAX_STORED_KEY_LENGTH as MAX_TALKER_KEY_LENGTH, storedKey as talkerKey } from '../long-key.js';
export type { RequestLimiter, RequestQuota } from './quota.js';
export { slotsFor, WindowQuota, type HeavyHitterSettings, type WindowQuotaOptions } from './window-quota.js';
export { KeepcountStore, type ClientRateLimitInfo, type KeepcountStoreOptions } from './stores/express-rate-limit.js';
export {
  KeepcountFastifyStore,
  keepcountFastifyStore,
  type FastifyStore,
  type FastifyStoreCallback,
  type FastifyStoreConstructor,
  type FastifyStoreParams,
  type KeepcountFastifyStoreOptions,
} from './stores/fastify-rate-limit.js';
export {
  isDeadlineError,
  UpstreamLimit,
  withDeadline,
  type UpstreamLimitOptions,
  type UpstreamSlot,
} from './upstream.js';
