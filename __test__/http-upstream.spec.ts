/**
 * upstreamLimit and withDeadline on real HTTP servers (plain node:http and Express) with a real
 * client: 503 above the in-flight threshold, every slot given back (finish, error, abort, a
 * pipelining client that leaves, a connection that died first), and 504 on a slow upstream call.
 */
import test from 'ava';
import { createServer } from 'node:http';
import { sleep } from '../lib/index.js';
import { isDeadlineError, upstreamLimit, UpstreamLimit, withDeadline, type Middleware } from '../lib/http/index.js';
import { rejectsShape, title } from './helpers.js';
import { abortAfter, close, deferred, eventually, get, listen, pipelineAndLeave } from './http-client.js';
import { frameworks } from './http-frameworks.js';

for (const [name, serve] of Object.entries(frameworks)) {
  test(
    title(`${name}: answers 503 above the in-flight threshold and releases on finish, error and client abort`),
    async (t) => {
      const limit = new UpstreamLimit({ max: 2 });
      const gate = deferred();
      let arrivals = 0;
      const arrived = [deferred(), deferred()];
      const server = serve([upstreamLimit({ limit, upstream: () => 'origin' })], async (req, res) => {
        arrivals++;
        arrived[arrivals - 1]?.resolve();
        if (req.url === '/fail') throw new Error('upstream failed');
        if (req.url === '/hang') return; // never answers: only the client's abort ends it
        await gate.promise;
        res.end('ok');
      });
      const port = await listen(server);
      t.teardown(() => close(server));

      const slow = [get(port, '/slow'), get(port, '/slow')];
      await Promise.all(arrived.map((d) => d.promise));
      t.is(limit.inflight.get('origin'), 2);
      const over = await get(port, '/slow');
      t.is(over.status, 503);
      t.is(over.headers['retry-after'], '1');
      t.is(limit.inflight.get('origin'), 2, 'a refused request holds no slot');
      gate.resolve();
      t.deepEqual(
        (await Promise.all(slow)).map((r) => r.status),
        [200, 200],
      );
      t.true(await eventually(() => limit.inflight.get('origin') === 0), 'finished requests release');

      t.is((await get(port, '/fail')).status, 500);
      t.true(await eventually(() => limit.inflight.get('origin') === 0), 'failed requests release');

      for (let round = 0; round < 3; round++) {
        const here = [deferred(), deferred()];
        const before = arrivals;
        const watch = setInterval(() => {
          if (arrivals >= before + 1) here[0]!.resolve();
          if (arrivals >= before + 2) here[1]!.resolve();
        }, 2);
        await Promise.all([abortAfter(port, '/hang', here[0]!.promise), abortAfter(port, '/hang', here[1]!.promise)]);
        clearInterval(watch);
        t.true(await eventually(() => limit.inflight.get('origin') === 0), `aborted requests release (round ${round})`);
      }
      t.is((await get(port, '/fail')).status, 500, 'slots are free again: no 503');
    },
  );

  test(title(`${name}: a pipelining client that leaves gives back every slot it took`), async (t) => {
    const limit = new UpstreamLimit({ max: 20 });
    let arrivals = 0;
    let all = deferred();
    const server = serve([upstreamLimit({ limit })], (req, res) => {
      if (req.url === '/hang') {
        if (++arrivals === 20) all.resolve();
        return; // never answers: only the client leaving ends these
      }
      res.end('ok');
    });
    const port = await listen(server);
    t.teardown(() => close(server));

    for (let burst = 0; burst < 2; burst++) {
      arrivals = 0;
      all = deferred();
      const leaving = pipelineAndLeave(port, '/hang', 20, all.promise);
      await all.promise;
      t.is(limit.inflight.get('default'), 20, 'every pipelined request took a slot');
      await leaving;
      const left = performance.now();
      t.true(await eventually(() => limit.inflight.get('default') === 0, 1000), `burst ${burst}: all released`);
      t.log(`burst ${burst}: in-flight back to 0 ${(performance.now() - left).toFixed(1)} ms after the client left`);
    }
    const legit = await Promise.all(Array.from({ length: 5 }, () => get(port, '/')));
    t.deepEqual(
      legit.map((r) => r.status),
      [200, 200, 200, 200, 200],
    );
  });

  test(title(`${name}: a request that reaches upstreamLimit after its connection died holds no slot`), async (t) => {
    const limit = new UpstreamLimit({ max: 20 });
    let waiting = 0;
    const all = deferred();
    // Holds each request until its connection is gone, as a slow middleware before the limit would.
    const untilGone: Middleware = (req, _res, next) => {
      if (++waiting === 5) all.resolve();
      req.socket.once('close', () => setImmediate(next));
    };
    let reached = 0;
    const server = serve([untilGone, upstreamLimit({ limit })], (_req, res) => {
      reached++;
      res.end('ok');
    });
    const port = await listen(server);
    t.teardown(() => close(server));
    await pipelineAndLeave(port, '/', 5, all.promise);
    t.true(await eventually(() => reached === 5, 1000), 'every request went on after its connection died');
    t.is(limit.inflight.get('default'), 0);
  });

  test(title(`${name}: a deadline on the upstream call answers 504 when it is slow`), async (t) => {
    // Margins wide enough for a loaded machine (the suite runs specs side by side): the fast path
    // gets 2 s to answer, the slow upstream would take 4 s, and the 100 ms deadline ends it.
    const upstream = createServer((req, res) => {
      const delay = req.url === '/slow' ? 4000 : 0;
      const timer = setTimeout(() => res.end('upstream'), delay);
      res.on('close', () => clearTimeout(timer));
    });
    const upstreamPort = await listen(upstream);
    t.teardown(() => close(upstream));
    const server = serve([], async (req, res) => {
      try {
        const reply = await withDeadline(req.url === '/slow' ? 100 : 2000, (signal) =>
          fetch(`http://127.0.0.1:${upstreamPort}${req.url}`, { signal }),
        );
        res.end(await reply.text());
      } catch (error) {
        res.statusCode = isDeadlineError(error) ? 504 : 502;
        res.end();
      }
    });
    const port = await listen(server);
    t.teardown(() => close(server));

    const fast = await get(port, '/fast');
    t.is(fast.status, 200);
    t.is(fast.body, 'upstream');
    const started = performance.now();
    t.is((await get(port, '/slow')).status, 504);
    t.true(performance.now() - started < 3000, 'the deadline, not the upstream, ended it');
  });
}

