/**
 * The default client key against spoofing: `X-Forwarded-For` of every shape is believed only as
 * far as `trustProxy` says, also once the connection has closed.
 */
import test from 'ava';
import Fastify, { type FastifyInstance } from 'fastify';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rateLimit, type Ipv6Subnet, type TrustProxy } from '../lib/http/index.js';
import { rateLimitHook } from '../lib/http/fastify.js';
import { title } from './helpers.js';
import { close, eventually, listen } from './http-client.js';
import { noUnhandled, open, record, requestLine } from './http-abuse.js';

test.serial(
  title('the default key believes X-Forwarded-For only as far as trusted, whatever shape the header takes'),
  async (t) => {
    // Every request is refused and answered with the key it was counted under, in X-Key.
    const echo = (trustProxy: TrustProxy, ipv6Subnet?: Ipv6Subnet) => ({
      limit: 0,
      windowMs: 60_000,
      trustProxy,
      ipv6Subnet,
    });
    const node = (options: ReturnType<typeof echo>): Server =>
      createServer({ maxHeaderSize: 1 << 20 }, (req, res) =>
        rateLimit({
          ...options,
          onLimit: (_req, r, decision) => void r.writeHead(429, { 'X-Key': decision.key }).end(),
        })(req, res, () => {
          res.end('admitted');
        }),
      );
    const fastifyKeys = async (options: ReturnType<typeof echo>): Promise<FastifyInstance> => {
      const app = Fastify({ http: { maxHeaderSize: 1 << 20 } });
      app.get(
        '/',
        {
          onRequest: rateLimitHook({
            ...options,
            onLimit: (_request, reply, decision) => reply.code(429).header('X-Key', decision.key).send(),
          }),
        },
        async () => 'admitted',
      );
      await app.listen({ port: 0, host: '127.0.0.1' });
      return app;
    };
    const many = `${'198.51.100.1, , '.repeat(2000)}203.0.113.9`; // 32 kB, empty entries between
    const cases: Array<[TrustProxy, Ipv6Subnet | undefined, string[], string]> = [
      [false, undefined, ['203.0.113.9'], '127.0.0.1'],
      [0, undefined, ['203.0.113.9'], '127.0.0.1'],
      [1, undefined, ['6.6.6.6, 203.0.113.9'], '203.0.113.9'],
      [1, undefined, ['6.6.6.6', '203.0.113.9'], '203.0.113.9'], // two header lines, joined
      [1, undefined, [many], '203.0.113.9'],
      // The entry before the last is empty: the walk stops there, keeping the last address read.
      [2, undefined, [many], '203.0.113.9'],
      [() => true, undefined, [many], '203.0.113.9'],
      [1, undefined, [', , ,'], '127.0.0.1'],
      [1, undefined, ['203.0.113.9, '], '127.0.0.1'],
      [1, undefined, ['203.0.113.9:8080'], '127.0.0.1'],
      [1, undefined, ['[2001:db8::1]:443'], '127.0.0.1'],
      [1, undefined, ['for=203.0.113.9'], '127.0.0.1'],
      [1, undefined, ['::ffff:203.0.113.9'], '203.0.113.9'],
      [1, undefined, ['::FFFF:CB00:7109'], '203.0.113.9'],
      [1, undefined, ['2001:DB8:1:2::1%eth0'], '2001:db8:1::/56'],
      [1, undefined, ['2001:db8:1:ff:ffff:ffff:ffff:ffff'], '2001:db8:1::/56'],
      [1, 64, ['2001:db8:1:2:aaaa::1'], '2001:db8:1:2::/64'],
      [1, 64, ['2001:db8:1:3::1'], '2001:db8:1:3::/64'],
      [1, false, ['2001:0DB8:0:0::0001'], '2001:db8::1'],
    ];
    for (const [trustProxy, ipv6Subnet, lines, expected] of cases) {
      const options = echo(trustProxy, ipv6Subnet);
      const what = `trustProxy ${String(trustProxy)}, ipv6Subnet ${String(ipv6Subnet)}, ${JSON.stringify(lines).slice(0, 60)}`;
      const head = `${lines.map((line) => `X-Forwarded-For: ${line}\r\nForwarded: for=6.6.6.6\r\n`).join('')}Connection: close\r\n`;
      const server = node(options);
      const app = await fastifyKeys(options);
      try {
        for (const port of [await listen(server), (app.server.address() as AddressInfo).port]) {
          const socket = await open(port);
          const { text, closed } = record(socket);
          socket.write(requestLine('GET', '/', head));
          await closed;
          t.true(text().startsWith('HTTP/1.1 429 '), `${what}: ${text().slice(0, 40)}`);
          t.is(/\r\nx-key: ([^\r]*)\r\n/i.exec(text())?.[1], expected, what);
        }
      } finally {
        await Promise.all([close(server), app.close()]);
      }
    }
    await noUnhandled(t);
  },
);

test.serial(
  title('a request whose connection closed before the limit ran is still keyed by its trusted X-Forwarded-For'),
  async (t) => {
    // Behind a proxy that closes its upstream connection when its client aborts (nginx does), a
    // request that waited in an earlier middleware reaches the limit with no socket address.
    const keys: string[] = [];
    let arrived = 0;
    const options = (trustProxy: TrustProxy) => ({ limit: 0, windowMs: 60_000, trustProxy });
    const node = (trustProxy: TrustProxy): Server => {
      const limit = rateLimit({ ...options(trustProxy), onLimit: (_req, _res, d) => void keys.push(d.key) });
      return createServer((req, res) => {
        arrived++;
        req.socket.once('close', () => setImmediate(() => limit(req, res, () => undefined)));
      });
    };
    const fastify = async (trustProxy: TrustProxy): Promise<FastifyInstance> => {
      const app = Fastify();
      app.addHook('onRequest', (request, _reply, done) => {
        arrived++;
        request.raw.socket.once('close', () => setImmediate(done));
      });
      app.addHook(
        'onRequest',
        rateLimitHook({
          ...options(trustProxy),
          onLimit: (_request, reply, d) => {
            keys.push(d.key);
            reply.hijack();
          },
        }),
      );
      app.get('/', async () => 'admitted');
      await app.listen({ port: 0, host: '127.0.0.1' });
      return app;
    };
    for (const [trustProxy, expected] of [
      [1, '203.0.113.9'],
      [2, '198.51.100.1'],
      // A trust function judges the peer's address, which is gone.
      [(ip: string) => ip === '127.0.0.1', 'unknown'],
    ] as const) {
      const server = node(trustProxy);
      const app = await fastify(trustProxy);
      try {
        for (const port of [await listen(server), (app.server.address() as AddressInfo).port]) {
          const [before, arrivedBefore] = [keys.length, arrived];
          const socket = await open(port);
          const { closed } = record(socket);
          socket.write(requestLine('GET', '/', 'X-Forwarded-For: 198.51.100.1, 203.0.113.9\r\n'));
          t.true(await eventually(() => arrived > arrivedBefore), 'the request arrived');
          socket.destroy();
          await closed;
          t.true(await eventually(() => keys.length > before), 'the limit ran');
          t.is(keys.at(-1), expected, `trustProxy ${String(trustProxy)}`);
        }
      } finally {
        await Promise.all([close(server), app.close()]);
      }
    }
    await noUnhandled(t);
  },
);
