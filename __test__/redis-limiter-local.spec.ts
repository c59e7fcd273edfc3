/**
 * keepcount/redis' SyncedLimiter under its `'local'` fail policy against a real redis-server: two
 * nodes hammering one key, one or both cut off from Redis and then let back. A stale node goes on
 * from what it had left of its share and owes what it admits, so the fleet stays within the
 * stated bound over every window, across the cut and the return.
 *
 * The bound is exact: it follows from what Redis lends and what a node may owe, whatever the
 * timers, round trips and event-loop stalls of this shared machine (a late sync lends later, not
 * more), and every admission is timed on this one process's clock. So these tests fail only if the
 * limiter admits past the bound: false-failure probability 0, beyond the one admission of room
 * left for float rounding (Redis keeps tokens as decimal strings).
 */
import test from 'ava';
import type { RateLimit } from '../lib/index.js';
import { RedisSync, SyncedLimiter } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { connectClient } from './redis-clients.js';
import { sleep, until } from './waits.js';
import { startRedis } from '../tools/redis-server.js';
import { worstExcess } from './bucket-windows.js';

const SYNC_MS = 50;
const STALE_AFTER_MS = 400;

/** A node: its own RedisSync, with a link the test cuts and restores, and its limiter. */
interface Node {
  readonly sync: RedisSync;
  readonly limiter: SyncedLimiter;
  /** Set `cut` and every command fails at once; clear it and they reach Redis again. */
  readonly link: { cut: boolean };
  /** Its admissions' times. */
  readonly admitted: number[];
  /** When the test first and last saw it stale (NaN: not yet). */
  staleFrom: number;
  staleTo: number;
}

function makeNode(send: (args: string[]) => Promise<unknown>, name: string, limit: RateLimit): Node {
  const link = { cut: false };
  const sendCommand = (args: string[]): Promise<unknown> =>
    link.cut ? Promise.reject(new Error('cut off')) : send(args);
  const sync = new RedisSync({ sendCommand, syncMs: SYNC_MS, timeoutMs: 200, staleAfterMs: STALE_AFTER_MS });
  sync.on('error', () => undefined);
  // The lease runs out as the node goes stale (the default, made explicit): the gap where a node
  // whose loan lapsed borrows blind before the fail policy takes over is as short as it gets.
  const limiter = new SyncedLimiter({ sync, name, limit, leaseMs: STALE_AFTER_MS });
  return {
    sync,
    limiter,
    link,
    admitted: [],
    staleFrom: NaN,
    staleTo: NaN,
  };
}

/**
 * Checks `k` on every node 5 times per millisecond of the wall clock (at least 5 a turn), however
 * late `sleep(1)` returns, noting each node's stale spell, until `done()`; throws past 20 s.
 */
async function hammer(nodes: Node[], done: () => boolean): Promise<void> {
  const deadline = performance.now() + 20_000;
  let last = performance.now();
  while (!done()) {
    const now = performance.now();
    if (now > deadline) throw new Error('the phase never ended');
    const checks = Math.max(5, Math.round(5 * (now - last)));
    last = now;
    for (const node of nodes) {
      if (node.sync.stale) {
        if (Number.isNaN(node.staleFrom)) node.staleFrom = now;
        node.staleTo = now;
      }
      for (let i = 0; i < checks; i++) if (node.limiter.check('k').allowed) node.admitted.push(performance.now());
    }
    await sleep(1);
  }
}

/** Checks `k` on `node` `times` times at once (no timer, no sync in between). */
function spend(node: Node, times: number): void {
  for (let i = 0; i < times; i++) if (node.limiter.check('k').allowed) node.admitted.push(performance.now());
}

/**
 * The first node spends its credit on `k` at once and takes the whole bucket at its next sync (the
 * other asks for none yet), then the second spends its credit at once, which it owes with no
 * tokens left to pay it; then both hammer `k` for 300 ms, then with the second or both cut off
 * until each has been stale `staleMs`, then with their links back until both are fresh and
 * `afterMs` more.
 */
async function outage(
  port: number,
  options: { name: string; limit: RateLimit; burst: number; cut: 'one' | 'both'; staleMs: number; afterMs: number },
): Promise<Node[]> {
  const connection = await connectClient('ioredis', port);
  try {
    const nodes = [0, 1].map(() => makeNode(connection.send, options.name, options.limit));
    await Promise.all(nodes.map((node) => node.sync.ready()));
    await until(() => nodes.every((node) => node.limiter.nodes === 2), 'both nodes count 2');
    const [first, second] = nodes as [Node, Node];
    spend(first, options.burst);
    // Twice: a sync already under way when it spent carried no request for the key.
    await first.sync.flush();
    await until(() => first.sync.flush(), 'the first node syncs');
    spend(second, options.burst);
    const started = performance.now();
    await hammer(nodes, () => performance.now() - started >= 300);
    const cut = options.cut === 'both' ? nodes : [second];
    for (const node of cut) node.link.cut = true;
    await hammer(nodes, () => cut.every((node) => node.staleTo - node.staleFrom >= options.staleMs));
    for (const node of cut) node.link.cut = false;
    await hammer(nodes, () => nodes.every((node) => !node.sync.stale));
    const back = performance.now();
    await hammer(nodes, () => performance.now() - back >= options.afterMs);
    for (const node of nodes) node.limiter.close();
    await Promise.all(nodes.map((node) => node.sync.close()));
    return nodes;
  } finally {
    await connection.close();
  }
}

