/**
 * The HTTP adapters against careless callers and hostile options: bad callbacks, limits mounted
 * after the headers went out, Fastify refusals, header injection, floods of keys and oversized
 * limits fail through the framework's error path, never by an unhandled rejection or an
 * exception out of the middleware.
 */
import test from 'ava';
import express from 'express';
import Fastify, { type FastifyReply } from 'fastify';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { runInNewContext } from 'node:vm';
import { Limiter } from '../lib/index.js';
import { rateLimit, tokenBucket, upstreamLimit, UpstreamLimit, type Middleware } from '../lib/http/index.js';
import { rateLimitHook, tokenBucketHook, upstreamLimitHook, type OnRequestHook } from '../lib/http/fastify.js';
import { runFixture, title } from './helpers.js';
import { close, eventually, get, listen, parseField } from './http-client.js';
import { noUnhandled, open, record, requestLine } from './http-abuse.js';

/** A failure a test expects, as `t.throws` takes it. */
interface Failure {
  instanceOf: new (...args: never[]) => Error;
  code: string;
  message: string | RegExp;
}

const promised = (name: string, received = 'an instance of Promise'): Failure => ({
  instanceOf: TypeError,
  code: 'ERR_INVALID_ARG_TYPE',
  message: `The "${name}" option's result must be a value, not a promise: it is called synchronously on every request. Received ${received}`,
});

const thrown = (message: string): Failure => ({ instanceOf: Error, code: 'E_TEST', message });

/** An `async` method of an object given as an option, as a store-backed limiter might have. */
const promisedBy = (name: string, method: string): Failure => ({
  instanceOf: TypeError,
  code: 'ERR_INVALID_ARG_TYPE',
  message: `The "${name}" option's ${method}() result must be a value, not a promise: it is called synchronously on every request. Received an instance of Promise`,
});

const fault = (message: string): Error => Object.assign(new Error(message), { code: 'E_TEST' });

/** A thenable whose `then` throws, as a hostile key or callback might return. */
const hostile = (): PromiseLike<string> => ({
  then() {
    throw fault('hostile then');
  },
});

/**
 * Careless options: callbacks that return promises (resolving or rejecting), hostile thenables, an
 * `onLimit` that throws or rejects. Each path's request must fail with `error` and reach no handler.
 */
