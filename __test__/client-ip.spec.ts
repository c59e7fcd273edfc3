// clientIp reads X-Forwarded-For in place, right to left; these pin it to the split-and-reverse
// reading it replaced, on the header shapes proxies and clients actually send.
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import test from 'ava';
import { isDottedQuad } from '../lib/http/client-ip.js';
import { clientIp, ipKey, type TrustProxy } from '../lib/http/index.js';
import { title } from './helpers.js';

const request = (peer: string | undefined, forwarded?: string | string[]): IncomingMessage =>
  ({
    socket: { remoteAddress: peer },
    headers: forwarded === undefined ? {} : { 'x-forwarded-for': forwarded },
  }) as unknown as IncomingMessage;

/** The reading clientIp had before: split on commas, trim, reverse, walk while trusted. */
function reference(peer: string, forwarded: string | string[] | undefined, trust: TrustProxy): string {
  const normalize = (ip: string) => (ip.startsWith('::ffff:') && isIP(ip.slice(7)) === 4 ? ip.slice(7) : ip);
  let ip = normalize(peer);
  if (trust === false || trust === 0 || forwarded === undefined) return ip;
  const hops = (Array.isArray(forwarded) ? forwarded.join(',') : forwarded)
    .split(',')
    .map((s) => s.trim())
    .reverse();
  for (let hop = 0; hop < hops.length; hop++) {
    if (!(typeof trust === 'number' ? hop < trust : trust(ip, hop))) break;
    if (isIP(hops[hop]!) === 0) break;
    ip = normalize(hops[hop]!);
  }
  return ip;
}

test(title('clientIp walks X-Forwarded-For right to left exactly as far as trusted'), (t) => {
  const headers: (string | string[] | undefined)[] = [
    undefined,
    '',
    ',',
    ',,',
    '203.0.113.7',
    ' 203.0.113.7 ',
    '198.51.100.1, 203.0.113.7',
    '198.51.100.1,203.0.113.7,10.0.0.2',
    ',203.0.113.7',
    '203.0.113.7,',
    '198.51.100.1, , 203.0.113.7',
    'garbage, 203.0.113.7',
    '203.0.113.7, garbage',
    '2001:db8::1, ::ffff:203.0.113.9',
    ['198.51.100.1, 203.0.113.7', '10.0.0.2'],
    ['', '203.0.113.7'],
  ];
  const trusts: TrustProxy[] = [false, 0, 1, 2, 3, 10, (ip) => ip.startsWith('10.') || ip === '127.0.0.1', () => true];
  let cases = 0;
  for (const peer of ['127.0.0.1', '::ffff:10.0.0.5']) {
    for (const forwarded of headers) {
      for (const trust of trusts) {
        const hops: [string, number][] = [];
        const spy: TrustProxy =
          typeof trust === 'function'
            ? (ip, hop) => {
                hops.push([ip, hop]);
                return trust(ip, hop);
              }
            : trust;
        const expectedHops: [string, number][] = [];
        const expectedSpy: TrustProxy =
          typeof trust === 'function'
            ? (ip, hop) => {
                expectedHops.push([ip, hop]);
                return trust(ip, hop);
              }
            : trust;
        const what = `${peer} ${JSON.stringify(forwarded)} trust ${String(trust)}`;
        t.is(clientIp(request(peer, forwarded), spy), reference(peer, forwarded, expectedSpy), what);
        t.deepEqual(hops, expectedHops, `${what}: the trust function sees the same hops`);
        cases++;
      }
    }
  }
  t.is(cases, 2 * headers.length * trusts.length);
  t.is(clientIp(request(undefined, '203.0.113.7'), 1), 'unknown');
});

test(title('ipKey keys IPv4 addresses and non-addresses as they are, IPv6 by prefix'), (t) => {
  t.is(ipKey('203.0.113.7'), '203.0.113.7');
  t.is(ipKey('unknown'), 'unknown');
  t.is(ipKey('not:an:address'), 'not:an:address');
  t.is(ipKey('::ffff:203.0.113.7'), '203.0.113.7');
  t.is(ipKey('2001:db8:1:2::1'), '2001:db8:1::/56');
});

test(title('isDottedQuad agrees with isIP on every string it is asked about'), (t) => {
  // clientIp answers dotted quads without isIP's regular expression; a disagreement would key a
  // request differently from before. Edge cases first, then 200,000 strings over the characters
  // an address is made of and of dotted parts (deterministic, so a failure reproduces).
  const corpus = [
    '0.0.0.0',
    '255.255.255.255',
    '256.1.1.1',
    '1.1.1.256',
    '01.1.1.1',
    '1.1.1.00',
    '1.1.1',
    '1.1.1.1.1',
    '1..1.1',
    '.1.1.1',
    '1.1.1.1.',
    ' 1.1.1.1',
    '1.1.1.1 ',
    '1.1.1.1\n',
    '1.1.1.1a',
    '\u0661.\u0661.\u0661.\u0661',
    '１.1.1.1',
    '1000.1.1.1',
    '199.200.249.250',
    '::ffff:1.2.3.4',
    '',
  ];
  let state = 0x9e3779b9;
  const next = (): number => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return state >>> 0;
  };
  const alphabet = '0123456789.0125.';
  const digits = '0123456789012559';
  for (let i = 0; i < 100_000; i++) {
    // Any string of address characters...
    let s = '';
    for (let n = next() % 17; n > 0; n--) s += alphabet[next() % alphabet.length];
    corpus.push(s);
    // ...and 3 to 5 parts of 0 to 4 digits, most of them near-addresses.
    const parts: string[] = [];
    for (let p = 3 + (next() % 3); p > 0; p--) {
      let part = '';
      for (let n = next() % 5; n > 0; n--) part += digits[next() % digits.length];
      parts.push(part);
    }
    corpus.push(parts.join('.'));
  }
  let quads = 0;
  for (const text of corpus) {
    const expected = isIP(text) === 4;
    if (isDottedQuad(text) !== expected) t.fail(`${JSON.stringify(text)}: isIP says ${isIP(text)}`);
    if (expected) quads++;
  }
  // The random strings must reach valid addresses too, or the agreement would be one-sided.
  t.true(quads > 1000, `${quads} valid addresses in the corpus`);
});