/** Admissions of `node` while it was stale. */
const staleAdmissions = (node: Node): number =>
  node.admitted.filter((at) => at >= node.staleFrom && at <= node.staleTo).length;

/** What each node admitted while stale, for the log. */
const staleLog = (nodes: Node[]): string =>
  nodes
    .map((n) =>
      Number.isNaN(n.staleFrom) ? 'never stale' : `${staleAdmissions(n)} in ${(n.staleTo - n.staleFrom).toFixed(0)} ms`,
    )
    .join(', ');

for (const cut of ['both', 'one'] as const) {
  test.serial(
    title(
      `'local', ${cut === 'both' ? 'both nodes' : 'one node of two'} cut off just after spending loans and credit: ` +
        'the fleet stays within the stated bound over every window, across the cut and the return',
    ),
    async (t) => {
      const server = await startRedis();
      try {
        // The audit's case: 1,000 tokens, 10 more a second. Both nodes borrow their credit (500
        // each) and the first's loan drains the bucket; cut off 300 ms later, a node goes stale
        // about 400 ms after its last sync. Before, a stale node started a full bucket of 500 of
        // its own, whatever it owed: about 2,500 admitted with both cut or the second cut alone,
        // against a bound of about 2,015. Now the second, which owes its 500, admits only its
        // bucket's refill, and the first (its loan spent, nothing owed) its 500 of credit.
        const limit = { perSecond: 10, burst: 1000 };
        const nodes = await outage(server.port, {
          name: `audit-${cut}`,
          limit,
          burst: limit.burst,
          cut,
          staleMs: 800,
          afterMs: 300,
        });
        const rate = limit.perSecond / 1000;
        const times = nodes.flatMap((node) => node.admitted).sort((a, b) => a - b);
        const excess = worstExcess(times, rate);
        // The stated bound over any window of t ms, burst + rate × t + burst + 2 × rate × syncMs:
        // an excess over rate × t of 2 × burst + 2 × rate × syncMs. A node cut off alone while
        // the other syncs adds up to rate / nodes for each millisecond it was stale (the refill of
        // its own bucket beyond what it may owe; README).
        const [, second] = nodes as [Node, Node];
        const alone = cut === 'one' ? (rate / 2) * (second.staleTo - second.staleFrom) : 0;
        const bound = 2 * limit.burst + 2 * rate * SYNC_MS + alone;
        t.log(
          `${cut} cut: admitted ${times.length} (${nodes.map((n) => n.admitted.length).join(' + ')}), ` +
            `stale ${staleLog(nodes)}; ` +
            `worst window excess over rate × t ${excess.toFixed(1)} against ${bound.toFixed(1)}`,
        );
        t.true(excess <= bound + 1, `excess ${excess} over the bound ${bound}`);
        // Still 'local', not 'closed': a stale node admits at least its bucket's refill, rate / 2
        // (each turn's checks see one state: a sync ends between turns, never within one).
        for (const node of nodes.filter((n) => !Number.isNaN(n.staleFrom))) {
          const floor = Math.floor((rate / 2) * (node.staleTo - node.staleFrom)) - 1;
          t.true(staleAdmissions(node) >= floor, `${staleAdmissions(node)} admitted while stale, < ${floor}`);
        }
      } finally {
        await server.stop();
      }
    },
  );
}

test.serial(
  title(
    "'local', both nodes cut off and back while Redis refills their bucket: the fleet stays within the " +
      'stated bound over every window',
  ),
  async (t) => {
    const server = await startRedis();
    try {
      // 20 tokens, 20 more a second: Redis refills the bucket while the nodes are cut off (its
      // refill runs on, nobody drawing), each node's own bucket admits 10 a second, and what they
      // owe then is paid from that refill after the return. Before, the first node's stale bucket
      // started full and the second's too, though it owed its credit: an excess of 60 against 42.
      const limit = { perSecond: 20, burst: 20 };
      const nodes = await outage(server.port, {
        name: 'owed',
        limit,
        burst: limit.burst,
        cut: 'both',
        staleMs: 1000,
        afterMs: 1000,
      });
      const rate = limit.perSecond / 1000;
      const times = nodes.flatMap((node) => node.admitted).sort((a, b) => a - b);
      const excess = worstExcess(times, rate);
      const bound = 2 * limit.burst + 2 * rate * SYNC_MS;
      t.log(
        `admitted ${times.length} (${nodes.map((n) => n.admitted.length).join(' + ')}), stale ` +
          `${staleLog(nodes)}; ` +
          `worst window excess over rate × t ${excess.toFixed(1)} against ${bound.toFixed(1)}`,
      );
      t.true(excess <= bound + 1, `excess ${excess} over the bound ${bound}`);
    } finally {
      await server.stop();
    }
  },
);