test(title('withDeadline rejects with TimeoutError even when the call ignores the signal'), async (t) => {
  const error = await t.throwsAsync(withDeadline(20, () => sleep(2000)));
  t.is((error as Error & { code?: string }).code, 'ERR_KEEPCOUNT_TIMEOUT');
  t.true(isDeadlineError(error));
  t.false(isDeadlineError(new Error('refused')));
  t.is(await withDeadline(1000, async (signal) => signal.aborted), false);
});

test(
  title('withDeadline rejects, never throws, for a bad call, options, signal option or one whose getter throws'),
  async (t) => {
    /** The promise withDeadline returns, asserting that it returned one rather than throwing. */
    const called = (options: { signal?: AbortSignal }): Promise<unknown> => {
      let returned: Promise<unknown> = Promise.resolve();
      t.notThrows(() => {
        returned = withDeadline(1000, async () => 'called', options);
      });
      return returned;
    };
    await rejectsShape(t, called({ signal: 'abort' as unknown as AbortSignal }), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: 'The "signal" option must be an AbortSignal. Received type string ("abort")',
    });
    const getterError = new Error('no signal');
    const throwing = {
      get signal(): AbortSignal {
        throw getterError;
      },
    };
    t.is(await t.throwsAsync(called(throwing)), getterError);
    // A call that is no function, options that are no object: refused as every other argument.
    for (const call of [5, undefined, 'fetch']) {
      const returned = withDeadline(1000, call as never);
      await rejectsShape(t, returned, {
        instanceOf: TypeError,
        code: 'ERR_INVALID_ARG_TYPE',
        message: /^The "call" argument must be of type function/,
      });
    }
    for (const options of [5, null, 'signal']) {
      await rejectsShape(
        t,
        withDeadline(1000, async () => 'called', options as never),
        {
          instanceOf: TypeError,
          code: 'ERR_INVALID_ARG_TYPE',
          message: /^The "options" argument must be of type object/,
        },
      );
    }
  },
);
