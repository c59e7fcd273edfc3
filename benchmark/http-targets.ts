/**
 * Issue 16's end-to-end targets, read from the HTTP runs (`http.ts`) and, for the stores, the
 * per-call figures of the rate suite: each limiter against its framework's bare server and
 * against its floor, and keepcount's stores against the stores they replace.
 */
import type { HttpResults } from './http.js';
import { relativeCpu, relativeRps, type Target } from './report.js';
import { median } from './side-by-side.js';

/** The stores' per-call figures from the rate suite's side-by-side rounds (run.ts). */
export interface StoreCalls {
  /** `KeepcountStore.increment`, awaited, ns (median over rounds). */
  keepcountStore: number;
  /** express-rate-limit's `MemoryStore.increment`, awaited, ns. */
  memoryStore: number;
  /** `MemoryStore` over `KeepcountStore`, the median of their ratio round by round. */
  keepcountStoreCheaper: number;
  /** keepcount's Fastify store `incr`, ns. */
  fastifyStore: number;
  /** @fastify/rate-limit's `LocalStore.incr`, ns. */
  localStore: number;
  /** `LocalStore` over keepcount's Fastify store, round by round. */
  fastifyStoreCheaper: number;
}

/**
 * The ratio a throughput target on `setup` is judged by: the throughput ratio, unless the load
 * generator set the pace of the setup's runs (its core busier than the servers', as on node:http
 * and Fastify before `drive` stopped rebuilding every request: their servers needed about as much
 * CPU a request as autocannon did): the generator then shares itself out between the two servers
 * and presses their throughput ratio toward 1, so the ratio of server CPU per request is taken.
 * That one is pressed toward 1 as well, if less (an idle server pays for waking up once per
 * request, and both pay it alike), so a target judged by it says so. `note` says which.
 */
function judged(
  http: HttpResults,
  setup: string,
  rpsRatio: number,
  cpuRatio: number,
): { ratio: number; byCpu: boolean; note: string } {
  const c = http.cases.find((x) => x.setup === setup)!;
  const busy = `load generator ${(c.loadBusy * 100).toFixed(0)} % busy, servers' core ${(c.serverCoreBusy * 100).toFixed(0)} %`;
  if (c.loadBusy > c.serverCoreBusy) {
    return { ratio: cpuRatio, byCpu: true, note: `judged by CPU per request: the ${busy}` };
  }
  return { ratio: rpsRatio, byCpu: false, note: `judged by throughput: ${busy}` };
}

/**
 * keepcount's store over the store it replaces, end to end: from their runs head to head
 * (http.ts RIVALS) when there were any, else through each one's run beside its bare server.
 */
function storeRatio(http: HttpResults, setup: string, rival: string): { ratio: number; how: string } {
  const viaBare = relativeRps(http, setup, rival);
  const viaBareCpu = relativeCpu(http, setup, rival);
  const beside = http.cases.find((c) => c.setup === setup)?.beside;
  if (beside?.other !== rival) {
    const j = judged(http, setup, viaBare, viaBareCpu);
    return {
      ratio: j.ratio,
      how:
        `each beside its bare server, median over rounds: ${viaBare.toFixed(3)}× by throughput, ` +
        `${viaBareCpu.toFixed(3)}× by server CPU per request; ${j.note}`,
    };
  }
  const r = median(beside.rps);
  const cpu = median(beside.cpu);
  const j = judged(http, setup, r, cpu);
  return {
    ratio: j.ratio,
    how:
      `head to head, median over rounds: ${r.toFixed(3)}× by throughput, ${cpu.toFixed(3)}× by server CPU ` +
      `per request; ${j.note}; via each one's bare server ${viaBare.toFixed(3)}×`,
  };
}

/**
 * Issue 16's honest target for node:http `rateLimit`, whose floor target may be out of reach: on a
 * hello-world of ~20 µs a request the default key and one native call, each run alone beside the
 * bare server, cost more than 5 % together in one run (0.975 × 0.964 = 0.940 on 2026-11-28; the
 * full run after it read 0.976: benchmark/README.md). As for the per-call targets, the goal is
 * then what the limiter adds over its floor, its cost over `node-headers`, at most 1.25× what the
 * pieces add over the same floor (`node-pieces`: the key, one native call that takes it, as the
 * per-call floor, and the constant fields, in one layer), both from runs beside `node-headers` and
 * read by the measure {@link judged} picks for `rateLimit`. `undefined` when the run lacks either
 * pair.
 */
