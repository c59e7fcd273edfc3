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
import { RedisSync, SyncedLimiter, type RedisSyncOptions } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { connectClient } from './redis-clients.js';
import { sleep, syncsAfterNow, until } from './waits.js';
import { startRedis } from '../tools/redis-server.js';
import { worstExcess } from './bucket-windows.js';
import { HOURLY } from './redis-refill.js';

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

/**
 * A sync every `syncMs` over `send`, with a link the test cuts (`link.cut`: every command fails at
 * once) and restores; its errors are expected, so ignored.
 */
function cuttableSync(
  send: (args: string[]) => Promise<unknown>,
  options: Omit<RedisSyncOptions, 'sendCommand' | 'syncMs'>,
): { sync: RedisSync; link: { cut: boolean } } {
  const link = { cut: false };
  const sendCommand = (args: string[]): Promise<unknown> =>
    link.cut ? Promise.reject(new Error('cut off')) : send(args);
  const sync = new RedisSync({ sendCommand, syncMs: SYNC_MS, ...options });
  sync.on('error', () => undefined);
  return { sync, link };
}

function makeNode(send: (args: string[]) => Promise<unknown>, name: string, limit: RateLimit): Node {
  const { sync, link } = cuttableSync(send, { timeoutMs: 200, staleAfterMs: STALE_AFTER_MS });
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
        // bucket's refill, and so does the first (its loan spent and lapsed: no live loan, so no
        // credit while stale), where it took 500 of blind credit before the node-count fix.
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

test.serial(
  title(
    "'local', a node cut off until it leaves the other's node count: the fleet stays within the stated " +
      'bound, the node count the other divides by dropping to 1',
  ),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // The audit's case: 10 tokens, one more an hour. B spends the bucket; A, cut off, goes
      // stale still counting 2 nodes, and B, once A has left the registry, counts 1 and its
      // account of the key (idle) has left too. Before, A's stale bucket started with the blind
      // credit of a key with no live loan, burst / 2 = 5, and B then borrowed burst / 1 = 10
      // blind: 25 admitted against the bound's 20.001. Now A's stale bucket starts empty.
      const burst = 10;
      const limit = { ...HOURLY, burst };
      const [a, b] = [0, 1].map(() => makeNode(connection.send, 'drift', limit)) as [Node, Node];
      await Promise.all([a, b].map((node) => node.sync.ready()));
      await until(() => a.limiter.nodes === 2 && b.limiter.nodes === 2, 'both nodes count 2');
      // B spends its credit, then its loans of the rest of the bucket: a sync or a few, however a
      // loaded machine spaces them.
      spend(b, burst);
      for (let round = 0; b.admitted.length < burst; round++) {
        if (round === 50) throw new Error(`B admitted ${b.admitted.length} of the bucket’s ${burst} in 50 syncs`);
        await syncsAfterNow(b.sync, 1, 'B takes its loan');
        spend(b, burst - b.admitted.length);
      }
      a.link.cut = true;
      await until(() => a.sync.stale, 'A is stale');
      spend(a, burst);
      await until(() => b.limiter.nodes === 1, 'B counts 1 node');
      // B's account of the key leaves after 10 idle syncs; then B borrows blind again.
      await syncsAfterNow(b.sync, 12, 'B’s account of the key leaves');
      for (let round = 0; round < 4; round++) {
        spend(b, burst);
        await syncsAfterNow(b.sync, 1, 'B syncs');
      }
      spend(a, burst);
      const rate = 1 / HOURLY.periodMs;
      const times = [a, b].flatMap((node) => node.admitted).sort((x, y) => x - y);
      const excess = worstExcess(times, rate);
      const bound = 2 * burst + 2 * rate * SYNC_MS;
      t.log(
        `admitted A ${a.admitted.length}, B ${b.admitted.length}: worst excess ${excess.toFixed(3)} against ${bound}`,
      );
      t.true(excess <= bound, `excess ${excess} over the bound ${bound}`);
      a.link.cut = false;
      await Promise.all([a, b].map((node) => node.sync.close()));
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

for (const cluster of [false, true]) {
  test.serial(
    title(
      `'local'${cluster ? ', cluster: true' : ''}, checks between a sync's reply and the limiter's freshness, ` +
        'then Redis away again: the node stays within the stated bound',
    ),
    async (t) => {
      const server = await startRedis();
      const connection = await connectClient('ioredis', server.port);
      try {
        // Redis comes back for one sync and goes away again. The reply is applied a few turns of
        // the microtask queue before the sync makes the limiter fresh; a check at every turn from
        // the reply on (as a request handler that awaited another command on the client would)
        // lands in between. Before, such a check opened a spell of staleness named after that
        // sync, and the next real spell, with no sync in between, went on from its bucket,
        // whatever the node spent since: an excess of 2,949–2,996 against the bound's 2,000.
        const link = { cut: false, flap: false };
        const hops = { stale: 0, last: true };
        const admitted: number[] = [];
        const sendCommand = (args: string[]): Promise<unknown> => {
          if (link.cut) return Promise.reject(new Error('cut off'));
          if (!link.flap || (args[0] !== 'EVALSHA' && args[0] !== 'EVAL')) return connection.send(args);
          link.flap = false;
          return connection.send(args).then((reply) => {
            link.cut = true;
            let hop = Promise.resolve();
            for (let i = 0; i < 64; i++) {
              hop = hop.then(() => {
                hops.last = sync.stale;
                if (!hops.last) return;
                hops.stale++;
                if (limiter.check('k').allowed) admitted.push(performance.now());
              });
            }
            return reply;
          });
        };
        const sync = new RedisSync({
          sendCommand,
          syncMs: SYNC_MS,
          timeoutMs: 200,
          staleAfterMs: STALE_AFTER_MS,
          cluster,
        });
        sync.on('error', () => undefined);
        // The loan lapses halfway to staleness: the node then spends its credit, which it owes,
        // so its next spell's bucket starts empty; one that went on from the check in between
        // would not.
        const limit = { perSecond: 1, burst: 1000 };
        const limiter = new SyncedLimiter({ sync, name: `flap-${cluster}`, limit, leaseMs: STALE_AFTER_MS / 2 });
        await sync.ready();
        link.cut = true;
        await until(() => sync.stale, 'the node goes stale');
        // Above the burst: refused, but its demand makes the next sync borrow the whole bucket.
        t.false(limiter.check('k', limit.burst + 1).allowed);
        link.flap = true;
        link.cut = false;
        await until(() => !sync.stale, 'one sync gets through');
        t.true(link.cut, 'Redis away again');
        // Checked at every turn until the limiter was fresh: some check fell between the two.
        t.false(hops.last, 'the checks outlasted the staleness');
        t.true(hops.stale > 0);
        let staleFrom = NaN;
        let last = performance.now();
        while (Number.isNaN(staleFrom) || performance.now() - staleFrom < 300) {
          const now = performance.now();
          if (sync.stale && Number.isNaN(staleFrom)) staleFrom = now;
          const checks = Math.max(5, Math.round(5 * (now - last)));
          last = now;
          for (let i = 0; i < checks; i++) if (limiter.check('k').allowed) admitted.push(performance.now());
          await sleep(1);
        }
        const rate = limit.perSecond / 1000;
        const excess = worstExcess(admitted, rate);
        const bound = 2 * limit.burst + 2 * rate * SYNC_MS;
        t.log(
          `${hops.stale} checks after the reply while stale; admitted ${admitted.length}; ` +
            `worst window excess over rate × t ${excess.toFixed(1)} against ${bound.toFixed(1)}`,
        );
        t.true(excess <= bound + 1, `excess ${excess} over the bound ${bound}`);
        limiter.close();
        link.cut = false;
        await sync.close();
      } finally {
        await connection.close();
        await server.stop();
      }
    },
  );
}

test.serial(
  title(
    "'local', a limiter made while Redis is away on a sync that had synced: it admits its bucket's " +
      'refill, and a refused check passes once its retryAfterMs is past',
  ),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // Its node count is never counted: the sync's, 1 here. Before, every check started its
      // bucket again, from nothing, so it admitted nothing (0 of 1,240 in 1.5 s; 149 now), and a
      // refusal's retryAfterMs of 10 ms was never so.
      const { sync, link } = cuttableSync(connection.send, { timeoutMs: 200, staleAfterMs: STALE_AFTER_MS });
      const limit = { perSecond: 100, burst: 100 };
      const first = new SyncedLimiter({ sync, name: 'synced', limit });
      await sync.ready();
      link.cut = true;
      await until(() => sync.stale, 'the node goes stale');
      const limiter = new SyncedLimiter({ sync, name: 'made-while-away', limit });
      const rate = limit.perSecond / 1000 / limiter.nodes;
      let admitted = limiter.check('k').allowed ? 1 : 0;
      // After the first check and before the last turn's: its bucket refilled at least this long.
      const from = performance.now();
      let at = from;
      while (performance.now() - from < 500) {
        const now = performance.now();
        const checks = Math.max(5, Math.round(5 * (now - at)));
        at = now;
        for (let i = 0; i < checks; i++) if (limiter.check('k').allowed) admitted++;
        await sleep(1);
      }
      t.true(sync.stale);
      // Each turn's checks (5 a millisecond, the refill 0.1) take all its bucket holds.
      const floor = Math.floor(rate * (at - from)) - 1;
      t.log(`admitted ${admitted} in ${(at - from).toFixed(0)} ms, at least ${floor}`);
      t.true(admitted >= floor, `${admitted} admitted, < ${floor}`);
      let refusal = limiter.check('k');
      while (refusal.allowed) refusal = limiter.check('k');
      const refusedAt = performance.now();
      t.true(refusal.retryAfterMs <= 1 / rate, `retryAfterMs ${refusal.retryAfterMs}`);
      // A millisecond more for float rounding.
      while (performance.now() - refusedAt < refusal.retryAfterMs + 1) await sleep(1);
      t.true(limiter.check('k').allowed, 'admitted once its retryAfterMs is past');
      limiter.close();
      first.close();
      link.cut = false;
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title(
    "'local' starts a key from its live loan: empty under the default lease, which lapses as the node goes " +
      'stale, and from the loan under a longer one',
  ),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // A loan's lease runs from the sync that lent it and staleness from the one that last got
      // through, so with the default lease (staleAfterMs) every loan has lapsed by the first
      // stale check: the node must not spend it (Redis writes it off), and the key starts empty.
      const starts: Record<string, boolean> = {};
      for (const leaseMs of [undefined, 5_000]) {
        const { sync, link } = cuttableSync(connection.send, { timeoutMs: 100 });
        const name = `lease-${leaseMs ?? 'default'}`;
        const limit = { perSecond: 1, burst: 100 };
        const limiter = new SyncedLimiter({ sync, name, limit, ...(leaseMs === undefined ? {} : { leaseMs }) });
        await sync.ready();
        // Steady use, so the key holds a loan of most of its share.
        for (let i = 0; i < 20; i++) {
          limiter.check('a');
          await sleep(10);
        }
        await syncsAfterNow(sync, 1, 'the key takes its loan');
        link.cut = true;
        await until(() => sync.staleFor(limiter), 'the node goes stale');
        starts[name] = limiter.check('a').allowed;
        link.cut = false;
        await sync.close();
      }
      t.deepEqual(starts, { 'lease-default': false, 'lease-5000': true });
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);
