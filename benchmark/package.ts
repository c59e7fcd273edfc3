/**
 * keepcount as users get it: the built package (`dist/cjs`, written by `npm run build`), typed
 * from the sources it is compiled from. Not `lib/` through tsx, whose esbuild `keepNames` wraps
 * every closure a call creates in a `__name(…)` call the published code does not have (see
 * `backends.ts`, which loads the same modules once per backend).
 */
import { createRequire } from 'node:module';

const load = createRequire(__filename);

export const keepcount = load('../dist/cjs/lib/index.js') as typeof import('../lib/index.js');
export const keepcountHttp = load('../dist/cjs/lib/http/index.js') as typeof import('../lib/http/index.js');
export const keepcountRedis = load('../dist/cjs/lib/redis/index.js') as typeof import('../lib/redis/index.js');