function carelessCases(limiter: Limiter): Record<string, { node: Middleware; hook: OnRequestHook; error: Failure }> {
  const both = <O extends object>(
    node: (options: O) => Middleware,
    hook: (options: O) => OnRequestHook,
    options: O,
  ): { node: Middleware; hook: OnRequestHook } => ({ node: node(options), hook: hook(options) });
  const rate = { limit: 5, windowMs: 60_000 };
  const refuse = { limit: 0, windowMs: 60_000 };
  const never = { limiter: new Limiter({ bestEffort: { requests: { perSecond: 0, burst: 0 } } }) };
  const full = new UpstreamLimit({ max: 1 });
  full.enter('default');
  /* eslint-disable @typescript-eslint/no-explicit-any -- callers that ignore the types */
  const async =
    (value: unknown): any =>
    () =>
      Promise.resolve(value);
  const rejects =
    (message: string): any =>
    () =>
      Promise.reject(fault(message));
  // A promise made in another realm is no `instanceof Promise` here, and rejects unhandled all the same.
  const rejectsElsewhere =
    (message: string): any =>
    () =>
      runInNewContext('Promise.reject(error)', { error: fault(message) });
  return {
    '/rate-key-async': { ...both(rateLimit, rateLimitHook, { ...rate, key: async('k') }), error: promised('key') },
    '/rate-key-rejects': {
      ...both(rateLimit, rateLimitHook, { ...rate, key: rejects('no key') }),
      error: promised('key'),
    },
    '/rate-key-hostile': {
      ...both(rateLimit, rateLimitHook, { ...rate, key: hostile as any }),
      error: promised('key', 'an instance of Object'),
    },
    '/rate-key-rejects-elsewhere': {
      ...both(rateLimit, rateLimitHook, { ...rate, key: rejectsElsewhere('no key') }),
      error: promised('key'),
    },
    '/rate-skip-async': {
      ...both(rateLimit, rateLimitHook, { ...refuse, skip: async(true) }),
      error: promised('skip'),
    },
    '/bucket-key-rejects': {
      ...both(tokenBucket, tokenBucketHook, { limiter, key: rejects('no key') }),
      error: promised('key'),
    },
    '/bucket-cost-async': {
      ...both(tokenBucket, tokenBucketHook, { limiter, cost: async(1) }),
      error: promised('cost'),
    },
    '/bucket-skip-rejects': {
      ...both(tokenBucket, tokenBucketHook, { limiter, skip: rejects('no skip') }),
      error: promised('skip'),
    },
    '/upstream-rejects': {
      ...both(upstreamLimit, upstreamLimitHook, { max: 5, upstream: rejects('no upstream') }),
      error: promised('upstream'),
    },
    // Objects given as options whose methods are `async` (a limiter backed by a remote store): a
    // rejection ended the process, a resolved promise read as a refusal for every request.
    '/rate-quota-rejects': {
      ...both<any>(rateLimit, rateLimitHook, { quota: { consume: rejects('store down') } }),
      error: promisedBy('quota', 'consume'),
    },
    '/rate-quota-async': {
      ...both<any>(rateLimit, rateLimitHook, { quota: { consume: async({ allowed: true }) }, headers: false }),
      error: promisedBy('quota', 'consume'),
    },
    '/bucket-limiter-rejects': {
      ...both<any>(tokenBucket, tokenBucketHook, { limiter: { check: rejects('store down') } }),
      error: promisedBy('limiter', 'check'),
    },
    '/bucket-limiter-async': {
      ...both<any>(tokenBucket, tokenBucketHook, { limiter: { check: async({ allowed: true }) } }),
      error: promisedBy('limiter', 'check'),
    },
    '/upstream-inflight-rejects': {
      ...both<any>(upstreamLimit, upstreamLimitHook, {
        max: 5,
        inflight: { incr: rejects('store down'), get: () => 0 },
      }),
      error: promisedBy('inflight', 'incr'),
    },
    '/upstream-inflight-enter-rejects': {
      ...both<any>(upstreamLimit, upstreamLimitHook, {
        max: 5,
        inflight: { incr: () => [{ release() {} }, 1], enter: rejects('store down'), leave() {}, get: () => 0 },
      }),
      error: promisedBy('inflight', 'enter'),
    },
    '/upstream-client-rejects': {
      ...both<any>(upstreamLimit, upstreamLimitHook, {
        max: 5,
        perClient: 2,
        clientInflight: { incr: rejects('store down'), get: () => 0 },
      }),
      error: promisedBy('clientInflight', 'incr'),
    },
    '/rate-onlimit-throws': {
      ...both(rateLimit, rateLimitHook, {
        ...refuse,
        onLimit: () => {
          throw fault('onLimit threw');
        },
      }),
      error: thrown('onLimit threw'),
    },
    '/rate-onlimit-rejects': {
      ...both(rateLimit, rateLimitHook, { ...refuse, onLimit: rejects('onLimit rejected') }),
      error: thrown('onLimit rejected'),
    },
    '/rate-onlimit-rejects-elsewhere': {
      ...both(rateLimit, rateLimitHook, { ...refuse, onLimit: rejectsElsewhere('onLimit rejected') }),
      error: thrown('onLimit rejected'),
    },
    '/bucket-onlimit-rejects': {
      ...both(tokenBucket, tokenBucketHook, { ...never, onLimit: rejects('onLimit rejected') }),
      error: thrown('onLimit rejected'),
    },
    '/upstream-onlimit-rejects': {
      ...both(upstreamLimit, upstreamLimitHook, { limit: full, onLimit: rejects('onLimit rejected') }),
      error: thrown('onLimit rejected'),
    },
  };
  /* eslint-enable @typescript-eslint/no-explicit-any */
}

