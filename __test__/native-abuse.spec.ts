// No panic can abort Node: bad input thrown at the native classes directly (lib/ validates before
// them, so only direct callers reach these paths) must come back as JavaScript errors. Run in a
// child process, since an abort would take the test runner down with it.
import test from 'ava';
import { runFixture, title } from './helpers.js';

interface Line {
  name: string;
  outcome: 'threw' | 'returned';
  value?: string;
  isError?: boolean;
  class?: string;
  code?: string;
}

const REASONS = ['short', 'magic', 'version', 'flags', 'shape', 'length', 'checksum'];
/** Cases with valid input, which must return. */
const VALID =
  /^(lend (estimator|rate) a valid SharedArrayBuffer|incr key (detached Uint8Array|1 MB string|lone surrogates)|counterIndexes key detached Uint8Array|merge itself|register (NaN|-?Infinity|-1|1e\+308)|letExit before keepAlive|drain|windowScratch again, the same array \(valid\)|fast .* \(valid\))$/;

test(title('every bad input to the native classes is a JavaScript error, never an abort'), async (t) => {
  const child = await runFixture('native-abuse.ts');
  t.is(child.code, 0, `the child did not exit normally:\n${child.stderr}`);
  const lines = child.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Line);
  t.true(lines.length > 300, `only ${lines.length} cases ran`);
  for (const line of lines) {
    if (line.name.startsWith('deserialize ') && line.outcome === 'returned') {
      t.true(REASONS.includes(line.value!), `${line.name} returned ${line.value}`);
    } else if (VALID.test(line.name)) {
      t.is(line.outcome, 'returned', `${line.name}: ${JSON.stringify(line)}`);
    } else {
      t.is(line.outcome, 'threw', `${line.name} returned ${line.value}`);
      t.true(line.isError, `${line.name} threw a non-Error`);
    }
  }
  t.notRegex(child.stderr, /panicked/);
});

test(title('bad keys, counts, shapes and merges throw the classes and codes of lib/errors.ts'), async (t) => {
  const child = await runFixture('native-abuse.ts');
  const byName = new Map(
    child.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Line)
      .map((line) => [line.name, line] as const),
  );
  const expect = (name: string, cls: string, code: string) =>
    t.like(byName.get(name), { outcome: 'threw', class: cls, code }, name);
  expect('incr key symbol', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('incr key Int8Array', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('get key 1.5', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('incr key bigint 2^63', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('incr value NaN', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('Estimator(0, 8)', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('Estimator(1, 134217729)', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('Estimator seed -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('Rate interval 0', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('observe now -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('merge other seed', 'Error', 'ERR_KEEPCOUNT_MISMATCH');
  expect('merge other shape', 'Error', 'ERR_KEEPCOUNT_MISMATCH');
  expect('deserialize number', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast estimatorIncrStr key number', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast estimatorGetNum key string', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast estimatorGetNum key 1.5', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast estimatorIncrKey key bigint 2^63', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast estimatorIncrKey key symbol', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast estimatorIncrStr count NaN', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast estimatorIncrNum count string', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast rateObserveStr count -1.5', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast rateObserveStr now -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast rateObserveNum now bigint', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast rateObserveKey no arguments', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast rateObserveInWindowStr now -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast heavyIncrInWindowStr before windowScratch', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast rateObserveInWindowNum before windowScratch', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast sharedRateObserveInWindowStr before windowScratch', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast bufferRateObserveInWindowKey before windowScratch', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast heavyIncrStr now -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast heavyIncrNum count 2^53', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast heavyIncrInWindowStr now -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast heavyIncrInWindowNum count 2^53', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast heavyIncrInWindowKey handle of class rate', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast estimatorGetKey handle another generation', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast rateObserveStr handle of class estimator', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast estimatorIncrStr handle of class limiter', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckKey handle of class rate', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckStr handle tag +1', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckNum handle another generation', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckStr handle 2^52', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckStr handle string', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckStr key number', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckNum key 1.5', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast limiterCheckKey key bigint 2^63', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast limiterCheckKey key symbol', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckStr count NaN', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast limiterCheckStr cost -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast limiterCheckNum count string', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckStr now string', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast limiterCheckKey no arguments', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast sharedRateObserveStr count -1.5', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast sharedRateObserveInWindowKey handle of class rate', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast sharedInflightIncrStr handle of class shared sketch', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast sharedInflightIncrKey key symbol', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast sharedRateObserveStr handle tag +6', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast bufferRateObserveStr now -1', 'RangeError', 'ERR_OUT_OF_RANGE');
  expect('fast bufferRateObserveKey handle of class shared rate', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  expect('fast sharedRateObserveStr handle of class buffer', 'TypeError', 'ERR_INVALID_ARG_TYPE');
  t.like(byName.get('deserialize flipped'), { outcome: 'returned', value: 'checksum' });
  t.like(byName.get('deserialize huge shape'), { outcome: 'returned', value: 'shape' });
});
