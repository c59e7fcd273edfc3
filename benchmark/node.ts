/**
 * The Node suites: `node --expose-gc --import=tsx benchmark/node.ts [--quick] [--suite ID] --out results.json`
 * (without `--expose-gc` the side-by-side slices end without their young-generation collection).
 * `run.ts` runs each suite in a fresh process: peers leave work behind (rate-limiter-flexible arms
 * a timer per key, 1M of them expire during later suites) and large heaps slow every later
 * allocation, so sharing a process would charge one suite for another's garbage.
 *
 * Every suite first checks its contenders give the same answers, then runs with benny
 * (benchmark.js) for `rounds` rounds, the case order rotated each round so no contender always
 * runs first or last; each case's figure is the median over rounds of benchmark.js's median
 * sample, as nanoseconds per operation. Then the same cases run again side by side
 * (side-by-side.ts: each in turn for a slice of time, round after round), which is what the
 * targets' ratios are taken from.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { add, complete, suite } from 'benny';
import { loadBackends } from './backends.js';
import { makeKeys } from './data.js';
import { makeSuite, SUITE_IDS, type SuiteId } from './suites.js';
import { median, sideBySide } from './side-by-side.js';

export interface CaseResult {
  name: string;
  /** Median ns per operation across rounds. */
  ns: number;
  /** Each round's figure, for the spread. */
  rounds: number[];
  /** ns per operation of each side-by-side round (side-by-side.ts), paired by index across cases. */
  sideBySide: number[];
}

export interface SuiteResult {
  id: string;
  title: string;
  reference: string;
  checked: string;
  cases: CaseResult[];
}

export interface NodeResults {
  distinct: number;
  draws: number;
  rounds: number;
  /** Side-by-side rounds, and the milliseconds each case ran per round. */
  sideBySideRounds: number;
  sliceMs: number;
  backends: string[];
  notes: string[];
  suites: SuiteResult[];
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      out: { type: 'string' },
      suite: { type: 'string', multiple: true },
    },
  });
  const quick = values.quick;
  const distinct = quick ? 10_000 : 1_000_000;
  const draws = quick ? 1 << 14 : 1 << 20;
  const rounds = quick ? 1 : 5;
  const side = quick ? { rounds: 1, sliceMs: 5, warmUpRounds: 1 } : { rounds: 25, sliceMs: 40, warmUpRounds: 3 };
  const checkDraws = quick ? 2_000 : 20_000;
  const caseOptions = quick ? { minSamples: 2, maxTime: 0.05, delay: 0 } : { minSamples: 5, maxTime: 0.5, delay: 0.05 };

  const notes: string[] = [];
  process.env.KEEPCOUNT_SILENCE_FALLBACK = '1';
  const backends = loadBackends((line) => notes.push(line));
  const t0 = performance.now();
  const keys = makeKeys(distinct, draws);
  console.log(
    `keys: ${distinct} distinct IPv4, ${draws} draws each stream (${(performance.now() - t0).toFixed(0)} ms)`,
  );
  const ids = (values.suite ?? SUITE_IDS) as SuiteId[];
  for (const id of ids) if (!SUITE_IDS.includes(id)) throw new Error(`unknown suite ${id}: ${SUITE_IDS.join(', ')}`);
  const suites = ids.map((id) => makeSuite(id, backends, keys, checkDraws));

  const results: SuiteResult[] = [];
  for (const s of suites) {
    const checked = await s.check();
    console.log(`${s.title}: ${checked}`);
    results.push({ id: s.id, title: s.title, reference: s.reference, checked, cases: [] });
  }
  const perCase = suites.map((s) => s.cases.map(() => [] as number[]));
  for (let round = 0; round < rounds; round++) {
    for (const [si, s] of suites.entries()) {
      const order = s.cases.map((_, i) => (i + round) % s.cases.length);
      const adds = order.map((ci) => {
        const c = s.cases[ci]!;
        return add(c.name, () => c.run, caseOptions);
      });
      await suite(
        `${s.title} (round ${round + 1}/${rounds})`,
        ...adds,
        complete((summary) => {
          for (const r of summary.results) {
            const ci = s.cases.findIndex((c) => c.name === r.name);
            const c = s.cases[ci]!;
            perCase[si]![ci]!.push((r.details.median * 1e9) / c.batch);
          }
        }),
      );
    }
  }
  for (const [si, s] of suites.entries()) {
    console.log(`${s.title}: ${side.rounds} rounds side by side, ${side.sliceMs} ms per case`);
    const paired = await sideBySide(s.cases, side);
    results[si]!.cases = s.cases.map((c, ci) => ({
      name: c.name,
      ns: median(perCase[si]![ci]!),
      rounds: perCase[si]![ci]!,
      sideBySide: paired[ci]!,
    }));
  }
  const out: NodeResults = {
    distinct,
    draws,
    rounds,
    sideBySideRounds: side.rounds,
    sliceMs: side.sliceMs,
    backends: backends.map((b) => b.name),
    notes,
    suites: results,
  };
  if (values.out !== undefined) writeFileSync(values.out, JSON.stringify(out, null, 2) + '\n');
  else console.log(JSON.stringify(out, null, 2));
  // Peers leave timers behind (per-key expiry timers, store intervals): do not wait for them.
  process.exit(0);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
