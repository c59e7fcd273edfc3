// A CommonJS helper typed by keepcount's "require" declarations, called by ts-consumer.mts with a
// Rate typed by its "import" declarations. At run time both are one class; the declarations must
// make them one type too (a class with #private members declared twice is two types).
import type { Rate } from 'keepcount';
import { WindowQuota } from 'keepcount/http';

export function quotaFor(rate: Rate): WindowQuota {
  return new WindowQuota({ limit: 1, windowMs: 1000, rate });
}
