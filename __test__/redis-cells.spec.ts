/**
 * A synced sketch's local state (lib/redis/cells.ts `SyncedCells`) taking in made-up pulls:
 * what a new incarnation (Redis lost the entry, or went back to an older snapshot) does to the
 * others' counts a node decides on. No Redis: the pulls are what the script would reply.
 */
import test from 'ava';
import { Census, entryKeys, SyncedCells } from '../lib/redis/cells.js';
import { RedisSync, SyncedEstimator } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { pull } from './redis-pulls.js';

/** A sketch of 4 counters whose others' counts stay a floor for `floorMs` after a new incarnation. */
const cellsOf = (floorMs: number): SyncedCells =>
  new SyncedCells(4, entryKeys('kc:{e}', 'e', 'l'), new Census({ nodes: 1, syncMs: 100 }), () => 0, 0, floorMs);

test(title('a new incarnation keeps the others’ counts known before as a floor: the larger, never the sum'), (t) => {
  const cells = cellsOf(Infinity);
  cells.apply(pull({ 0: 5, 1: 3, 2: 1 }), 1, 0);
  cells.add([2], 1);
  cells.take(10);
  // Redis lost the entry: this node pushes its own counts again, the others' are not back yet.
  cells.apply(pull({}, 'i2'), 2, 100);
  t.deepEqual([...cells.others], [5, 3, 1, 0], 'before: all 0');
  t.deepEqual(cells.take(10), { cells: [2], values: ['1'] });
  // An older snapshot's lower count reads as the floor; a re-push, a node's whole count, covers it.
  cells.apply(pull({ 0: 2, 1: 3, 3: 4 }, 'i2'), 3, 200);
  t.deepEqual([...cells.others], [5, 3, 1, 4]);
  cells.apply(pull({ 0: 7 }, 'i2', 2), 4, 1e12);
  t.deepEqual([...cells.others], [7, 3, 1, 4], 'a window’s floor lasts as long as the window');
  t.is(cells.estimate([2]), 2);
  // Another new incarnation: the floor is what the node knows by then, floor included.
  cells.apply(pull({ 1: 1 }, 'i3'), 5, 1e12);
  t.deepEqual([...cells.others], [7, 3, 1, 4]);
});

test(title('a floor that ends gives way to the counts pulled since; with none the others’ counts go'), (t) => {
  const cells = cellsOf(1000);
  cells.apply(pull({ 0: 5, 1: 3 }), 1, 0);
  cells.apply(pull({}, 'i2'), 2, 100);
  cells.apply(pull({ 0: 2 }, 'i2'), 3, 200);
  t.deepEqual([...cells.others], [5, 3, 0, 0]);
  // 1,000 ms after the sync that found the new incarnation: a `decr` elsewhere shows again.
  cells.apply(pull({}, 'i2', 1), 4, 1099);
  t.deepEqual([...cells.others], [5, 3, 0, 0]);
  cells.apply(pull({ 1: 1 }, 'i2', 2), 5, 1100);
  t.deepEqual([...cells.others], [2, 1, 0, 0]);
  // A leased entry's counts go down as slots leave and nodes are reaped: no floor.
  const leased = cellsOf(0);
  leased.apply(pull({ 0: 5 }), 1, 0);
  leased.apply(pull({}, 'i2'), 2, 100);
  t.deepEqual([...leased.others], [0, 0, 0, 0]);
});

test(title('a SyncedEstimator keeps its floor for a registry lifetime: 10 sync periods'), async (t) => {
  const sync = new RedisSync({ sendCommand: async () => null, syncMs: 250 });
  const sketch = new SyncedEstimator({ sync, name: 'floor', seed: 7 });
  t.is(sketch.entries()[0]!.floorMs, 2500);
  await sync.close();
});
