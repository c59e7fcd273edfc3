// TypeScript consumer on the oldest module resolution (`node10`, TypeScript's default for
// `module: commonjs`), which ignores "exports": subpath declarations come from "typesVersions".
import { Estimator } from 'keepcount';
import { WindowQuota, type RateLimitDecision } from 'keepcount/http';
import type { RedisSync } from 'keepcount/redis';

const estimator: Estimator = new Estimator({ slots: 64 });
const decision: RateLimitDecision = new WindowQuota({ limit: 1, windowMs: 1000 }).consume('ip');
const sync: RedisSync | undefined = undefined;
void [estimator, decision, sync];
