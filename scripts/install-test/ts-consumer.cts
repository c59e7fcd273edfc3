// TypeScript consumer, CommonJS: type-checked against keepcount's "require" declarations.
/* eslint-disable @typescript-eslint/no-require-imports -- this consumer tests `import = require()` */
import keepcount = require('keepcount');
import http = require('keepcount/http');
import exercise = require('./exercise.cjs');

const name: keepcount.BackendName = keepcount.backend;
const estimator = new keepcount.Estimator({ slots: 64 });
const count: number = estimator.incr('typed', 2);
// Type-checked, never called: the declarations must reject a key that is not a Key.
function rejectsBadKeys(): void {
  // @ts-expect-error a key is a string, number, bigint or Uint8Array
  estimator.incr({});
}
void rejectsBadKeys;
const decision: keepcount.LimiterDecision = new keepcount.Limiter({
  bestEffort: { requests: { perSecond: 1, burst: 1 } },
}).check('k');
const refused: http.RateLimitDecision = new http.WindowQuota({ limit: 1, windowMs: 1000 }).consume('ip');
const late: Promise<string> = keepcount.timeout(Promise.resolve('x'), 10);

void Promise.all([late, exercise(keepcount, http, 'ts-require')]).then(([, digest]) => {
  console.log(`ts-require backend=${name} sketch=${digest} (${count}, ${decision.allowed}, ${refused.allowed})`);
});