test.serial(
  title('careless callbacks fail the request through the framework error path, never by an unhandled rejection'),
  async (t) => {
    const limiter = new Limiter({ bestEffort: { requests: { perSecond: 100, burst: 100 } } });
    const cases = carelessCases(limiter);
    let admitted = 0;

    // Express: the error reaches the error middleware.
    const expressErrors: unknown[] = [];
    const app = express();
    for (const [path, { node }] of Object.entries(cases))
      app.get(path, node, (_req, res) => void (admitted++, res.end()));
    app.use((error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      expressErrors.push(error);
      res.status(500).end('failed');
    });
    const expressServer = createServer(app);
    // node:http with a `next` that takes no argument: the middleware answers 500 itself.
    const nodeServer = createServer((req, res) => {
      const node = cases[req.url ?? '']?.node;
      if (node === undefined) return void res.writeHead(404).end();
      node(req, res, () => void (admitted++, res.end()));
    });
    // Fastify: the error reaches the error handler.
    const fastifyErrors: unknown[] = [];
    const fastify = Fastify();
    fastify.setErrorHandler(async (error, _request, reply) => {
      fastifyErrors.push(error);
      return reply.code(500).send('failed');
    });
    for (const [path, { hook }] of Object.entries(cases)) {
      fastify.get(path, { onRequest: hook }, async () => (admitted++, 'admitted'));
    }
    await fastify.listen({ port: 0, host: '127.0.0.1' });
    const ports = {
      express: await listen(expressServer),
      'node:http': await listen(nodeServer),
      fastify: (fastify.server.address() as AddressInfo).port,
    };
    t.teardown(async () => {
      await Promise.all([close(expressServer), close(nodeServer), fastify.close()]);
    });

    for (const [path, { error }] of Object.entries(cases)) {
      for (const [name, port] of Object.entries(ports)) {
        const reply = await get(port, path).catch((e: Error) => ({ status: 0, body: e.message }));
        t.is(reply.status, 500, `${name} ${path}: ${reply.body}`);
      }
      for (const errors of [expressErrors, fastifyErrors]) {
        t.throws(
          () => {
            throw errors.shift();
          },
          error,
          path,
        );
      }
      await noUnhandled(t);
    }
    t.is(admitted, 0, 'no failed request reached a handler');
  },
);

