/** Renders the results as Markdown tables and a horizontal bar chart (SVG, no dependencies). */
import type { MemoryResult } from './memory.js';
import type { NodeResults, SuiteResult } from './node.js';
import { median, pairedRatio } from './side-by-side.js';
import type { HttpCase, HttpResults } from './http.js';
import { bareOf } from './load.js';
import type { RedisResults } from './redis.js';

export interface Machine {
  cpu: string;
  cores: number;
  loadBefore: number[];
  loadAfter: number[];
  os: string;
  versions: [string, string][];
  date: string;
  commit: string;
  durationS: number;
  command: string;
}

export interface CargoRun {
  title: string;
  command: string;
  output: string;
}

export interface Target {
  what: string;
  goal: string;
  measured: string;
  met: boolean | undefined;
}

const fmtNs = (ns: number): string => (ns >= 100 ? ns.toFixed(0) : ns.toFixed(1));
const fmtBytes = (b: number): string => {
  const a = Math.abs(b);
  if (a >= 1 << 20) return `${(b / (1 << 20)).toFixed(1)} MiB`;
  if (a >= 1 << 10) return `${(b / (1 << 10)).toFixed(0)} KiB`;
  return `${b} B`;
};
const percent = (fraction: number): string => `${(fraction * 100).toFixed(0)} %`;
const fmtRatio = (r: number): string => (r >= 10 ? `${r.toFixed(0)}×` : `${r.toFixed(2)}×`);
const escapeXml = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export const refNs = (s: SuiteResult): number | undefined => s.cases.find((c) => c.name === s.reference)?.ns;

function suiteTable(s: SuiteResult): string {
  const ref = refNs(s);
  const refRounds = s.cases.find((c) => c.name === s.reference)?.sideBySide;
  const lines = [
    `### ${s.title}`,
    '',
    `Checked first: ${s.checked}.`,
    '',
    `| contender | ns/op (median) | rounds | × keepcount | side by side: ns/op | × keepcount |`,
    '| --- | ---: | --- | ---: | ---: | ---: |',
  ];
  for (const c of s.cases) {
    const isRef = c.name === s.reference;
    const ratio = ref === undefined ? '' : isRef ? '1 (ref)' : fmtRatio(c.ns / ref);
    const paired = refRounds === undefined ? '' : isRef ? '1 (ref)' : fmtRatio(pairedRatio(c.sideBySide, refRounds));
    lines.push(
      `| ${c.name} | ${fmtNs(c.ns)} | ${c.rounds.map(fmtNs).join(' / ')} | ${ratio} | ` +
        `${fmtNs(median(c.sideBySide))} | ${paired} |`,
    );
  }
  return lines.join('\n');
}

/**
 * The median over rounds of `setup`'s per-round ratio over `base`'s, each taken against the bare
 * server beside it in the same run (see `runHttp`).
 */
function relative(http: HttpResults, setup: string, base: string, of: (c: HttpCase) => number[]): number {
  const rounds = (name: string): number[] => {
    const c = http.cases.find((x) => x.setup === name);
    return c === undefined ? [] : of(c);
  };
  const [ours, theirs] = [rounds(setup), rounds(base)];
  const ratios = ours.map((r, i) => r / theirs[i]!).sort((a, b) => a - b);
  return ratios.length === 0 || ratios.length !== theirs.length ? NaN : ratios[Math.floor(ratios.length / 2)]!;
}

/**
 * Throughput of `setup` relative to `base` (by default the bare server of its framework:
 * `node-none` for `node-…`), from runs side by side with the bare server, so that a spell the
 * whole machine ran slow in slows both sides of each ratio alike.
 */
export function relativeRps(http: HttpResults, setup: string, base = bareOf(setup)): number {
  return relative(http, setup, base, (c) => c.roundRatios);
}

/**
 * The bare server's CPU time per request over `setup`'s (the throughput a server whose one core is
 * the bottleneck would keep), paired as {@link relativeRps} pairs.
 */
