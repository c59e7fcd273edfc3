/**
 * Loads the backend this process uses: the native adapter (`lib/native.cts`) or the pure-TypeScript
 * `fallback/`, both implementing the {@link Backend} of `lib/core.ts`.
 *
 * Choice: `KEEPCOUNT_BACKEND=native` or `=fallback` forces one; unset, the native backend is used
 * when it loads, else the fallback with one warning line on stderr per process
 * (`KEEPCOUNT_SILENCE_FALLBACK=1` silences it).
 *
 * @module
 */
import { getEnvironmentData, setEnvironmentData } from 'node:worker_threads';
import { fallbackBackend } from '../fallback/index.js';
import type { Backend } from './core.js';
import { describe, withCode } from './errors.js';
import nodeRequire from './require.cjs';

/** Shared with worker threads through environment data so the fallback warning prints once. */
const WARNED_KEY = 'keepcount:fallback-warned';

function warnFallback(reason: unknown): void {
  if (process.env.KEEPCOUNT_SILENCE_FALLBACK === '1') return;
  let flag = getEnvironmentData(WARNED_KEY) as Int32Array | undefined;
  if (!(flag instanceof Int32Array)) {
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
 * One line saying why the binding did not load. napi's loader reports a missing binary with advice
 * about an npm lockfile bug, which misleads on a platform we publish no binary for; name the
 * platform and the package that would have carried its binary instead.
 */
function describeLoadError(cause: unknown): string {
  if (!(cause instanceof Error)) return describe(cause);
  if (cause.message.startsWith('Cannot find native binding')) {
    return `no prebuilt binary for ${process.platform}-${process.arch}: the optional package ${platformPackage()} is not installed`;
  }
  return cause.message.split('\n', 1)[0] ?? '';
}

/** The name of the platform package napi's loader looks for on this machine. */
function platformPackage(): string {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
    return `keepcount-linux-${arch}-${report?.header?.glibcVersionRuntime === undefined ? 'musl' : 'gnu'}`;
  }
  if (platform === 'win32') return `keepcount-win32-${arch}-msvc`;
  return `keepcount-${platform}-${arch}`;
}

/** The backend this process uses, chosen when keepcount is first imported. */
export const active: Backend = loadBackend();
