/**
 * Loads the backend this process uses: the native adapter (`lib/native.cts`) or the pure-TypeScript
 * `fallback/`, both implementing the {@link Backend} of `lib/core.ts`.
 *
 * Choice: `KEEPCOUNT_BACKEND=native` or `=fallback` forces one; unset, the native backend is used
 * when it loads, else the fallback with one warning line on stderr (`KEEPCOUNT_SILENCE_FALLBACK=1`
 * silences it): once for a thread and the workers it starts after loading keepcount, once more for
 * each worker started before (see {@link WARNED_KEY}).
 *
 * @module
 */
import { types } from 'node:util';
import { getEnvironmentData, setEnvironmentData } from 'node:worker_threads';
import { fallbackBackend } from '../fallback/index.js';
import type { Backend } from './core.js';
import { describe, withCode } from './errors.js';
import { platformPackage } from './binary.js';
import nodeRequire from './require.cjs';

/**
 * The environment data entry holding the fallback warning's printed flag. A worker copies its
 * parent's environment data when it is started, so the workers a thread starts after it loaded
 * keepcount share its flag and stay silent; a worker started before, or by a thread that never
 * loads keepcount (a pool whose workers alone use it), makes a flag and prints a line of its own.
 * Nothing else JavaScript can reach is shared by every thread of a process.
 */
const WARNED_KEY = 'keepcount:fallback-warned';

function warnFallback(reason: unknown): void {
  if (process.env.KEEPCOUNT_SILENCE_FALLBACK === '1') return;
  let flag = getEnvironmentData(WARNED_KEY) as Int32Array | undefined;
  // isInt32Array, not instanceof: a flag made in another realm (jest runs each test file in its own
  // `vm` context) is an Int32Array of another global, and each file then printed the line again.
  if (!types.isInt32Array(flag)) {
    flag = new Int32Array(new SharedArrayBuffer(4));
    setEnvironmentData(WARNED_KEY, flag);
  }
  if (Atomics.compareExchange(flag, 0, 0, 1) !== 0) return;
  process.stderr.write(
    `keepcount: native binding unavailable (${describeLoadError(reason)}); using the TypeScript fallback. ` +
      'Set KEEPCOUNT_BACKEND=fallback or KEEPCOUNT_SILENCE_FALLBACK=1 to silence this.\n',
  );
}

function loadNative(): Backend {
  // The adapter module exports `backend: Backend` and throws when the binding cannot load.
  return (nodeRequire('./native.cjs') as { backend: Backend }).backend;
}

/** Picks the backend per `KEEPCOUNT_BACKEND` (see the module documentation). */
export function loadBackend(): Backend {
  const wanted = process.env.KEEPCOUNT_BACKEND ?? '';
  switch (wanted) {
    case 'fallback':
      return fallbackBackend;
    case 'native':
      try {
        return loadNative();
      } catch (cause) {
        throw withCode(
          new Error(`KEEPCOUNT_BACKEND=native, but the native binding cannot load: ${describeLoadError(cause)}`, {
            cause,
          }),
          'ERR_KEEPCOUNT_BACKEND',
        );
      }
    case '':
      try {
        return loadNative();
      } catch (cause) {
        warnFallback(cause);
        return fallbackBackend;
      }
    default:
      throw withCode(
        new Error(`KEEPCOUNT_BACKEND must be "native" or "fallback" (or unset). Received "${wanted}"`),
        'ERR_KEEPCOUNT_BACKEND',
      );
  }
}

/**
 * One line saying why the binding did not load. napi's loader reports any failure to load the
 * binary as "Cannot find native binding", with advice about an npm lockfile bug and the attempts'
 * messages as a `cause` chain. Say instead which case it is: the platform package is missing (on a
 * platform we publish no binary for, or installed with `--omit=optional`), or it is installed but
 * its binary failed to load (a corrupt file, a too old glibc), with that failure's message.
 *
 * @param installed Whether the platform package resolves; a parameter so tests can say.
 * @internal
 */
export function describeLoadError(cause: unknown, installed = platformPackageInstalled): string {
  if (!(cause instanceof Error)) return describe(cause);
  if (cause.message.startsWith("Cannot find module './native.cjs'")) {
    // keepcount's own adapter is missing beside this file: a bundler inlined keepcount.
    return (
      "keepcount's own files are not beside the code that loads it (bundled? leave keepcount external, " +
      'e.g. esbuild --external:keepcount or --packages=external)'
    );
  }
  if (cause.message.startsWith('Cannot find native binding')) {
    const failure = loadFailure(cause, installed);
    return failure === undefined
      ? `no prebuilt binary for ${process.platform}-${process.arch}: the optional package ${platformPackage()} is not installed`
      : `the optional package ${platformPackage()} is installed but failed to load: ${failure}`;
  }
  return firstLine(cause);
}

/**
 * The message of the attempt that found the binary but could not load it, if there was one: an
 * error with code `ERR_DLOPEN_FAILED` in the chain, or, as napi's loader rebuilds the chain without
 * codes, the first one that is not a "Cannot find module" of another candidate (a local build, a
 * WASI package) when the platform package resolves. Undefined when nothing was found to load.
 */
function loadFailure(cause: Error, installed: () => boolean): string | undefined {
  const chain: Error[] = [];
  for (let e: unknown = cause.cause; e instanceof Error && !chain.includes(e); e = e.cause) chain.push(e);
  const dlopen = chain.find((e) => (e as { code?: unknown }).code === 'ERR_DLOPEN_FAILED');
  if (dlopen !== undefined) return firstLine(dlopen);
  if (!installed()) return undefined;
  const failed = chain.find((e) => !e.message.startsWith('Cannot find module'));
  return failed === undefined ? 'no reason given' : firstLine(failed);
}

function firstLine(error: Error): string {
  return error.message.split('\n', 1)[0] ?? '';
}

/** Whether the platform package resolves from here, as it does from the generated loader. */
function platformPackageInstalled(): boolean {
  try {
    nodeRequire.resolve(platformPackage());
    return true;
  } catch {
    return false;
  }
}

/** The backend this process uses, chosen when keepcount is first imported. */
export const active: Backend = loadBackend();
