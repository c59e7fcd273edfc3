/**
 * The in-flight adapters against hostile clients, on real node:http, Express and Fastify servers
 * on 127.0.0.1 driven by raw `net` sockets: an upstream slot comes back exactly once on every path
 * an exchange can end by (pipelining clients that leave, half bodies, resets, hijacked replies).
 */
import test, { type ExecutionContext } from 'ava';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Inflight } from '../lib/index.js';
import { upstreamLimit, UpstreamLimit, type Middleware } from '../lib/http/index.js';
import { upstreamLimitHook } from '../lib/http/fastify.js';
import { title } from './helpers.js';
import { close, eventually, get, listen } from './http-client.js';
import { noUnhandled, open, record, requestLine, statuses } from './http-abuse.js';

/**
 * A real `Inflight` that also counts every `enter` and `leave`, so a test sees a slot never given
 * back (`entered > left`) and one given back twice (`left > entered`, or `low < 0` at some point).
 */
class CountingInflight {
  readonly inner = new Inflight();
  entered = 0;
  left = 0;
  /** The lowest `entered − left` ever seen: below 0 means a release without its slot. */
  low = 0;

  incr(key: string): ReturnType<Inflight['incr']> {
    return this.inner.incr(key);
  }

  get(key: string): number {
    return this.inner.get(key);
  }

  enter(key: string): number {
    this.entered++;
    return this.inner.enter(key);
  }

  leave(key: string): void {
    this.left++;
    this.low = Math.min(this.low, this.entered - this.left);
    this.inner.leave(key);
  }
}

/** What each path of the test servers does, the same on every framework. */
type Route = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

const routes: Record<string, Route> = {
  '/ok': (_req, res) => void res.end('ok'),
  '/hang': () => undefined, // never answers: only the connection closing ends it
  '/throw': () => {
    throw new Error('handler threw');
  },
  '/reject': async () => {
    await Promise.resolve();
    throw new Error('handler rejected');
  },
  '/destroy': (_req, res) => void res.destroy(),
  '/empty': (_req, res) => void res.writeHead(204).end(),
  '/cached': (_req, res) => void res.writeHead(304).end(),
  // Reads the whole body before answering; a client that never sends it leaves the handler waiting.
  '/body': (req, res) => {
    req.resume().on('end', () => res.end('read'));
  },
  '/slow-throw': async () => {
    await new Promise((resolve) => setTimeout(resolve, 50));
    throw new Error('handler failed after its client left');
  },
  // A stream that stays open (server-sent events): the responses pipelined behind it stay queued.
  '/events': (_req, res) => void res.writeHead(200, { 'Content-Type': 'text/event-stream' }).write('data: hi\n\n'),
  // Never answers on its own; the README's write deadline destroys it.
  '/deadline': (_req, res) => writeDeadline(res),
  '/held': async (_req, res) => {
    await gate;
    res.end('held');
  },
};

/** The README's write deadline: `res.destroy()` when the response has not finished within 50 ms. */
function writeDeadline(res: ServerResponse): void {
  setTimeout(() => {
    if (!res.writableFinished) res.destroy();
  }, 50);
}

/** What `/held` waits for before it answers, and what opens it. */
let gate: Promise<void> = Promise.resolve();
let openGate: () => void = () => undefined;

/** A server for `routes` behind `upstreamLimit`/`upstreamLimitHook` on one limit. */
interface Served {
  port: number;
  close(): Promise<void>;
}