test.serial(
  title('a limit mounted after a handler that already sent the headers decides without them, never throws'),
  async (t) => {
    const refuseAll = new Limiter({ bestEffort: { requests: { perSecond: 0, burst: 0 } } });
    const slowRefill = new Limiter({ bestEffort: { requests: { perSecond: 1, burst: 1 } } });
    slowRefill.check('127.0.0.1');
    const full = new UpstreamLimit({ max: 1 });
    full.enter('default');
    const chains: Record<string, { limit: Middleware; admitted: boolean }> = {
      '/rate-allowed': { limit: rateLimit({ limit: 5, windowMs: 60_000 }), admitted: true },
      '/rate-refused': { limit: rateLimit({ limit: 0, windowMs: 60_000 }), admitted: false },
      '/bucket-allowed': { limit: tokenBucket({ limiter: new Limiter({ bestEffort: {} }) }), admitted: true },
      '/bucket-never': { limit: tokenBucket({ limiter: refuseAll }), admitted: false },
      '/bucket-later': { limit: tokenBucket({ limiter: slowRefill }), admitted: false },
      '/upstream-allowed': { limit: upstreamLimit({ max: 5 }), admitted: true },
      '/upstream-refused': { limit: upstreamLimit({ limit: full }), admitted: false },
    };
    let admitted = 0;
    // Sends the status line, the headers and a first chunk, then goes on to the limit.
    const early = (_req: IncomingMessage, res: ServerResponse): void => {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.write('early;');
    };
    const last = (_req: IncomingMessage, res: ServerResponse): void => {
      admitted++;
      res.end('handled');
    };
    const app = express();
    for (const [path, { limit }] of Object.entries(chains)) {
      app.get(path, (req, res, next) => (early(req, res), next()), limit, last);
    }
    const servers = {
      'node:http': createServer((req, res) => {
        const chain = chains[req.url ?? ''];
        if (chain === undefined) return void res.writeHead(404).end();
        early(req, res);
        chain.limit(req, res, () => last(req, res));
      }),
      express: createServer(app),
    };
    for (const [name, server] of Object.entries(servers)) {
      const port = await listen(server);
      t.teardown(() => close(server));
      for (const [path, chain] of Object.entries(chains)) {
        const before = admitted;
        const socket = await open(port);
        const { text, closed } = record(socket);
        socket.write(requestLine('GET', path, 'Connection: close\r\n'));
        await closed;
        // A refusal cannot be told once the headers are out: the connection ends, unflushed
        // writes with it, so the client may see nothing at all.
        if (chain.admitted) t.true(text().startsWith('HTTP/1.1 200 OK\r\n'), `${name} ${path}: ${text()}`);
        t.true(text() === '' || text().startsWith('HTTP/1.1 200 OK\r\n'), `${name} ${path}: ${text()}`);
        t.is(text().includes('handled'), chain.admitted, `${name} ${path}: the handler answered iff admitted`);
        t.is(admitted - before, chain.admitted ? 1 : 0, `${name} ${path}`);
        t.false(/ratelimit|retry-after/i.test(text()), `${name} ${path}: no header after the headers`);
      }
    }
    t.is(full.inflight.get('default'), 1, 'the refused requests took no slot');
    await noUnhandled(t);
  },
);

