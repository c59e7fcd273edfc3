/**
 * upstreamLimit's `perClient` cap against a client that opens many slow exchanges (a Slowloris on
 * the upstream's slots): on UpstreamLimit itself, then on real node:http, Express and Fastify
 * servers with raw sockets that never finish, while another client still gets through.
 */
import test, { type ExecutionContext } from 'ava';
import Fastify from 'fastify';
import { connect, type Socket } from 'node:net';
import { upstreamLimit, UpstreamLimit } from '../lib/http/index.js';
import { upstreamLimitHook } from '../lib/http/fastify.js';
import { backend, Inflight } from '../lib/index.js';
import { throwsShape, title } from './helpers.js';
import { close, eventually, get, listen } from './http-client.js';
import { frameworks } from './http-frameworks.js';
import { scratch, unsupported, workers, type Worker } from './shared-workers.js';

test(title('UpstreamLimit caps each client exactly, and a refused client takes no upstream slot'), (t) => {
  for (const counter of ['pairs', 'guards'] as const) {
    const inflight = new Inflight({ seed: 1n });
    // An incr/get-only counter: enter() falls back to acquire(), which must cap clients alike.
    const limit = new UpstreamLimit({
      max: 3,
      perClient: 2,
      inflight: counter === 'pairs' ? inflight : { incr: (k) => inflight.incr(k), get: (k) => inflight.get(k) },
    });
    const a1 = limit.enter('db', 'a');
    const a2 = limit.acquire('db', 'a');
    t.like(a1, { allowed: true, count: 1, clientCount: 1 }, counter);
    t.like(a2, { allowed: true, count: 2, clientCount: 2 }, counter);
    const a3 = limit.enter('db', 'a');
    t.like(a3, { allowed: false, count: 2, clientCount: 3 }, `${counter}: over perClient`);
    a3.release();
    t.is(inflight.get('db'), 2, `${counter}: the refused call was not counted`);
    t.like(limit.enter('cache', 'a'), { allowed: true, clientCount: 1 }, `${counter}: per upstream`);
    const b = limit.enter('db', 'b');
    t.like(b, { allowed: true, count: 3, clientCount: 1 }, counter);
    const b2 = limit.enter('db', 'b');
    t.like(b2, { allowed: false, count: 4, clientCount: 2 }, `${counter}: over max`);
    t.is(limit.clientCount('db', 'b'), 1, `${counter}: refused by max, the client is not counted either`);
    a1.release();
    a1.release();
    t.is(limit.clientCount('db', 'a'), 1, `${counter}: release is idempotent`);
    t.like(limit.enter('db', 'a'), { allowed: true, clientCount: 2 }, counter);
    t.like(limit.enter('db'), { allowed: false, clientCount: 0 }, `${counter}: no client, only max applies`);
    t.deepEqual(limit.decisions(), { allowed: 5, refused: 3 }, counter);
  }
  // Entries with the same concatenation stay apart.
  const limit = new UpstreamLimit({ max: 10, perClient: 1 });
  t.true(limit.enter('ab', 'c').allowed);
  t.true(limit.enter('a', 'bc').allowed);
  t.is(new UpstreamLimit({ max: 1 }).perClient, Infinity);
  t.throws(() => new UpstreamLimit({ max: 1 }).enter('db', 7 as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
  });
  t.throws(() => new UpstreamLimit({ max: 1, perClient: 0 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /perClient/,
  });
  t.throws(() => new UpstreamLimit({ max: 1, perClient: '2' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /perClient/,
  });
  t.throws(() => limit.enter('db', 7 as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /client/,
  });
});

test(title('UpstreamLimit with clientInflight caps a client across every limit that shares the counter'), (t) => {
  for (const kind of ['pairs', 'guards'] as const) {
    // Two limits on one counter, as two processes on one Inflight.openShared segment.
    const shared = new Inflight({ seed: 1n });
    const clientInflight =
      kind === 'pairs' ? shared : { incr: (k: string) => shared.incr(k), get: (k: string) => shared.get(k) };
    const [one, two] = [0, 1].map(() => new UpstreamLimit({ max: 3, perClient: 2, clientInflight }));
    const a1 = one!.enter('db', 'a');
    const a2 = two!.acquire('db', 'a');
    t.like(a1, { allowed: true, count: 1, clientCount: 1 }, kind);
    t.like(a2, { allowed: true, count: 1, clientCount: 2 }, `${kind}: each limit its own upstream count`);
    const a3 = one!.enter('db', 'a');
    t.like(a3, { allowed: false, count: 1, clientCount: 3 }, `${kind}: over perClient across both`);
    t.is(two!.clientCount('db', 'a'), 2, `${kind}: the refused call left the shared count`);
    t.is(one!.inflight.get('db'), 1, `${kind}: and took no upstream slot`);
    // Refused by max: the client's count is given back too.
    const [b1, b2, b3] = [0, 1, 2].map((i) => one!.enter('db', `b${i}`));
    t.like(b3, { allowed: false, count: 4 }, kind);
    t.is(one!.clientCount('db', 'b2'), 0, `${kind}: refused by max, not counted`);
    for (const slot of [a1, a2, a3, b1!, b2!, b3!]) {
      slot.release();
      slot.release();
    }
    t.deepEqual([one!.clientCount('db', 'a'), two!.clientCount('db', 'a')], [0, 0], `${kind}: all given back`);
    one!.close();
    t.is(shared.enter('x'), 1, `${kind}: closing a limit leaves a given counter open`);
  }
  t.throws(() => new UpstreamLimit({ max: 1, clientInflight: new Inflight() }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "clientInflight" option must be given only with "perClient"/,
  });
  t.throws(() => new UpstreamLimit({ max: 1, perClient: 1, clientInflight: {} as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "clientInflight" option must be an Inflight or an object with incr\(\) and get\(\) methods/,
  });
});

test(title('clientInflight refuses no fresh client early while a sketch-wide crowd is in flight'), (t) => {
  // The count is a count-min estimate: a client is refused early only when, in every row, the
  // calls of other clients sharing its counter reach perClient. With n calls in flight on a
  // 4 × 8192 sketch a row's counter holds Poisson(n / 8192) of them: at n = 8192 and perClient 4
  // a fresh client (its own call 1) is refused with P(Poisson(1) >= 4)^4 = 0.019^4 = 1.3e-7, so
  // 10,000 of them all pass but with probability 1.3e-3 over seeds (this seed is fixed: the two
  // backends' sketches are bit-identical, so both pass or both fail).
  const clientInflight = new Inflight({ seed: 0x5eedn });
  const limit = new UpstreamLimit({ max: Number.MAX_SAFE_INTEGER, perClient: 4, clientInflight });
  const crowd = Array.from({ length: 8192 }, (_, i) => limit.enter('db', `crowd-${i}`));
  t.true(crowd.every((slot) => slot.allowed));
  let refused = 0;
  for (let i = 0; i < 10_000; i++) {
    const slot = limit.enter('db', `fresh-${i}`);
    if (!slot.allowed) refused++;
    slot.release();
  }
  t.is(refused, 0);
  crowd.forEach((slot) => slot.release());
  t.is(limit.clientCount('db', 'crowd-0'), 0);
});

/** A raw connection asking for `path` as the client at `ip` (via X-Forwarded-For), never reading to the end. */
function slowClient(port: number, path: string, ip: string): { socket: Socket; answered: Promise<string> } {
  const socket = connect(port, '127.0.0.1');
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: ${ip}\r\n\r\n`);
  const answered = new Promise<string>((resolve) => {
    socket.once('data', (chunk: Buffer) => resolve(chunk.toString('latin1').split('\r\n')[0]!));
    socket.once('close', () => resolve('closed'));
  });
  socket.on('error', () => {});
  return { socket, answered };
}

/**
 * Five slow exchanges from one client, then an answer for another: the slow client holds two
 * slots (its cap), gets 503 for the rest, and gives its slots back when it leaves.
 */
async function slowClientHoldsOnlyItsShare(
  t: ExecutionContext,
  limit: UpstreamLimit,
  port: number,
  arrivals: () => number,
): Promise<void> {
  const slow = Array.from({ length: 5 }, () => slowClient(port, '/hang', '203.0.113.7'));
  t.teardown(() => slow.forEach((c) => c.socket.destroy()));
  t.true(await eventually(() => arrivals() === 2), 'two slow exchanges reached the handler');
  const refusals = await Promise.all(slow.map((c) => Promise.race([c.answered, eventually(() => false, 300)])));
  t.is(refusals.filter((line) => line === 'HTTP/1.1 503 Service Unavailable').length, 3);
  t.is(limit.clientCount('default', '203.0.113.7'), 2);
  t.is(limit.inflight.get('default'), 2);
  const other = await get(port, '/', { 'X-Forwarded-For': '198.51.100.9' });
  t.is(other.status, 200, 'another client still gets a slot');
  slow.forEach((c) => c.socket.destroy());
  t.true(await eventually(() => limit.inflight.get('default') === 0), 'slots come back when the client leaves');
  t.is(limit.clientCount('default', '203.0.113.7'), 0);
}

for (const [name, serve] of Object.entries(frameworks)) {
  test(title(`${name}: perClient keeps one client's slow exchanges from taking every upstream slot`), async (t) => {
    const limit = new UpstreamLimit({ max: 4, perClient: 2 });
    let arrivals = 0;
    const server = serve([upstreamLimit({ limit, trustProxy: 1 })], (req, res) => {
      if (req.url === '/hang') {
        arrivals++;
        return; // a slow exchange: only the client leaving ends it
      }
      res.end('ok');
    });
    const port = await listen(server);
    t.teardown(() => close(server));
    await slowClientHoldsOnlyItsShare(t, limit, port, () => arrivals);
  });
}

test(title('fastify: perClient keeps one client from taking every upstream slot'), async (t) => {
  const limit = new UpstreamLimit({ max: 4, perClient: 2 });
  let arrivals = 0;
  const app = Fastify();
  const hook = upstreamLimitHook({ limit, key: (request) => String(request.headers['x-forwarded-for']) });
  app.get('/hang', { onRequest: hook }, () => {
    arrivals++;
    return new Promise(() => {}); // a slow exchange: only the client leaving ends it
  });
  app.get('/', { onRequest: hook }, async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const { port } = app.server.address() as { port: number };
  await slowClientHoldsOnlyItsShare(t, limit, port, () => arrivals);
});

test(title('perClient needs a client key only when set, and a bad key option fails early'), (t) => {
  t.notThrows(() => upstreamLimit({ max: 1, key: () => 'x' }));
  t.throws(() => upstreamLimit({ max: 1, perClient: 1, key: 'ip' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /key/,
  });
});

/** The client the shared-segment tests below send slow exchanges for. */
const SLOW = '203.0.113.7';

/**
 * Two server processes of one service (node:cluster, PM2), each its own upstreamLimit (max 10,
 * perClient 2) with their per-client counts in the shared in-flight segment `name`; `SLOW`'s count
 * read from that segment here; and the workers still alive (the test may kill one: a worker is
 * killed once, its exit awaited). `undefined` on the fallback, after checking it refuses segments.
 */
async function sharedClientServers(
  t: ExecutionContext,
  name: string,
): Promise<{ servers: Worker[]; alive: Set<Worker>; ports: number[]; slowCount: () => number } | undefined> {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Inflight.openShared(name, { seed: 0x5eedn, dir }), unsupported('Inflight.openShared'));
    return undefined;
  }
  const servers = await workers(2);
  const alive = new Set(servers);
  t.teardown(() => Promise.all([...alive].map((w) => w.kill())));
  const ports = (await Promise.all(
    servers.map((w) => w.send({ op: 'serve-upstream', name, dir, max: 10, perClient: 2 })),
  )) as number[];
  const counts = Inflight.openShared(name, { seed: 0x5eedn, dir });
  t.teardown(() => counts.close());
  const reader = new UpstreamLimit({ max: 1, perClient: 1, clientInflight: counts });
  return { servers, alive, ports, slowCount: () => reader.clientCount('default', SLOW) };
}

test(
  title('clientInflight on a shared segment: one client gets perClient slots across two server processes'),
  async (t) => {
    // Without the shared counts, the client would hold perClient in each process: 4 here.
    const shared = await sharedClientServers(t, 'clients');
    if (shared === undefined) return;
    const { ports, slowCount } = shared;
    const slow = ports.flatMap((port) => Array.from({ length: 3 }, () => slowClient(port, '/hang', SLOW)));
    t.teardown(() => slow.forEach((c) => c.socket.destroy()));
    const answers = await Promise.all(slow.map((c) => Promise.race([c.answered, eventually(() => false, 500)])));
    t.is(answers.filter((line) => line === 'HTTP/1.1 503 Service Unavailable').length, 4, 'two held, the rest refused');
    t.is(slowCount(), 2);
    for (const port of ports) {
      t.is((await get(port, '/', { 'X-Forwarded-For': '198.51.100.9' })).status, 200, 'another client gets through');
    }
    slow.forEach((c) => c.socket.destroy());
    t.true(await eventually(() => slowCount() === 0), 'the client is counted out of the segment when it leaves');
  },
);

test(
  title('clientInflight on a shared segment: a server process killed holding a client’s calls gives them back'),
  async (t) => {
    const shared = await sharedClientServers(t, 'killed');
    if (shared === undefined) return;
    const { servers, alive, ports, slowCount } = shared;
    const [a, b] = ports as [number, number];
    const held = [0, 1].map(() => slowClient(a, '/hang', SLOW));
    t.teardown(() => held.forEach((c) => c.socket.destroy()));
    t.true(await eventually(() => slowCount() === 2), 'A holds the client’s two');
    // SIGKILL: no 'close' listener runs, nothing is released by A itself.
    alive.delete(servers[0]!);
    await servers[0]!.kill();
    t.true(await eventually(() => slowCount() === 0, 5000), 'the dead process’s share leaves the segment');
    const again = [0, 1, 2].map(() => slowClient(b, '/hang', SLOW));
    t.teardown(() => again.forEach((c) => c.socket.destroy()));
    const answers = await Promise.all(again.map((c) => Promise.race([c.answered, eventually(() => false, 500)])));
    t.is(
      answers.filter((line) => line === 'HTTP/1.1 503 Service Unavailable').length,
      1,
      'B admits the client’s two again',
    );
    t.is(slowCount(), 2);
  },
);