export function relativeCpu(http: HttpResults, setup: string, base = bareOf(setup)): number {
  return relative(http, setup, base, (c) => c.roundCpuRatios);
}

/** Where the server and the load generator ran, for the report. */
function coresLine(http: HttpResults): string {
  return http.serverCpus === undefined || http.loadCpus === undefined
    ? `servers and load generator (autocannon, its own process) share the machine's ${http.cores} cores`
    : `the servers run on ${http.serverCpus.length} core (CPU ${http.serverCpus.join(',')}), the load generator ` +
        `(autocannon, its own process) on ${http.loadCpus.length} (CPU ${http.loadCpus.join(',')}), of the machine's ${http.cores}`;
}

function httpTable(http: HttpResults): string {
  const lines = [
    "Each setup runs side by side with its framework's bare server, both on one core and each driven by its own " +
      `autocannon with ${http.connections} connections at the same time, so a slow spell of the machine slows both ` +
      `alike; a fresh client address per request, ${http.seconds} s per run after a ${http.warmUpSeconds} s warm-up, median of ${http.rounds} ` +
      'interleaved round(s); "× bare server" is the median over rounds of the setup\'s requests/s over the bare ' +
      "server's beside it (the core shared equally, this is the bare server's cost per request over the setup's), " +
      '"× bare (CPU)" the same from server CPU time per request (user + system, every thread of the server). ' +
      `Requests/s are each server's with half a core; ${coresLine(http)}. Every limiter admits everything: ` +
      'the figures are the cost of counting and deciding, with rate-limit headers on. "Servers\' core busy" is ' +
      "both servers' CPU time over the run's length, \"load generator busy\" autocannon's process's: where the " +
      "generator is near 100 % and the servers' core is not, the generator set the pace, the throughput ratios " +
      'are pressed toward 1, and the CPU ratio is the truer figure of what a setup costs the server.',
    '',
    "| setup | requests/s | × bare server | server CPU µs/request | × bare (CPU) | p99 ms | server RSS growth | requests (= distinct clients) | non-2xx | servers' core busy | load generator busy |",
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const c of http.cases) {
    lines.push(
      `| ${c.setup} | ${c.rps.toFixed(0)} | ${relativeRps(http, c.setup).toFixed(2)} | ${c.cpuUs.toFixed(1)} | ` +
        `${relativeCpu(http, c.setup).toFixed(2)} | ${c.p99} | ` +
        `${fmtBytes(c.rssGrowth)} | ${c.requests.toLocaleString('en-US')} | ${c.non2xx} | ` +
        `${percent(c.serverCoreBusy)} | ${percent(c.loadBusy)} |`,
    );
  }
  const paired = http.cases.filter((c) => c.beside !== undefined);
  if (paired.length > 0 || http.askedPairs.length > 0) {
    lines.push(
      '',
      "Each limiter with a floor also ran side by side with that floor, node-pieces with node:http rateLimit's " +
        "floor, keepcount's stores with the store they replace, and each pair asked for by name (--pair), the same " +
        "way, in runs of their own (median over rounds of the setup's figure over the other's):",
      '',
      '| setup | beside | × beside | × beside (CPU) | rounds |',
      '| --- | --- | ---: | ---: | --- |',
    );
    for (const { setup, other, rps, cpu } of [
      ...paired.map((c) => ({ setup: c.setup, ...c.beside! })),
      ...http.askedPairs,
    ]) {
      lines.push(
        `| ${setup} | ${other} | ${median(rps).toFixed(3)} | ${median(cpu).toFixed(3)} | ` +
          `${rps.map((r) => r.toFixed(3)).join(' / ')} |`,
      );
    }
  }
  return lines.join('\n');
}

/**
 * One bar group per suite; bars on a log scale so 20 ns and 20 µs both read. A case's bar is its
 * side-by-side median, the figure README's table gives (benny's median only for a case without
 * side-by-side rounds).
 */
