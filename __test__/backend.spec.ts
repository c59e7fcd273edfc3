import test from 'ava';
import { Worker } from 'node:worker_threads';
import { backend, sleep } from '../lib/index.js';
import { fixture, runFixture, title } from './helpers.js';

const WARNING =
  /^keepcount: native binding unavailable \(.+\); using the TypeScript fallback\. Set KEEPCOUNT_BACKEND=fallback or KEEPCOUNT_SILENCE_FALLBACK=1 to silence this\.$/;

const warnings = (stderr: string) => stderr.split('\n').filter((line) => line.startsWith('keepcount:'));

test(title('runs the backend KEEPCOUNT_BACKEND asks for'), (t) => {
  t.is(backend, process.env.KEEPCOUNT_BACKEND as typeof backend);
});

test(
  title('unset KEEPCOUNT_BACKEND picks native if it loads, else warns once per process, workers included'),
  async (t) => {
    const child = await runFixture('load-backend.ts', {
      env: { KEEPCOUNT_BACKEND: undefined, KEEPCOUNT_SILENCE_FALLBACK: undefined },
    });
    t.is(child.code, 0, child.stderr);
    const { backend: chosen } = JSON.parse(child.stdout) as { backend: string };
    const lines = warnings(child.stderr);
    if (chosen === 'native') {
      t.deepEqual(lines, []);
    } else {
      t.is(chosen, 'fallback');
      t.is(lines.length, 1, child.stderr);
      t.regex(lines[0]!, WARNING);
    }
  },
);

test(title('KEEPCOUNT_SILENCE_FALLBACK=1 and KEEPCOUNT_BACKEND=fallback print nothing'), async (t) => {
  for (const env of [
    { KEEPCOUNT_BACKEND: undefined, KEEPCOUNT_SILENCE_FALLBACK: '1' },
    { KEEPCOUNT_BACKEND: 'fallback', KEEPCOUNT_SILENCE_FALLBACK: undefined },
  ]) {
    const child = await runFixture('load-backend.ts', { env });
    t.is(child.code, 0, child.stderr);
    t.deepEqual(warnings(child.stderr), []);
  }
});

test(title('an unknown KEEPCOUNT_BACKEND is an ERR_KEEPCOUNT_BACKEND error'), async (t) => {
  const child = await runFixture('load-backend.ts', { env: { KEEPCOUNT_BACKEND: 'rust' } });
  t.deepEqual(JSON.parse(child.stdout), {
    code: 'ERR_KEEPCOUNT_BACKEND',
    message: 'KEEPCOUNT_BACKEND must be "native" or "fallback" (or unset). Received "rust"',
  });
});

test(
  title('KEEPCOUNT_BACKEND=native loads native or fails with ERR_KEEPCOUNT_BACKEND, never falls back'),
  async (t) => {
    const child = await runFixture('load-backend.ts', { env: { KEEPCOUNT_BACKEND: 'native' } });
    const result = JSON.parse(child.stdout) as { backend?: string; code?: string; message?: string };
    if (result.backend !== undefined) {
      t.is(result.backend, 'native');
    } else {
      t.is(result.code, 'ERR_KEEPCOUNT_BACKEND');
      t.regex(result.message!, /^KEEPCOUNT_BACKEND=native, but the native binding cannot load: ./);
    }
    t.deepEqual(warnings(child.stderr), []);
  },
);

function runWorker(pending: boolean): Promise<{
  worker: Worker;
  message: { backend: string; count: number; bytes: number; windows: { count: number; resetMs: number }[] };
}> {
  const worker = new Worker(`require('tsx/cjs'); require(${JSON.stringify(fixture('worker.ts'))});`, {
    eval: true,
    workerData: { pending },
  });
  return new Promise((resolve, reject) => {
    worker.once('message', (message) => resolve({ worker, message }));
    worker.once('error', reject);
  });
}

test(title('loads and works in a worker thread'), async (t) => {
  const { worker, message } = await runWorker(false);
  const window = { count: 3, resetMs: 750 };
  t.deepEqual(message, { backend, count: 2, bytes: 28 + 8 * 4 * 8192, windows: [window, window] });
  await worker.terminate();
});

test(title('terminating a worker with pending timeouts does not disturb this thread'), async (t) => {
  const { worker } = await runWorker(true);
  t.is(await worker.terminate(), 1);
  const again = await runWorker(true);
  t.is(await again.worker.terminate(), 1);
  await sleep(20);
  t.pass();
});

test(
  title("keepcount evaluated again in one thread (a module registry reset): every copy's windows read right"),
  async (t) => {
    // The native InWindow paths write the window into an array per load of the addon; an array per
    // copy of the adapter, registered last-wins, left the older copies reading a stale resetMs.
    const child = await runFixture('module-copies.ts');
    t.is(child.code, 0, child.stderr);
    const { copies, backends, resetMs } = JSON.parse(child.stdout) as {
      copies: boolean[];
      backends: string[];
      resetMs: number[];
    };
    t.deepEqual(copies, [true, true, true], 'three copies of the modules');
    t.deepEqual(backends, [backend, backend, backend]);
    t.deepEqual(resetMs, [700, 700, 700, 700, 700, 700], 'a Rate and a HeavyHitters of each copy');
  },
);
