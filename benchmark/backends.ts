/**
 * Loads keepcount's public API once per backend in one process, so both are timed side by side:
 * `lib/backend.ts` picks its backend from `KEEPCOUNT_BACKEND` when first evaluated, so the
 * package's modules are evaluated twice, once per setting. The native binding itself is loaded
 * once and shared. Returns only the backends that load.
 *
 * The modules are the built package (`dist/cjs`, what `npm run build` writes and users import),
 * not `lib/` through tsx: tsx compiles with esbuild's `keepNames`, which wraps every function a
 * call creates in a `__name(…)` call (`Object.defineProperty` on the fresh closure), a cost the
 * published code does not have. Run `npm run build` (or `build:ts`) after changing `lib/`.
 */
import { createRequire } from 'node:module';
import { join, sep } from 'node:path';

/** Types from the sources, which the built modules are compiled from. */
export type Api = typeof import('../lib/index.js');
export type HttpApi = typeof import('../lib/http/index.js');
/** What the bench reaches beyond the public API: the backend's ticker, for the N-API call cost. */
export type BackendModule = typeof import('../lib/backend.js');
/** `lib/clock.ts`: the host clock the fallback's cores read, for the cost of one reading. */
export type ClockModule = typeof import('../lib/clock.js');
/** keepcount/redis on this backend (its sketches hash with this backend's `Estimator`). */
export type RedisApi = typeof import('../lib/redis/index.js');

export interface LoadedBackend {
  name: 'native' | 'fallback';
  api: Api;
  /** `keepcount/http` on this backend. */
  http: HttpApi;
  backend: BackendModule;
  clock: ClockModule;
  redis: RedisApi;
  /** `lib/limiter.ts`'s exports once that module exists, else undefined. */
  limiter: Record<string, unknown> | undefined;
}

const built = join(__dirname, '..', 'dist', 'cjs');
const nodeRequire = createRequire(__filename);
const ours = [join(built, 'lib') + sep, join(built, 'fallback') + sep];

function forgetSources(): void {
  for (const id of Object.keys(nodeRequire.cache)) {
    if (ours.some((dir) => id.startsWith(dir))) delete nodeRequire.cache[id];
  }
}

function load(name: 'native' | 'fallback'): LoadedBackend {
  const saved = process.env.KEEPCOUNT_BACKEND;
  process.env.KEEPCOUNT_BACKEND = name;
  try {
    forgetSources();
    const api = nodeRequire(join(built, 'lib/index.js')) as Api;
    const http = nodeRequire(join(built, 'lib/http/index.js')) as HttpApi;
    const backend = nodeRequire(join(built, 'lib/backend.js')) as BackendModule;
    const clock = nodeRequire(join(built, 'lib/clock.js')) as ClockModule;
    const redis = nodeRequire(join(built, 'lib/redis/index.js')) as RedisApi;
    let limiter: Record<string, unknown> | undefined;
    try {
      limiter = nodeRequire(join(built, 'lib/limiter.js')) as Record<string, unknown>;
    } catch (error) {
      if ((error as { code?: string }).code !== 'MODULE_NOT_FOUND') throw error;
    }
    return { name, api, http, backend, clock, redis, limiter };
  } finally {
    if (saved === undefined) delete process.env.KEEPCOUNT_BACKEND;
    else process.env.KEEPCOUNT_BACKEND = saved;
  }
}

/** Every backend that loads here, native first; a native one that cannot load is reported, not fatal. */
export function loadBackends(log: (line: string) => void = () => {}): LoadedBackend[] {
  const loaded: LoadedBackend[] = [];
  try {
    loaded.push(load('native'));
  } catch (error) {
    log(`native backend unavailable: ${(error as Error).message.split('\n', 1)[0]}`);
  }
  loaded.push(load('fallback'));
  return loaded;
}
