/* global console, process */
// One process loading keepcount both ways, as an ES module application with a CommonJS dependency
// does: both must be one copy. Two copies each registered their own scratch array with the one
// native binding (the last won: the other's window reset times froze), and one copy's Rate was
// refused by the other's WindowQuota.
import { createRequire } from 'node:module';
import * as esm from 'keepcount';
import * as esmHttp from 'keepcount/http';

const require = createRequire(import.meta.url);
const cjs = require('keepcount');
const cjsHttp = require('keepcount/http');

const failures = [];
const check = (ok, what) => ok || failures.push(what);
check(esm.Rate === cjs.Rate && esmHttp.WindowQuota === cjsHttp.WindowQuota, 'the same classes both ways');
const clock = new esm.ManualClock();
const rate = new esm.Rate({ intervalMs: 10_000, seed: 1n, clock });
const quota = new cjsHttp.WindowQuota({ limit: 5, windowMs: 10_000, rate });
clock.advance(1500);
const { resetMs } = quota.consume('k');
check(resetMs === 8500, `resetMs ${resetMs} 1.5 s into a 10 s window (8500)`);
// Imported first, so with two copies the required one registered its scratch array last.
const heavy = new esmHttp.WindowQuota({ limit: 5, windowMs: 10_000, seed: 1n, clock });
clock.advance(2500);
const later = heavy.consume('k').resetMs;
check(later === 7500, `resetMs ${later} 2.5 s into a quota's first window (7500)`);
if (failures.length > 0) {
  console.error(failures.join('\n'));
  process.exit(1);
}
console.log(`dual backend=${esm.backend}`);
