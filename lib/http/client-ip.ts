/** The client address of a request, trusting `X-Forwarded-For` only as far as configured. */
import type { IncomingMessage } from 'node:http';
import { isIP, isIPv6 } from 'node:net';
import { invalidType, outOfRange } from '../errors.js';

/**
 * Which proxies to believe about the client address:
 *
 * - `false`: none; the client is the TCP peer (`socket.remoteAddress`). `X-Forwarded-For` is
 *   ignored, so a client cannot pick its own key by sending one.
 * - a number `n` >= 0: exactly `n` proxies stand in front of the server; the client is the address
 *   `n` hops back (the TCP peer, then `X-Forwarded-For` from right to left). `0` is `false`.
 * - a function `(ip, hop) => boolean`: walk back from the TCP peer (`hop` 0) while the function
 *   trusts the address, e.g. `(ip) => ip === '10.0.0.5'`.
 *
 * The walk stops at the first entry that is not an IP address and keeps the last valid one, so
 * garbage in the header keys the request by the proxy that forwarded it, never by the garbage.
 */
export type TrustProxy = false | number | ((ip: string, hop: number) => boolean);

/** Validates a {@link TrustProxy} option. @internal */
export function trustProxyOption(value: unknown): TrustProxy {
  if (value === undefined || value === false) return false;
  if (typeof value === 'function' || isProxyCount(value)) return value as TrustProxy;
  throw trustProxyError('option', value);
}

/** A number {@link TrustProxy}: an integer >= 0. */
const isProxyCount = (value: unknown): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;

/** The error for a `trustProxy` that is none of `false`, a number of proxies or a function. */
function trustProxyError(kind: 'option' | 'argument', value: unknown): TypeError | RangeError {
  const what = `The "trustProxy" ${kind}`;
  return typeof value === 'number'
    ? outOfRange(what, 'an integer >= 0 when it is a number', value)
    : invalidType(what, 'false, a number or a function', value);
}

/**
 * How much of an IPv6 address names one client: `false` for the whole address, else the prefix
 * length in bits, an integer in [32, 64]. Defaults to 56, as express-rate-limit v8: providers hand
 * a customer a /48 to /64, so a /128 key would let one host rotate through 2^64 or more addresses
 * (and keys). A /56 can lump a few customers of a provider that hands out /64s together; choose
 * 64 when your clients' providers do, 48 when they hand out /48s.
 */
export type Ipv6Subnet = number | false;

/** express-rate-limit v8's default prefix. */
export const DEFAULT_IPV6_SUBNET = 56;

/** Validates an {@link Ipv6Subnet} option. @internal */
export function ipv6SubnetOption(value: unknown): Ipv6Subnet {
  if (value === undefined) return DEFAULT_IPV6_SUBNET;
  if (value === false) return false;
  if (typeof value !== 'number') throw invalidType('The "ipv6Subnet" option', 'false or a number', value);
  if (!Number.isInteger(value) || value < 32 || value > 64) {
    throw outOfRange('The "ipv6Subnet" option', 'false or an integer in [32, 64]', value);
  }
  return value;
}

/** An IPv6 address (valid per `isIP`, zone removed) as its eight 16-bit groups. */
function groups(ip: string): number[] {
  const parse = (part: string): number[] =>
    part === ''
      ? []
      : part.split(':').flatMap((g) => {
          if (!g.includes('.')) return [parseInt(g, 16)];
          const [a, b, c, d] = g.split('.').map(Number) as [number, number, number, number];
          return [(a << 8) | b, (c << 8) | d];
        });
  const [head = '', tail] = ip.split('::');
  const left = parse(head);
  const right = tail === undefined ? [] : parse(tail);
  return [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right];
}

