import test from 'ava';
import { Worker } from 'node:worker_threads';
import { describeLoadError } from '../lib/backend.js';
import { backend, sleep } from '../lib/index.js';
import { fixture, runFixture, title } from './helpers.js';

const WARNING =
  /^keepcount: native binding unavailable \(.+\); using the TypeScript fallback\. Set KEEPCOUNT_BACKEND=fallback or KEEPCOUNT_SILENCE_FALLBACK=1 to silence this\.$/;

const warnings = (stderr: string) => stderr.split('\n').filter((line) => line.startsWith('keepcount:'));

test(title('runs the backend KEEPCOUNT_BACKEND asks for'), (t) => {
  t.is(backend, process.env.KEEPCOUNT_BACKEND as typeof backend);
});

test(
  title('unset KEEPCOUNT_BACKEND picks native if it loads, else warns once, workers started after included'),
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

/**
 * What napi's generated loader throws when no candidate loads: its attempts' messages (in order: a
 * local build, the platform package, the WASI package and loader) rebuilt as a `cause` chain, the
 * last attempt outermost, without their codes.
 */
function napiLoadError(attempts: string[]): Error {
  const error = new Error('Cannot find native binding. npm has a bug related to optional dependencies (…).');
  error.cause = attempts.reduce<Error | null>((previous, message) => {
    const attempt = new Error(message);
    attempt.cause = previous;
    return attempt;
  }, null);
  return error;
}

const DLOPEN = '/app/node_modules/keepcount-linux-x64-gnu/keepcount.linux-x64-gnu.node: file too short';
const missing = (name: string) =>
  `Cannot find module '${name}'\nRequire stack:\n- /app/node_modules/keepcount/binding.js`;
const INSTALLED = /^the optional package keepcount-[a-z0-9-]+ is installed but failed to load: /;

test(title('a platform package that is not installed is named as not installed'), (t) => {
  const error = napiLoadError([
    missing('./keepcount.linux-x64-gnu.node'),
    missing('keepcount-linux-x64-gnu'),
    missing('keepcount-wasm32-wasi'),
  ]);
  t.regex(
    describeLoadError(error, () => false),
    /^no prebuilt binary for [a-z0-9]+-[a-z0-9]+: the optional package keepcount-[a-z0-9-]+ is not installed$/,
  );
});

test(title('an installed platform package whose binary fails to load says so, with the reason'), (t) => {
  const error = napiLoadError([missing('./keepcount.linux-x64-gnu.node'), DLOPEN, missing('keepcount-wasm32-wasi')]);
  const described = describeLoadError(error, () => true);
  t.regex(described, INSTALLED);
  t.true(described.endsWith(`: ${DLOPEN}`), described);
});

test(title('an ERR_DLOPEN_FAILED anywhere in the cause chain is a binary that failed to load'), (t) => {
  const dlopen = Object.assign(new Error(`${DLOPEN}\nmore`), { code: 'ERR_DLOPEN_FAILED' });
  const error = new Error('Cannot find native binding.', { cause: new Error('outer', { cause: dlopen }) });
  const described = describeLoadError(error, () => false);
  t.regex(described, INSTALLED);
  t.true(described.endsWith(`: ${DLOPEN}`), described);
});

test(title('any other load error is described by its first line'), (t) => {
  t.is(
    describeLoadError(new Error('Native binding package version mismatch\nsecond line')),
    'Native binding package version mismatch',
  );
});

test(title('a bundle that inlined keepcount, leaving its own adapter behind, is told to keep it external'), (t) => {
  const bundled = Object.assign(new Error(missing('./native.cjs').replace('binding.js', 'dist/server.js')), {
    code: 'MODULE_NOT_FOUND',
  });
  t.regex(describeLoadError(bundled), /^keepcount's own files are not beside .* --external:keepcount/);
});

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