const frameworks: Record<string, (limit: UpstreamLimit) => Promise<Served>> = {
  'node:http': async (limit) => {
    const guard = upstreamLimit({ limit });
    const server: Server = createServer((req, res) => {
      guard(req, res, () => {
        const route = routes[req.url ?? ''] ?? routes['/ok']!;
        const failed = (): void => {
          if (!res.headersSent) res.writeHead(500);
          res.end();
        };
        try {
          Promise.resolve(route(req, res)).catch(failed);
        } catch {
          failed();
        }
      });
    });
    const port = await listen(server);
    return { port, close: () => close(server) };
  },
  express: async (limit) => {
    const app = express();
    app.use(upstreamLimit({ limit }) as Middleware);
    // Express 5 passes a rejected promise to the error path itself.
    for (const [path, route] of Object.entries(routes)) app.all(path, (req, res) => route(req, res));
    app.all('/next-error', (_req, _res, next) => next(new Error('passed to next')));
    app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(502).end(error.message);
    });
    const server = createServer(app);
    const port = await listen(server);
    return { port, close: () => close(server) };
  },
  fastify: async (limit) => {
    const app: FastifyInstance = Fastify();
    app.addHook('onRequest', upstreamLimitHook({ limit }));
    app.get('/ok', async () => 'ok');
    app.get('/hang', () => new Promise(() => undefined));
    app.get('/throw', () => {
      throw new Error('handler threw');
    });
    app.get('/reject', async () => {
      await Promise.resolve();
      throw new Error('handler rejected');
    });
    app.get('/destroy', (_request, reply) => void reply.raw.destroy());
    app.get('/empty', async (_request, reply) => reply.code(204).send());
    app.get('/cached', async (_request, reply) => reply.code(304).send());
    app.post('/body', async () => 'read'); // Fastify reads the text/plain body before the handler
    app.get('/slow-throw', async () => {
      await new Promise((resolve) => setTimeout(resolve, 50));
      throw new Error('handler failed after its client left');
    });
    // reply.hijack(): Fastify leaves the response to the route, which answers on the raw one.
    app.get('/hijack', (_request, reply) => {
      reply.hijack();
      reply.raw.end('hijacked');
    });
    app.get('/hijack-hang', (_request, reply) => void reply.hijack());
    app.get('/events', (_request, reply) => {
      reply.hijack();
      reply.raw.writeHead(200, { 'Content-Type': 'text/event-stream' }).write('data: hi\n\n');
    });
    app.get('/deadline', (_request, reply) => {
      writeDeadline(reply.raw);
      return new Promise(() => undefined);
    });
    app.get('/held', async () => {
      await gate;
      return 'held';
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    return { port: (app.server.address() as AddressInfo).port, close: () => app.close() };
  },
};

/** Waits until every slot taken is given back once, then asserts that and the counter at 0. */
async function settled(t: ExecutionContext, counter: CountingInflight, what: string): Promise<void> {
  const back = await eventually(() => counter.left >= counter.entered && counter.get('default') === 0, 2000);
  t.true(back, `${what}: every slot given back (entered ${counter.entered}, left ${counter.left})`);
  t.is(counter.left, counter.entered, `${what}: no slot given back twice`);
  t.true(counter.low >= 0, `${what}: the count never went below what was taken`);
}

for (const [name, serve] of Object.entries(frameworks)) {
  test.serial(title(`${name}: every way an exchange can end gives its upstream slot back exactly once`), async (t) => {
    const counter = new CountingInflight();
    const limit = new UpstreamLimit({ max: 1000, inflight: counter });
    const server = await serve(limit);
    t.teardown(() => server.close());
    const { port } = server;

    // Keep-alive answers of every kind on one connection, read to the end: HEAD, 204, 304, a
    // throwing and a rejecting handler, and (Express) the error middleware.
    {
      const socket = await open(port);
      const { text } = record(socket);
      const paths = ['/ok', '/empty', '/cached', '/throw', '/reject', ...(name === 'express' ? ['/next-error'] : [])];
      const expected = name === 'express' ? [200, 200, 204, 304, 502, 502, 502] : [200, 200, 204, 304, 500, 500];
      socket.write(requestLine('HEAD', '/ok') + paths.map((p) => requestLine('GET', p)).join(''));
      t.true(await eventually(() => statuses(text()).length === expected.length), `answers: ${text()}`);
      t.deepEqual(statuses(text()), expected);
      await settled(t, counter, 'answered on one connection');
      socket.destroy();
    }

    // A response the handler destroys.
    {
      const socket = await open(port);
      const { closed } = record(socket);
      socket.write(requestLine('GET', '/destroy'));
      await closed;
      await settled(t, counter, 'res.destroy()');
    }

    // Pipelined on one keep-alive connection: answered, failing and hanging requests, then more
    // queued behind the hanging one, and the client leaves mid-way.
    for (let round = 0; round < 3; round++) {
      const socket = await open(port);
      const { closed } = record(socket);
      const before = counter.entered;
      const pipeline = ['/ok', '/throw', '/empty', '/hang', '/ok', '/reject', '/hang', '/ok', '/cached', '/ok'];
      socket.write(pipeline.map((p) => requestLine('GET', p)).join(''));
      t.true(
        await eventually(() => counter.entered - before === pipeline.length),
        'every pipelined request took a slot',
      );
      socket.destroy();
      await closed;
      await settled(t, counter, `pipelined, left mid-way (round ${round})`);
    }

    // Headers promising a body, then no body or half of it, the client then destroying the
    // connection or half-closing it.
    for (const sent of ['', 'x'.repeat(50)]) {
      for (const leave of ['destroy', 'end'] as const) {
        const socket = await open(port);
        const { closed } = record(socket);
        const before = counter.entered;
        socket.write(requestLine('POST', '/body', 'Content-Type: text/plain\r\nContent-Length: 100\r\n') + sent);
        t.true(await eventually(() => counter.entered > before), 'the request took a slot');
        if (leave === 'destroy') socket.destroy();
        else socket.end();
        await closed;
        await settled(t, counter, `${sent.length} of 100 body bytes, then ${leave}`);
      }
    }

    // A handler that fails after its client left, and one that never answers: the connection goes.
    for (const path of ['/slow-throw', '/hang']) {
      const socket = await open(port);
      const { closed } = record(socket);
      const before = counter.entered;
      socket.write(requestLine('GET', path));
      t.true(await eventually(() => counter.entered > before), `${path} took a slot`);
      socket.destroy();
      await closed;
      await new Promise((resolve) => setTimeout(resolve, 100)); // the failure lands after the close
      await settled(t, counter, `${path}, client gone`);
    }

    if (name === 'fastify') {
      const socket = await open(port);
      const { text, closed } = record(socket);
      socket.write(requestLine('GET', '/hijack') + requestLine('GET', '/hijack-hang'));
      t.true(await eventually(() => text().includes('hijacked')), 'the hijacked reply answered');
      await eventually(() => counter.entered - counter.left === 1);
      socket.destroy();
      await closed;
      await settled(t, counter, 'reply.hijack()');
    }
    await noUnhandled(t);
  });
}

for (const [name, serve] of Object.entries(frameworks)) {
  test.serial(title(`${name}: answers queued behind an open stream give their slots back when answered`), async (t) => {
    // One connection: a first answer that stays open, then pipelined requests whose handlers answer
    // at once. Node sends nothing of theirs, and emits neither their `finish` nor their `close`,
    // before the stream ends; their slots used to stay held until the client left: every slot of
    // the upstream (the stream's and the 3 queued) held by one client, everyone else refused.
    const counter = new CountingInflight();
    const limit = new UpstreamLimit({ max: 4, inflight: counter });
    const server = await serve(limit);
    t.teardown(() => server.close());
    const { port } = server;

    {
      const socket = await open(port);
      // Teardowns run last first: Fastify's close would wait for this connection.
      t.teardown(() => socket.destroy());
      const { text, closed } = record(socket);
      socket.write(['/events', '/ok', '/ok', '/ok'].map((p) => requestLine('GET', p)).join(''));
      t.true(await eventually(() => counter.entered === 4), 'every request took a slot');
      t.true(await eventually(() => counter.get('default') === 1), `held: ${counter.get('default')}, the stream's 1`);
      for (let i = 0; i < 3; i++) t.is((await get(port, '/ok')).status, 200, 'another client is let in');
      t.deepEqual(statuses(text()), [200], 'the answers are still queued behind the stream');
      t.false(socket.destroyed, "the attacker's connection is still open");
      socket.destroy();
      await closed;
      await settled(t, counter, 'the client left after its queued answers gave their slots back');
    }

    // The first answer ends after the queued ones were answered: each of theirs then closes too,
    // and must not give its slot back again.
    {
      gate = new Promise((resolve) => (openGate = resolve));
      const socket = await open(port);
      t.teardown(() => socket.destroy());
      const { text, closed } = record(socket);
      const before = counter.entered;
      socket.write(['/held', '/ok', '/ok', '/ok'].map((p) => requestLine('GET', p)).join(''));
      t.true(await eventually(() => counter.entered - before === 4), 'every request took a slot');
      t.true(await eventually(() => counter.get('default') === 1), `held: ${counter.get('default')}, /held's 1`);
      openGate();
      t.true(await eventually(() => statuses(text()).length === 4), `answers: ${text()}`);
      t.deepEqual(statuses(text()), [200, 200, 200, 200]);
      await settled(t, counter, 'answered, then sent and closed');
      socket.destroy();
      await closed;
      await settled(t, counter, 'answered, sent, then the client left');
    }
    await noUnhandled(t);
  });

  test.serial(title(`${name}: a write deadline frees the slots of answers queued behind an open stream`), async (t) => {
    // `res.destroy()` on a queued response emits no `close` either; the README's write deadline
    // used to free nothing there.
    const counter = new CountingInflight();
    const limit = new UpstreamLimit({ max: 4, inflight: counter });
    const server = await serve(limit);
    t.teardown(() => server.close());
    const { port } = server;

    const socket = await open(port);
    t.teardown(() => socket.destroy()); // before the server's close, which would wait for it
    const { text, closed } = record(socket);
    socket.write(['/events', '/deadline', '/deadline', '/deadline'].map((p) => requestLine('GET', p)).join(''));
    t.true(await eventually(() => counter.entered === 4), 'every request took a slot');
    t.true(await eventually(() => counter.get('default') === 1), `held: ${counter.get('default')}, the stream's 1`);
    t.is((await get(port, '/ok')).status, 200, 'another client is let in');
    t.deepEqual(statuses(text()), [200], 'only the stream answered');
    t.false(socket.destroyed, "the attacker's connection is still open");
    socket.destroy();
    await closed;
    await settled(t, counter, 'destroyed while queued, then the client left');
    await noUnhandled(t);
  });
}