export function chart(node: NodeResults, http: HttpResults): string {
  const rowH = 18;
  const labelW = 330;
  const barW = 420;
  const width = labelW + barW + 90;
  const shown = (c: SuiteResult['cases'][number]): number => (c.sideBySide.length > 0 ? median(c.sideBySide) : c.ns);
  const all = node.suites.flatMap((s) => s.cases.map(shown));
  const lo = Math.max(1, Math.min(...all) / 1.5);
  const hi = Math.max(...all) * 1.5;
  const x = (ns: number): number => (Math.log10(ns / lo) / Math.log10(hi / lo)) * barW;
  const parts: string[] = [];
  let y = 40;
  for (const s of node.suites) {
    parts.push(`<text x="4" y="${y + 13}" class="h">${escapeXml(s.title)}</text>`);
    y += rowH + 2;
    for (const c of s.cases) {
      const ours = c.name.startsWith('keepcount');
      const ns = shown(c);
      const w = Math.max(1, x(ns));
      parts.push(
        `<text x="${labelW - 6}" y="${y + 13}" class="l" text-anchor="end">${escapeXml(c.name)}</text>`,
        `<rect x="${labelW}" y="${y + 2}" width="${w.toFixed(1)}" height="${rowH - 4}" class="${ours ? 'k' : 'o'}"/>`,
        `<text x="${labelW + w + 4}" y="${y + 13}" class="v">${fmtNs(ns)} ns</text>`,
      );
      y += rowH;
    }
    y += 8;
  }
  // End to end: each setup's throughput relative to its framework's bare server, linear scale.
  parts.push(
    `<text x="4" y="${y + 13}" class="h">End to end: requests/s relative to the same server without a limiter (higher is better)</text>`,
  );
  y += rowH + 2;
  const axisY = y;
  for (const c of http.cases) {
    const ratio = relativeRps(http, c.setup);
    const w = Math.max(1, (Math.min(ratio, 1.2) / 1.2) * barW);
    const ours = /-(rateLimit|tokenBucket|upstreamLimit|erl-keepcount|frl-keepcount)$/.test(c.setup);
    parts.push(
      `<text x="${labelW - 6}" y="${y + 13}" class="l" text-anchor="end">${escapeXml(c.setup)}</text>`,
      `<rect x="${labelW}" y="${y + 2}" width="${w.toFixed(1)}" height="${rowH - 4}" class="${ours ? 'k' : 'o'}"/>`,
      `<text x="${labelW + w + 4}" y="${y + 13}" class="v">${ratio.toFixed(2)}×</text>`,
    );
    y += rowH;
  }
  const one = labelW + barW / 1.2;
  parts.push(`<line x1="${one.toFixed(1)}" y1="${axisY}" x2="${one.toFixed(1)}" y2="${y}" class="g"/>`);
  y += 8;
  const ticks: string[] = [];
  for (let t = 1; t <= hi; t *= 10) {
    if (t < lo) continue;
    const tx = labelW + x(t);
    ticks.push(
      `<line x1="${tx.toFixed(1)}" y1="30" x2="${tx.toFixed(1)}" y2="${y}" class="g"/>`,
      `<text x="${tx.toFixed(1)}" y="26" class="t" text-anchor="middle">${t >= 1000 ? `${t / 1000} µs` : `${t} ns`}</text>`,
    );
  }
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y + 10}" viewBox="0 0 ${width} ${y + 10}" font-family="sans-serif">`,
    '<style>.h{font-size:13px;font-weight:bold}.l,.v{font-size:11px}.t{font-size:10px;fill:#555}.g{stroke:#ddd}.k{fill:#d9480f}.o{fill:#868e96}</style>',
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="4" y="14" font-size="12">ns per operation, log scale, median of the side-by-side rounds (lower is better); keepcount in orange</text>`,
    ...ticks,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}

function redisSection(redis: RedisResults): string[] {
  const ref = redis.sequential.find((c) => c.name.startsWith('keepcount'))?.us;
  const t = redis.trace;
  const wrong = t.wronglyAdmitted + t.wronglyRefused;
  return [
    '## keepcount/redis against one local redis-server',
    '',
    `redis-server ${redis.redisVersion} on loopback, started by benchmark/redis.ts; one ioredis client per contender. ` +
      `Zipf(1.1) keys over 10,000 clients; limits no check reaches. keepcount's checks run ${redis.checksPerRound.keepcount.toLocaleString('en-US')} ` +
      `per round, yielding to the event loop every 1,024 so its sync every 100 ms runs and is counted; the Redis stores' ` +
      `${redis.checksPerRound.redis.toLocaleString('en-US')} per round (×4 in flight); median of ${redis.rounds} interleaved round(s).`,
    '',
    '| contender | µs per check (median) | rounds | × keepcount |',
    '| --- | ---: | --- | ---: |',
    ...[...redis.sequential, ...redis.concurrent].map(
      (c) =>
        `| ${c.name} | ${c.us.toFixed(c.us >= 100 ? 0 : 2)} | ${c.rounds.map((r) => r.toFixed(2)).join(' / ')} | ` +
        `${ref === undefined ? '' : c.us === ref ? '1 (ref)' : fmtRatio(c.us / ref)} |`,
    ),
    '',
    `Redis commands per node per second (\`INFO commandstats\`, EVALSHA + EVAL), ${redis.commands.nodes} nodes in one ` +
      `process checking as fast as they can (${redis.commands.checksPerNodePerS.toFixed(0)} checks/s each) for ` +
      `${redis.commands.seconds.toFixed(1)} s at syncMs ${redis.commands.syncMs}: **${redis.commands.commandsPerNodePerS.toFixed(2)}** ` +
      `(at most ${1000 / redis.commands.syncMs}: one script call per sync); Redis meanwhile busy ` +
      `${(redis.commands.redisCpuPerS * 100).toFixed(0)}% of a core.`,
    '',
    `Trace: ${t.requests.toLocaleString('en-US')} requests (${t.requestsPerS.toLocaleString('en-US')}/s Poisson for ${t.seconds} s, ` +
      `Zipf(1.1) over ${t.keys.toLocaleString('en-US')} keys, seeded) sent at random to ${t.nodes} synced nodes in one process ` +
      `(each its own client and RedisSync, syncMs ${t.syncMs}), limit ${t.limit} per ${t.windowMs} ms window, replayed in real time ` +
      'and compared request by request with an exact global count.',
    '',
    '| | |',
    '| --- | --- |',
    `| (window, key) pairs over the limit | ${t.overLimit} |`,
    `| largest overshoot (admissions − limit) | ${t.maxOvershoot} (key rank ${t.maxOvershootRank}; the bound's slack there ${t.boundAtMax.toFixed(0)}) |`,
    `| pairs past the stated bound | ${t.overBound} (worst overshoot / slack ${t.worstBoundRatio.toFixed(2)}) |`,
    `| longest gap between a node's syncs; longest sync round trip | ${t.longestSyncGapMs.toFixed(0)} ms; ${t.maxRoundTripMs.toFixed(0)} ms |`,
    `| Redis CPU during the replay | ${(t.redisCpuPerS * 100).toFixed(0)}% of a core |`,
    `| wrong decisions | ${((wrong / t.requests) * 100).toFixed(3)}% (${t.wronglyAdmitted} admitted, ${t.wronglyRefused} refused wrongly); Cloudflare's sliding-window approximation: 0.003% |`,
    '',
  ];
}