/** Eight groups in RFC 5952's canonical text: lowercase, the longest run of zero groups as `::`. */
function canonical(g: number[]): string {
  let best = -1;
  let bestLength = 1;
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLength) [best, bestLength] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = g.map((n) => n.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLength).join(':')}`;
}

/**
 * The rate-limit key of a client address, as express-rate-limit v8's `ipKeyGenerator`: an IPv4
 * address as it is; an IPv4 address carried in IPv6 (`::ffff:203.0.113.7`, `::ffff:cb00:7107`,
 * the deprecated `::203.0.113.7`) as that IPv4 address, so IPv4 clients are never lumped into one
 * IPv6 prefix; any other IPv6 address as its `ipv6Subnet` prefix in canonical form
 * (`2001:db8:1::/56`), or the whole address canonically when `ipv6Subnet` is `false`. Anything
 * that is not an IP address (`'unknown'`) is returned unchanged. An `ip` that is not a string
 * throws `TypeError` `ERR_INVALID_ARG_TYPE`; an `ipv6Subnet` as the option of that name does.
 *
 * @example
 * ```ts
 * ipKey('2001:db8:1:2::1'); // '2001:db8:1::/56'
 * ipKey('::ffff:203.0.113.7'); // '203.0.113.7'
 * // A custom key for @fastify/rate-limit, keyed by the same prefixes:
 * await fastify.register(import('@fastify/rate-limit'), {
 *   max: 100,
 *   timeWindow: 60_000,
 *   keyGenerator: (request) => ipKey(request.ip),
 * });
 * ```
 */
export function ipKey(ip: string, ipv6Subnet: Ipv6Subnet = DEFAULT_IPV6_SUBNET): string {
  if (typeof ip !== 'string') throw invalidType('The "ip" argument', 'of type string', ip);
  return prefixKey(ip, ipv6SubnetOption(ipv6Subnet));
}

/** {@link ipKey} with a validated `subnet`. @internal */
export function prefixKey(ip: string, subnet: Ipv6Subnet): string {
  // Every IPv6 address has a colon: IPv4 keys skip isIP's regular expressions.
  if (!ip.includes(':') || isIP(ip) !== 6) return ip;
  const address = ip.replace(/%.*$/, '');
  const g = groups(address);
  const zeros = (n: number): boolean => g.slice(0, n).every((x) => x === 0);
  if ((zeros(5) && g[5] === 0xffff) || (zeros(6) && address.includes('.'))) {
    return [g[6]! >> 8, g[6]! & 0xff, g[7]! >> 8, g[7]! & 0xff].join('.');
  }
  if (subnet === false) return canonical(g);
  const masked = g.map((x, i) => {
    const bits = Math.min(16, Math.max(0, subnet - 16 * i));
    return x & ((0xffff << (16 - bits)) & 0xffff);
  });
  return `${canonical(masked)}/${subnet}`;
}

/**
 * True when `text` is an IPv4 address as `net.isIPv4` accepts it: four decimal parts in [0, 255]
 * without leading zeros, joined by dots, nothing else. Read code unit by code unit: `isIPv4`'s
 * regular expression builds a match array per call, and every request's key goes through here.
 * @internal
 */
export function isIPv4Text(text: string): boolean {
  const length = text.length;
  if (length < 7 || length > 15) return false;
  for (let i = 0, part = 0; ; i++) {
    const start = i;
    let value = 0;
    // Bounded by `length`: a read past the end (NaN) makes V8 swap its inlined `charCodeAt` for a
    // call per character.
    for (; i < length; i++) {
      const digit = text.charCodeAt(i) - 48;
      if (digit < 0 || digit > 9) break;
      value = value * 10 + digit;
    }
    const digits = i - start;
    if (digits === 0 || digits > 3 || value > 255 || (digits > 1 && text.charCodeAt(start) === 48)) return false;
    if (++part === 4) return i === length;
    if (i === length || text.charCodeAt(i) !== 46) return false;
  }
}

const COMMA = 44;

/**
 * `text.trim()`, skipped when both ends are printable ASCII other than the space (the usual
 * entry), which `trim` would keep: it is a builtin call and a new string per entry.
 */
function trimmed(text: string): string {
  const last = text.length - 1;
  if (last < 0) return text;
  const first = text.charCodeAt(0);
  const end = text.charCodeAt(last);
  return first > 32 && first < 127 && end > 32 && end < 127 ? text : text.trim();
}

/** `isIP(text) !== 0`, with IPv4 text told apart by {@link isIPv4Text}. */
const isAddress = (text: string): boolean => isIPv4Text(text) || isIPv6(text);

/** `::ffff:127.0.0.1` (an IPv4 peer on a dual-stack socket) as `127.0.0.1`. */
function normalize(ip: string): string {
  return ip.startsWith('::ffff:') && isIPv4Text(ip.slice(7)) ? ip.slice(7) : ip;
}

/** The TCP peer's address, normalized; `undefined` once the connection has closed. */
function peerIp(req: IncomingMessage): string | undefined {
  const peer = req.socket?.remoteAddress;
  return peer === undefined ? undefined : normalize(peer);
}

/** `X-Forwarded-For` as one list (Node joins repeated lines into an array), or `undefined`. */
function forwardedFor(req: IncomingMessage): string | undefined {
  // Optional: a request-like object without headers (a test double, a bare socket wrapper) has
  // no forwarded list rather than a TypeError from deep inside.
  const header = req.headers?.['x-forwarded-for'];
  return Array.isArray(header) ? header.join(',') : header;
}

/**
 * The client address of `req` under `trustProxy` (see {@link TrustProxy}). Once the connection has
 * closed, Node no longer knows the peer's address (a request can outlive it in a slow middleware,
 * e.g. behind nginx, which closes its upstream connection when its client aborts): a number of
 * trusted proxies still reads `X-Forwarded-For`, since it trusts hops by count, not by address;
 * otherwise, and when the header has no trusted entry, the address is `'unknown'`. A `trustProxy`
 * that is none of `false`, an integer >= 0 or a function throws as `rateLimit`'s option does:
 * `RangeError` `ERR_OUT_OF_RANGE` for another number, `TypeError` `ERR_INVALID_ARG_TYPE` otherwise;
 * a `req` that is not an object throws `TypeError` `ERR_INVALID_ARG_TYPE`.
 *
 * @example
 * ```ts
 * // One load balancer in front: believe the last X-Forwarded-For entry, nothing before it.
 * const key = clientIp(req, 1);
 * ```
 */
export function clientIp(req: IncomingMessage, trustProxy: TrustProxy = false): string {
  if (typeof req !== 'object' || req === null) throw invalidType('The "req" argument', 'a request', req);
  if (trustProxy === false || trustProxy === 0) return peerIp(req) ?? 'unknown';
  // `undefined` stands for the peer's address until it is needed: a trust function judges it, but
  // counted hops need it only when the header has no entry to take, not on every proxied request.
  let ip: string | undefined;
  if (typeof trustProxy === 'function') {
    ip = peerIp(req);
    // A trust function judges addresses, and the peer's is gone.
    if (ip === undefined) return 'unknown';
  } else if (!isProxyCount(trustProxy)) {
    // Checked here rather than by `trustProxyOption` first: the middleware calls this per request
    // with an option it already checked, and the common values cost no more than before.
    throw trustProxyError('argument', trustProxy);
  }
  const list = forwardedFor(req);
  if (list === undefined) return ip ?? peerIp(req) ?? 'unknown';
  // The entries right to left, each the text between two commas, read in place: no array of
  // them per request. `end` is where the next entry ends; -1 once every entry was read. The comma
  // is found code unit by code unit: `lastIndexOf` is a call into V8's C++ runtime.
  for (let hop = 0, end = list.length; end >= 0; hop++) {
    const trusted = typeof trustProxy === 'number' ? hop < trustProxy : trustProxy(ip!, hop);
    if (!trusted) break;
    let start = end - 1;
    while (start >= 0 && list.charCodeAt(start) !== COMMA) start--;
    const next = trimmed(list.slice(start + 1, end));
    if (!isAddress(next)) break;
    ip = normalize(next);
    end = start;
  }
  return ip ?? peerIp(req) ?? 'unknown';
}
