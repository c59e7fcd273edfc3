// clientIp reads X-Forwarded-For in place, right to left; these pin it to the split-and-reverse
// reading it replaced, on the header shapes proxies and clients actually send.
import type { IncomingMessage } from 'node:http';
import { isIP, isIPv4 } from 'node:net';
import test from 'ava';
import { isIPv4Text } from '../lib/http/client-ip.js';
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
    // Whitespace `trim` takes off at either end, ASCII or not (a test double may hold any text).
    '\t203.0.113.7\u00a0',
    '198.51.100.1 ,\v203.0.113.7\r',
    '\u3000203.0.113.7',
    '203.0.113.7\u2028',
    '\ufeff2001:db8::1 , x',
    '198.51.100.1, 203.0.113.7',
    '198.51.100.1,203.0.113.7,10.0.0.2',
    ',203.0.113.7',
    '203.0.113.7,',
    '198.51.100.1, , 203.0.113.7',
    'garbage, 203.0.113.7',
    '203.0.113.7, garbage',
    '203.0.113.07',
    '203.0.113.256',
    '203.0.113',
    '203.0.113.7.1',
    '::ffff:203.0.113.07, 198.51.100.1',
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
  // A closed connection has no peer address: counted hops still read the header, a function cannot judge.
  t.is(clientIp(request(undefined, '203.0.113.7'), 1), '203.0.113.7');
  t.is(clientIp(request(undefined, '198.51.100.1, 203.0.113.7'), 2), '198.51.100.1');
  t.is(clientIp(request(undefined, '203.0.113.7'), false), 'unknown');
  t.is(clientIp(request(undefined, 'garbage'), 1), 'unknown');
  t.is(
    clientIp(request(undefined, '203.0.113.7'), () => true),
    'unknown',
  );
});

test(title('ipKey keys IPv4 addresses and non-addresses as they are, IPv6 by prefix'), (t) => {
  t.is(ipKey('203.0.113.7'), '203.0.113.7');
  t.is(ipKey('unknown'), 'unknown');
  t.is(ipKey('not:an:address'), 'not:an:address');
  t.is(ipKey('::ffff:203.0.113.7'), '203.0.113.7');
  t.is(ipKey('2001:db8:1:2::1'), '2001:db8:1::/56');
});

test(title('isIPv4Text accepts exactly the IPv4 addresses net.isIPv4 accepts'), (t) => {
  const parts = ['0', '00', '01', '1', '9', '10', '99', '100', '199', '200', '249', '250', '255', '256', '300'];
  const odd = ['', '0000', '1000', ' 1', '1 ', '+1', '-1', '0x1', '\u0661', 'a', '1a'];
  const texts = ['', '.', '...', '1.2.3.4.', '.1.2.3.4', '1..2.3', '1.2.3.4\n', '١.٢.٣.٤', '1.2.3.4/8', '::1'];
  for (const a of parts) for (const b of [...parts, ...odd]) for (const c of odd) texts.push(`${a}.${b}.${c}`);
  for (const a of parts)
    for (const b of parts)
      for (const c of [...parts, ...odd])
        for (const d of [...parts, ...odd]) {
          texts.push(`${a}.${b}.${c}.${d}`);
        }
  for (const a of parts) for (const e of [...parts, ...odd]) texts.push(`${a}.1.2.3.${e}`);
  const disagree = texts.filter((text) => isIPv4Text(text) !== isIPv4(text));
  t.deepEqual(disagree, []);
  t.true(texts.filter(isIPv4).length > 10_000, 'the corpus holds many addresses, not only rejects');
});
