// express-rate-limit's and @fastify/rate-limit's keepcount stores counting in a given Rate: in real
// processes sharing one (Rate.openShared), one limit holds for all of them; in one process, the
// option is checked. On the fallback backend the shared Rate is refused (ERR_KEEPCOUNT_UNSUPPORTED)
// and the option checks hold the same with a process-local Rate.
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import test from 'ava';
import express from 'express';
import { rateLimit as expressRateLimit } from 'express-rate-limit';
import { createServer } from 'node:http';
import { backend, Rate } from '../lib/index.js';
import { keepcountFastifyStore, KeepcountStore } from '../lib/http/index.js';
import { RedisSync, SyncedRate } from '../lib/redis/index.js';
import type { ResetRaceData } from './fixtures/reset-race-worker.js';
import { fixture, throwsShape, title } from './helpers.js';
import { close, get, listen } from './http-client.js';

interface Ports {
  express: number;
  fastify: number;
}

/** A forked fixtures/shared-store-server.ts process and its ports; it stops when disconnected. */
async function server(dir: string, limit: number): Promise<{ ports: Ports; stop: () => Promise<void> }> {
  const child = fork(fixture('shared-store-server.ts'), [dir, String(limit)], {
    execArgv: ['--import', 'tsx'],
    stdio: 'inherit',
  });
  const ports = await new Promise<Ports>((resolve, reject) => {
    child.once('message', (message) => resolve(message as Ports));
    child.once('exit', (code) => reject(new Error(`shared-store-server exited with ${code}`)));
  });
  const stop = async () => {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.disconnect();
    await exited;
  };
  return { ports, stop };
}

test(title('both stores on shared Rates hold one limit for two processes together'), async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'keepcount-stores-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  if (backend === 'fallback') {
    throwsShape(t, () => Rate.openShared('express', { intervalMs: 60_000, seed: 1n, dir }), {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_UNSUPPORTED',
      message: /^Rate\.openShared needs the native backend/,
    });
    return;
  }
  const limit = 10;
  const servers = await Promise.all([server(dir, limit), server(dir, limit)]);
  t.teardown(() => Promise.all(servers.map((s) => s.stop())));

  for (const app of ['express', 'fastify'] as const) {
    // 16 requests of one client, alternating between the processes: per-process stores would
    // admit all 16 (8 each, under 10); the shared count admits exactly 10 (one key alone in the
    // sketch reads exactly), then refuses on both.
    const statuses: number[] = [];
    for (let i = 0; i < 16; i++) {
      statuses.push((await get(servers[i % 2]!.ports[app], '/', { 'x-client': 'one' })).status);
    }
    t.deepEqual(statuses, [...Array<number>(limit).fill(200), ...Array<number>(6).fill(429)], app);
  }
});

test(title('KeepcountStore with a rate: its window must match, heavy hitters stay off, resetAll is refused'), (t) => {
  const rate = new Rate({ intervalMs: 1000 });
  const store = new KeepcountStore({ rate });
  throwsShape(t, () => store.init({ windowMs: 2000, limit: 5 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "rate" option must be a Rate whose intervalMs is the windowMs (2000). Received 1000',
  });
  store.init({ windowMs: 1000, limit: 5 });
  t.is(store.increment('a').totalHits, 1);
  t.is(
    rate.rateWith('a', (c) => c.currSamples),
    1,
    'counted in the given rate',
  );
  store.decrement('a');
  t.is(store.get('a').totalHits, 0);
  throwsShape(t, () => store.resetAll(), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_UNSUPPORTED',
    message: 'KeepcountStore cannot reset a Rate it was given: unlink a shared Rate before its processes start',
  });
  throwsShape(t, () => new KeepcountStore({ rate, heavyHitters: true }).init({ windowMs: 1000, limit: 5 }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "heavyHitters" option must be false or absent with "rate"/,
  });
  throwsShape(t, () => new KeepcountStore({ rate: 'shared' as never }).init({ windowMs: 1000 }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "rate" option must be a Rate/,
  });
});

test(
  title('KeepcountStores in one given rate: prefixes keep two limiters apart, one prefix is a reported double count'),
  async (t) => {
    // Stores counting in one rate are not local: express-rate-limit must compare them by prefix
    // (localKeys false), or two limiters counting one request twice under one key go unreported.
    const logged: unknown[] = [];
    const consoleError = console.error;
    console.error = (...args: unknown[]) => void logged.push(...args);
    t.teardown(() => {
      console.error = consoleError;
    });
    const rate = new Rate({ intervalMs: 60_000 });
    const limiter = (prefix: string) =>
      expressRateLimit({ windowMs: 60_000, limit: 3, store: new KeepcountStore({ rate, prefix }) });
    const app = express();
    app.use('/apart', limiter('a:'), limiter('b:'));
    app.use('/together', limiter('c:'), limiter('c:'));
    app.get('/{*path}', (_req, res) => res.send('ok'));
    const server = createServer(app);
    const port = await listen(server);
    t.teardown(() => close(server));
    const statuses = async (path: string) => {
      const seen = [];
      for (let i = 0; i < 4; i++) seen.push((await get(port, path)).status);
      return seen;
    };
    t.deepEqual(await statuses('/apart'), [200, 200, 200, 429], 'each limiter counts each request once');
    t.false(
      logged.some((entry) => (entry as { code?: string }).code === 'ERR_ERL_DOUBLE_COUNT'),
      'no double count',
    );
    t.deepEqual(await statuses('/together'), [200, 429, 429, 429], 'one key counted twice a request');
    t.true(
      logged.some((entry) => (entry as { code?: string }).code === 'ERR_ERL_DOUBLE_COUNT'),
      'express-rate-limit reports it',
    );
    t.true(new KeepcountStore().localKeys, 'a store counting in its own sketch is local');
    t.false(new KeepcountStore({ rate }).localKeys);
    throwsShape(t, () => new KeepcountStore({ prefix: 1 as never }), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: 'The "prefix" option must be of type string. Received 1',
    });
  },
);