export function markdown(
  machine: Machine,
  targets: Target[],
  node: NodeResults,
  memory: (MemoryResult | { name: string; skipped: string })[],
  cargo: CargoRun[],
  http: HttpResults,
  redis: RedisResults,
  chartFile: string,
): string {
  const out: string[] = [
    '# keepcount benchmark results',
    '',
    `Generated by \`${machine.command}\` (benchmark/run.ts) on ${machine.date}, commit ${machine.commit}, in ${machine.durationS.toFixed(0)} s. ` +
      'See [README.md](README.md) for what each suite measures and how to read the ratios.',
    '',
    '## Machine',
    '',
    '| | |',
    '| --- | --- |',
    `| CPU | ${machine.cpu} |`,
    `| cores | ${machine.cores} |`,
    `| load average (1/5/15 min) before | ${machine.loadBefore.map((l) => l.toFixed(2)).join(' / ')} |`,
    `| load average after | ${machine.loadAfter.map((l) => l.toFixed(2)).join(' / ')} |`,
    `| OS | ${machine.os} |`,
    ...machine.versions.map(([k, v]) => `| ${k} | ${v} |`),
    '',
    `Node: ${node.distinct.toLocaleString('en-US')} distinct IPv4 addresses, streams of ${node.draws.toLocaleString('en-US')} draws, ` +
      `${node.rounds} interleaved round(s), backends: ${node.backends.join(', ')}.`,
    ...node.notes.map((n) => `Note: ${n}.`),
    '',
    '## Targets',
    '',
    '| target | goal | measured | met |',
    '| --- | --- | --- | --- |',
    ...targets.map(
      (t) => `| ${t.what} | ${t.goal} | ${t.measured} | ${t.met === undefined ? 'n/a' : t.met ? 'yes' : '**no**'} |`,
    ),
    '',
    `![ns/op per suite](${chartFile})`,
    '',
    '## Node suites',
    '',
    '"× keepcount": the contender\'s ns/op divided by the reference keepcount row of its suite (above 1: keepcount is faster). ' +
      `"Side by side": the same cases again, each in turn for ${node.sliceMs} ms, ${node.sideBySideRounds} rounds; ` +
      "a case's median there and the median over rounds of its ratio to the reference in the same round. " +
      'The targets above are read from these: two cases seconds apart in the benny run can differ by the ' +
      "machine's drift alone (benchmark/README.md).",
    '',
    ...node.suites.flatMap((s) => [suiteTable(s), '']),
    '## End to end: hello-world HTTP servers',
    '',
    httpTable(http),
    '',
    ...redisSection(redis),
    '## Memory after one operation on each of the distinct keys',
    '',
    'Fresh process per structure, `--expose-gc`, full collections before each reading; keys are flat strings (as ' +
      "a server's socket gives them) and glibc runs with one arena that returns freed memory at once, so RSS shows " +
      'what is held rather than the runtime\'s caching (benchmark/memory.ts says why each matters). "heap" is V8 heap ' +
      'used + external (ArrayBuffers); it does not see Rust\'s allocations, which only RSS shows. "first" is one ' +
      'operation on each of the distinct keys after construction; "next" is one on as many other keys after that.',
    '',
    '| structure | keys | heap: construct | heap: first | heap: next | RSS: construct | RSS: first | RSS: next |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...memory.map((m) =>
      'skipped' in m
        ? `| ${m.name} | | skipped: ${m.skipped} | | | | | |`
        : `| ${m.name} | ${m.keys.toLocaleString('en-US')} | ${fmtBytes(m.heapConstruct)} | ${fmtBytes(m.heapRun)} | ` +
          `${fmtBytes(m.heapNext)} | ${fmtBytes(m.rssConstruct)} | ${fmtBytes(m.rssRun)} | ${fmtBytes(m.rssNext)} |`,
    ),
    '',
    '## Rust benches',
    '',
    ...cargo.flatMap((c) => [`### ${c.title}`, '', `\`${c.command}\``, '', '```text', c.output.trimEnd(), '```', '']),
  ];
  return out.join('\n');
}