test.serial(
  title('fastify: a refused request never reaches the route, whether onLimit sends late, never, or the client leaves'),
  async (t) => {
    const refuseAll = new Limiter({ bestEffort: { requests: { perSecond: 0, burst: 0 } } });
    const full = new UpstreamLimit({ max: 1 });
    full.enter('default');
    let admitted = 0;
    let refusals = 0;
    const app = Fastify();
    // Holds every response in onSend until its client is gone (`/leave-*`) or for a moment, as a
    // compression or signing plugin would: `reply.sent` stays false meanwhile.
    const gone = new Set<string>();
    app.addHook('onSend', async (request) => {
      if (request.url.startsWith('/leave-')) {
        gone.add(request.url);
        await new Promise((resolve) => request.raw.socket.once('close', resolve));
      } else {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    });
    const late = (_request: unknown, reply: FastifyReply): void => {
      refusals++;
      void reply.code(429).send('slow down');
    };
    const never = (): void => void refusals++;
    const routes: Record<string, OnRequestHook> = {
      '/rate-late': rateLimitHook({ limit: 0, windowMs: 60_000, onLimit: late }),
      '/bucket-late': tokenBucketHook({ limiter: refuseAll, onLimit: late }),
      '/upstream-late': upstreamLimitHook({ limit: full, onLimit: late }),
      '/rate-never': rateLimitHook({ limit: 0, windowMs: 60_000, onLimit: never }),
      '/bucket-never': tokenBucketHook({ limiter: refuseAll, onLimit: never }),
      '/upstream-never': upstreamLimitHook({ limit: full, onLimit: never }),
      '/leave-rate': rateLimitHook({ limit: 0, windowMs: 60_000 }),
      '/leave-bucket': tokenBucketHook({ limiter: refuseAll }),
      '/leave-upstream': upstreamLimitHook({ limit: full }),
    };
    for (const [path, onRequest] of Object.entries(routes)) {
      app.get(path, { onRequest }, async () => (admitted++, 'admitted'));
    }
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.teardown(() => app.close());
    const port = (app.server.address() as AddressInfo).port;

    for (const path of ['/rate-late', '/bucket-late', '/upstream-late']) {
      const reply = await get(port, path);
      t.is(reply.status, 429, path);
      t.is(reply.body, 'slow down', path);
    }
    for (const path of [
      '/rate-never',
      '/bucket-never',
      '/upstream-never',
      '/leave-rate',
      '/leave-bucket',
      '/leave-upstream',
    ]) {
      const before = refusals;
      const socket = await open(port);
      const { closed } = record(socket);
      socket.write(requestLine('GET', path));
      const leaving = path.startsWith('/leave-');
      t.true(await eventually(() => (leaving ? gone.has(path) : refusals > before)), `${path} was refused`);
      // A route reached would run within a few turns of the event loop; give it 50 ms.
      await new Promise((resolve) => setTimeout(resolve, 50));
      socket.destroy();
      await closed;
      await new Promise((resolve) => setTimeout(resolve, 50));
      t.is(admitted, 0, `${path} never reached the route`);
    }
    t.is(full.inflight.get('default'), 1, 'the refused requests took no slot');
    await noUnhandled(t);
  },
);

test.serial(title('a quota whose policy carries CR LF fails the request; no header is injected'), async (t) => {
  const quota = {
    consume: (key: string) => ({
      allowed: true,
      policy: 'p\r\nSet-Cookie: owned=1',
      limit: 5,
      count: 1,
      remaining: 4,
      resetMs: 1000,
      windowMs: 1000,
      key,
    }),
  };
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, policy: 'p\r\nSet-Cookie: owned=1' }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
  });
  const server = createServer((req, res) => rateLimit({ quota })(req, res, () => res.end('admitted')));
  const app = Fastify();
  app.get('/', { onRequest: rateLimitHook({ quota }) }, async () => 'admitted');
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => Promise.all([close(server), app.close()]).then(() => undefined));
  for (const port of [await listen(server), (app.server.address() as AddressInfo).port]) {
    const reply = await get(port);
    t.is(reply.status, 500);
    t.is(reply.headers['set-cookie'], undefined);
  }
  await noUnhandled(t);
});

test(title('a flood of distinct client keys grows no memory per key in the middleware'), async (t) => {
  t.timeout(120_000);
  const child = await runFixture('key-flood.ts', { nodeArgs: ['--expose-gc'], args: ['100000'] });
  t.is(child.code, 0, child.stderr);
  const { addedBytes, tracked, inflight } = JSON.parse(child.stdout) as {
    addedBytes: number;
    tracked: number[];
    inflight: number;
  };
  t.log(`100,000 new keys added ${(addedBytes / 1e6).toFixed(2)} MB of heap and external memory`);
  // A per-key record of even 20 bytes would add 2 MB; measured: under 0.1 MB on either backend.
  t.true(addedBytes < 2e6, `${addedBytes} bytes`);
  t.deepEqual(tracked, [2000, 2000, 2000], 'every heavy-hitter table full at its capacity, never past it');
  t.is(inflight, 0);
});

test(title('a limit too large for a structured-field integer is sent as the largest one'), async (t) => {
  const server = createServer((req, res) =>
    rateLimit({ limit: Number.MAX_SAFE_INTEGER, windowMs: 2 ** 52 })(req, res, () => res.end('ok')),
  );
  const port = await listen(server);
  t.teardown(() => close(server));
  const reply = await get(port);
  t.is(reply.status, 200);
  // RFC 9651 §3.3.1: at most 15 digits, or a parser rejects the whole field.
  t.deepEqual(parseField(reply.headers['ratelimit-policy']), {
    name: 'default',
    params: { q: 999_999_999_999_999, w: 4_503_599_627_371 },
  });
  t.deepEqual(parseField(reply.headers.ratelimit), {
    name: 'default',
    params: { r: 999_999_999_999_999, t: 4_503_599_627_371 },
  });
});