test(
  title('keepcountFastifyStore() refuses a rate that is not a Rate, or heavy hitters beside one, where given'),
  (t) => {
    // A keepcount/redis SyncedRate is a likely mistake for counting fleet-wide; the store counts in a
    // Rate only. Before, the store was made and every request failed in it.
    const sync = new RedisSync({
      sendCommand: async () => {
        throw new Error('unreachable');
      },
      syncMs: 3_600_000,
    });
    sync.on('error', () => {});
    t.teardown(() => sync.close());
    const synced = new SyncedRate({ sync, name: 'fleet', seed: 7, intervalMs: 60_000 });
    throwsShape(t, () => keepcountFastifyStore({ rate: synced as never }), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: 'The "rate" option must be a Rate. Received an instance of SyncedRate',
    });
    throwsShape(t, () => keepcountFastifyStore({ rate: 'shared' as never }), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "rate" option must be a Rate/,
    });
    const rate = new Rate({ intervalMs: 1000 });
    for (const heavyHitters of [true, { threshold: 1 }]) {
      throwsShape(t, () => keepcountFastifyStore({ rate, heavyHitters }), {
        instanceOf: TypeError,
        code: 'ERR_INVALID_ARG_TYPE',
        message: /^The "heavyHitters" option must be false or absent with "rate"/,
      });
    }
    t.notThrows(() => keepcountFastifyStore({ rate, heavyHitters: false }));
  },
);

test(title('the Fastify store with a rate counts there and reports another timeWindow to the plugin'), (t) => {
  const rate = new Rate({ intervalMs: 1000 });
  const Store = keepcountFastifyStore({ rate });
  const store = new Store({});
  const results: unknown[] = [];
  store.incr('a', (error, result) => results.push(error ?? result?.current), 1000, 5);
  store.incr('a', (error, result) => results.push(error ?? result?.current), 1000, 5);
  store.child({}).incr('a', (error, result) => results.push(error ?? result?.current), 1000, 5);
  t.deepEqual(results, [1, 2, 3], 'routes share the given rate');
  store.incr('a', (error) => results.push(error), 5000, 5);
  const error = results[3] as Error & { code?: string };
  t.true(error instanceof RangeError);
  t.is(error.code, 'ERR_OUT_OF_RANGE');
  t.regex(error.message, /^The "rate" option must be a Rate whose intervalMs is the windowMs \(5000\)/);
});

test(title('two threads resetting one key of a shared rate at once never take its count below zero'), async (t) => {
  // resetKey read the count and then subtracted it: two resets at once subtracted it twice, so
  // the key read −50 (in ~15% of rounds) and had 50 requests of extra quota, and express-rate-limit
  // saw totalHits <= 0. A refund stops each counter at zero, on either backend.
  const windowMs = 600_000;
  const buffer = Rate.createSharedBuffer({ intervalMs: windowMs, seed: 7n });
  const flag = new SharedArrayBuffer(4);
  const round = new Int32Array(flag);
  const store = new KeepcountStore({ rate: Rate.fromSharedBuffer(buffer) });
  store.init({ windowMs, limit: 100 });
  const data: ResetRaceData = { buffer, flag, windowMs };
  const workers = [0, 1].map(
    () =>
      new Worker(`require('tsx/cjs'); require(${JSON.stringify(fixture('reset-race-worker.ts'))});`, {
        eval: true,
        workerData: data,
        env: { ...process.env, KEEPCOUNT_BACKEND: backend },
      }),
  );
  t.teardown(async () => {
    Atomics.store(round, 0, -1);
    await Promise.all(workers.map((worker) => worker.terminate()));
  });
  const next = () => Promise.all(workers.map((worker) => new Promise((resolve) => worker.once('message', resolve))));
  await next();
  const after: number[] = [];
  // 200 rounds: with the old read-then-subtract, P(no round below zero) = 0.85^200, about 10^-14.
  for (let i = 1; i <= 200; i++) {
    let hits = 0;
    for (let j = 0; j < 50; j++) hits = store.increment('k').totalHits;
    t.is(hits, 50, `round ${i}: counted from zero`);
    const reset = next();
    Atomics.store(round, 0, i);
    await reset;
    after.push(store.get('k').totalHits);
  }
  t.deepEqual(after, Array<number>(200).fill(0));
});
