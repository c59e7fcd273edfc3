// TypeScript consumer, ES module: type-checked against keepcount's "import" declarations.
import { backend, Estimator, Limiter, Rate, timeout, type BackendName, type LimiterDecision } from 'keepcount';
import * as keepcount from 'keepcount';
import { WindowQuota, type RateLimitDecision } from 'keepcount/http';
import * as http from 'keepcount/http';
import exercise from './exercise.cjs';
import { quotaFor } from './ts-quota.cjs';

const name: BackendName = backend;
const estimator = new Estimator({ slots: 64 });
const count: number = estimator.incr('typed', 2);
// Type-checked, never called: the declarations must reject a key that is not a Key.
function rejectsBadKeys(): void {
  // @ts-expect-error a key is a string, number, bigint or Uint8Array
  estimator.incr({});
}
void rejectsBadKeys;
const decision: LimiterDecision = new Limiter({ bestEffort: { requests: { perSecond: 1, burst: 1 } } }).check('k');
const refused: RateLimitDecision = new WindowQuota({ limit: 1, windowMs: 1000 }).consume('ip');
// An import-typed Rate into a require-typed function, and its require-typed WindowQuota back.
const mixed: WindowQuota = quotaFor(new Rate({ intervalMs: 1000 }));
const late: string = await timeout(Promise.resolve('x'), 10);

const digest = await exercise(keepcount, http, 'ts-import');
console.log(
  `ts-import backend=${name} sketch=${digest} (${count}, ${decision.allowed}, ${refused.allowed}, ${mixed.consume('ip').allowed}, ${late})`,
);
