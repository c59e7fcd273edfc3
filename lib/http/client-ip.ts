/** The client address of a request, trusting `X-Forwarded-For` only as far as configured. */
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
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
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw outOfRange('The "trustProxy" option', 'an integer >= 0 when it is a number', value);
    }
    return value;
  }
  if (typeof value === 'function') return value as TrustProxy;
  throw invalidType('The "trustProxy" option', 'false, a number or a function', value);
}

/** `::ffff:127.0.0.1` (an IPv4 peer on a dual-stack socket) as `127.0.0.1`. */
function normalize(ip: string): string {
  return ip.startsWith('::ffff:') && isIP(ip.slice(7)) === 4 ? ip.slice(7) : ip;
}

/** The hops to walk back through: the TCP peer, then `X-Forwarded-For` right to left. */
function forwardedFor(req: IncomingMessage): string[] {
  const header = req.headers['x-forwarded-for'];
  if (header === undefined) return [];
  // Node joins repeated X-Forwarded-For lines with ", ".
  return (Array.isArray(header) ? header.join(',') : header)
    .split(',')
    .map((s) => s.trim())
    .reverse();
}

/**
 * The client address of `req` under `trustProxy` (see {@link TrustProxy}); `'unknown'` when the
 * socket is already gone and nothing is trusted.
 *
 * @example
 * ```ts
 * // One load balancer in front: believe the last X-Forwarded-For entry, nothing before it.
 * const key = clientIp(req, 1);
 * ```
 */
export function clientIp(req: IncomingMessage, trustProxy: TrustProxy = false): string {
  const peer = req.socket?.remoteAddress;
  let ip = peer === undefined ? 'unknown' : normalize(peer);
  if (trustProxy === false || trustProxy === 0 || peer === undefined) return ip;
  const hops = forwardedFor(req);
  for (let hop = 0; hop < hops.length; hop++) {
    const trusted = typeof trustProxy === 'number' ? hop < trustProxy : trustProxy(ip, hop);
    if (!trusted) break;
    const next = hops[hop]!;
    if (isIP(next) === 0) break;
    ip = normalize(next);
  }
  return ip;
}