function piecesTarget(http: HttpResults): Target | undefined {
  const limiter = http.cases.find((c) => c.setup === 'node-rateLimit')?.beside;
  const pieces = http.cases.find((c) => c.setup === 'node-pieces')?.beside;
  if (limiter?.kind !== 'floor' || pieces?.kind !== 'pieces' || pieces.other !== limiter.other) return undefined;
  const j = judged(http, 'node-rateLimit', median(limiter.rps), median(limiter.cpu));
  const piecesRatio = j.byCpu ? median(pieces.cpu) : median(pieces.rps);
  const piecesCost = 1 - piecesRatio;
  const cost = 1 - j.ratio;
  const percent = (x: number): string => `${(100 * x).toFixed(1)} %`;
  const rounds = (xs: number[]): string => xs.map((x) => x.toFixed(3)).join(' / ');
  return {
    what: `node rateLimit, end to end, honest target: its cost over ${limiter.other} against the key and one native call that takes it`,
    goal: `≤ 1.25× what node-pieces costs over ${limiter.other}, side by side`,
    measured:
      `${percent(cost)} against ${percent(piecesCost)} (${j.byCpu ? 'by CPU per request' : 'by throughput'}; ` +
      `rateLimit rounds ${rounds(j.byCpu ? limiter.cpu : limiter.rps)}, ` +
      `pieces rounds ${rounds(j.byCpu ? pieces.cpu : pieces.rps)})` +
      (piecesCost > 0 ? `: ${(cost / piecesCost).toFixed(2)}×` : ''),
    met: cost <= 1.25 * piecesCost,
  };
}

/**
 * For a limiter whose pieces ran beside the same floor (node:http `rateLimit`): what the pieces
 * alone read there, by the same measure, so that the row shows in the same run how much of the 5 %
 * the key and one native call leave to the count (when they leave less than the cold count costs,
 * ≥ 0.95 is out of reach and {@link piecesTarget} is the honest target). Empty for the others.
 */
function piecesBeside(http: HttpResults, setup: string, floor: string, byCpu: boolean): string {
  if (setup !== 'node-rateLimit') return '';
  const pieces = http.cases.find((c) => c.setup === 'node-pieces')?.beside;
  if (pieces?.kind !== 'pieces' || pieces.other !== floor) return '';
  const ratio = median(byCpu ? pieces.cpu : pieces.rps);
  return `; node-pieces alone (the key and one native call) read ${ratio.toFixed(3)}× ${floor} by the same measure`;
}

/** The end-to-end targets of `http`. */
export function httpTargets(http: HttpResults, calls: StoreCalls): Target[] {
  const targets: Target[] = [];
  for (const framework of ['node', 'express']) {
    for (const limiter of ['rateLimit', 'tokenBucket', 'upstreamLimit']) {
      const setup = `${framework}-${limiter}`;
      const r = relativeRps(http, setup);
      const cpu = relativeCpu(http, setup);
      const j = judged(http, setup, r, cpu);
      targets.push({
        what: `${framework} ${limiter}, end to end, vs the bare server`,
        goal: '≥ 0.95× the throughput',
        measured: `${r.toFixed(3)}× (by server CPU per request: ${cpu.toFixed(3)}×; ${j.note})`,
        met: j.ratio >= 0.95,
      });
    }
  }
  // Issue 16's honest target end to end: a limiter cannot cost less than its framework charges any
  // middleware doing the same visible work: Express's one more layer (express-noop) and, for
  // rateLimit with its headers on, Node's validating and sending the two fields (`-headers`, with
  // constant values). What the limiter adds over that floor is the key, the count and the decision.
  // Read from the runs of each limiter beside its floor (http.ts FLOORS); the ratio of the two
  // figures over the bare servers is printed beside it.
  for (const c of http.cases) {
    if (c.beside?.kind !== 'floor') continue;
    const floor = c.beside.other;
    const r = median(c.beside.rps);
    const cpu = median(c.beside.cpu);
    const j = judged(http, c.setup, r, cpu);
    targets.push({
      what: `${c.setup.replace('-', ' ')}, end to end, honest target: over ${floor}`,
      goal: `≥ 0.95× its throughput (${floor} itself: ${relativeRps(http, floor).toFixed(2)}× the bare server)`,
      // Three decimals: a ratio a hair under the goal must not print as the goal.
      measured:
        `${r.toFixed(3)}× side by side (by server CPU per request: ${cpu.toFixed(3)}×; ${j.note}); ` +
        `via each one's bare server ${relativeRps(http, c.setup, floor).toFixed(3)}×` +
        piecesBeside(http, c.setup, floor, j.byCpu),
      met: j.ratio >= 0.95,
    });
  }
  const pieces = piecesTarget(http);
  if (pieces !== undefined) targets.push(pieces);
  const rps = (setup: string): number => http.cases.find((c) => c.setup === setup)!.rps;
  const cpuUs = (setup: string): number => http.cases.find((c) => c.setup === setup)!.cpuUs;
  const erl = storeRatio(http, 'express-erl-keepcount', 'express-erl-memory');
  const frl = storeRatio(http, 'fastify-frl-keepcount', 'fastify-frl-local');
  const erlRatio = erl.ratio;
  const frlRatio = frl.ratio;
  targets.push({
    what: 'express-rate-limit with KeepcountStore vs MemoryStore, end to end',
    goal: '≥ 1.1× the throughput',
    measured:
      `${rps('express-erl-keepcount').toFixed(0)} vs ${rps('express-erl-memory').toFixed(0)} req/s: ` +
      `${erlRatio.toFixed(3)}× (${erl.how}); per increment, awaited, ` +
      `${calls.keepcountStore.toFixed(0)} vs ${calls.memoryStore.toFixed(0)} ns (${calls.keepcountStoreCheaper.toFixed(1)}×), of a ` +
      `${cpuUs('express-erl-memory').toFixed(0)} µs request (server CPU)`,
    met: erlRatio >= 1.1,
  });
  // Issue 16's honest target where 1.1× is out of reach: a store that cost nothing would save the
  // request its MemoryStore increment and no more, so no store can beat MemoryStore end to end by
  // more than request / (request − increment).
  const requestNs = 1000 * cpuUs('express-erl-memory');
  const ceiling = requestNs / (requestNs - calls.memoryStore);
  targets.push({
    what: 'express-rate-limit with KeepcountStore vs MemoryStore, honest target',
    goal: `≥ 1.1× cheaper per increment; end to end ≥ 0.95× (any store's ceiling here: ${ceiling.toFixed(3)}×)`,
    measured: `${calls.keepcountStoreCheaper.toFixed(2)}× cheaper per increment; ${erlRatio.toFixed(3)}× end to end`,
    met: calls.keepcountStoreCheaper >= 1.1 && erlRatio >= 0.95,
  });
  targets.push({
    what: "@fastify/rate-limit with keepcount's store vs its local store, end to end",
    goal: '≥ 1.0× the throughput',
    measured: `${rps('fastify-frl-keepcount').toFixed(0)} vs ${rps('fastify-frl-local').toFixed(0)} req/s: ${frlRatio.toFixed(3)}× (${frl.how})`,
    met: frlRatio >= 1.0,
  });
  // The same ceiling for @fastify/rate-limit: its LocalStore's incr is all a store could save, of
  // the server's CPU time per request (not the wall time per request of a server paced by the
  // load generator).
  const fastifyRequestNs = 1000 * cpuUs('fastify-frl-local');
  const fastifyCeiling = fastifyRequestNs / (fastifyRequestNs - calls.localStore);
  targets.push({
    what: "@fastify/rate-limit with keepcount's store vs its local store, honest target",
    goal: `cheaper per increment; end to end ≥ 0.95× (any store's ceiling here: ${fastifyCeiling.toFixed(3)}×)`,
    measured:
      `${calls.fastifyStore.toFixed(0)} vs ${calls.localStore.toFixed(0)} ns per increment (${calls.fastifyStoreCheaper.toFixed(2)}×); ` +
      `${frlRatio.toFixed(3)}× end to end`,
    met: calls.fastifyStoreCheaper >= 1 && frlRatio >= 0.95,
  });
  return targets;
}
