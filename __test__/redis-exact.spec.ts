import test from 'ava';
import { Census, entryKeys } from '../lib/redis/cells.js';
import { ExactCells } from '../lib/redis/exact.js';
import { title } from './helpers.js';
import { pull } from './redis-pulls.js';

/** A window's exact counts tracking at most `capacity` keys, synced by hand below. */
const cellsOf = (capacity: number): ExactCells =>
  new ExactCells(
    capacity,
    entryKeys('kc:{q}', 'x1', 'x1-00000000', 'x'),
    new Census({ nodes: 1, syncMs: 100 }),
    () => 0,
  );

test(title('exact cells count tracked keys, add the others’ pulled counts, and push what changed'), (t) => {
  const cells = cellsOf(2);
  t.is(cells.add(10, 1, 'a', 5), 1);
  t.is(cells.add(10, 2, 'a', 7), 3);
  t.is(cells.add(20, 1, 'b', 5), 1);
  t.is(cells.add(30, 1, 'c', 5), undefined, 'the table is full');
  t.is(cells.overflow, 1);
  t.is(cells.peek(30), undefined);
  t.deepEqual(cells.take(10), { cells: [10, 20], values: ['3', '1'] });
  t.is(cells.waiting, 0);
  cells.apply(pull({ 10: 4, 30: 9 }), 1, 0);
  t.is(cells.peek(10), 7, 'its own 3 and the others’ 4');
  t.is(cells.peek(20), 1);
  t.is(cells.local(10), 3);
  t.deepEqual(
    cells.talkers().sort((x, y) => y.lower - x.lower),
    [
      { key: 'a', lower: 7, upper: 7 },
      { key: 'b', lower: 1, upper: 5 },
    ],
    'upper: the estimate at the last request, at least lower',
  );
  // A refund never takes a count below 0; a failed push is marked again.
  t.is(cells.add(20, -5, 'b', 5), 0);
  const push = cells.take(10);
  t.deepEqual(push, { cells: [20], values: ['0'] });
  cells.restore(push);
  t.true(cells.waiting > 0);
});

test(title('a key begun late already holds the others’ counts; a new incarnation pushes everything again'), (t) => {
  const cells = cellsOf(4);
  cells.add(1, 2, 'a', 2);
  cells.take(10);
  cells.apply(pull({ 5: 6, 6: 4 }), 1, 0);
  t.is(cells.peek(5), 6, 'counted elsewhere, not here yet');
  t.is(cells.add(5, 1, 'e', 7), 7);
  cells.take(10);
  // Redis lost the entry: this node's counts all go out again, and until the others' are back the
  // others' counts it knew stay, of keys it tracks or not (before: 1 and 0, its own alone).
  cells.apply(pull({}, 'i2'), 2, 0);
  t.is(cells.since, 0);
  t.deepEqual(
    [5, 6].map((id) => cells.peek(id)),
    [7, 4],
  );
  t.deepEqual(cells.take(10), { cells: [1, 5], values: ['2', '1'] });
  // The others' counts come back: the larger of them and the floor, never the sum. An older
  // snapshot's lower count reads as the floor, a key new to this node as pulled.
  cells.apply(pull({ 5: 6, 6: 3, 7: 2 }, 'i2'), 3, 0);
  t.deepEqual(
    [5, 6, 7].map((id) => cells.peek(id)),
    [7, 4, 2],
  );
  cells.apply(pull({ 5: 8, 6: 5 }, 'i2', 2), 4, 0);
  t.deepEqual(
    [5, 6].map((id) => cells.peek(id)),
    [9, 5],
  );
  // A window that ended decides nothing: the floor goes with the others' counts it keeps.
  cells.forgetOthers();
  t.is(cells.peek(6), 0);
});

test(title('the others’ counts of untracked keys are capped, and an ended window forgets them'), (t) => {
  const cells = cellsOf(1);
  cells.add(1, 1, 'a', 1);
  // Room for 4 × capacity cells in all: the tracked key and 3 others.
  cells.apply(pull({ 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6 }), 1, 0);
  t.is(cells.peek(1), 2, 'a tracked key’s count is always kept');
  t.deepEqual(
    [2, 3, 4, 5, 6].map((id) => cells.peek(id)),
    [undefined, undefined, undefined, undefined, undefined],
  );
  // (The table is full, so peek of an untracked key says nothing: track more to read them.)
  const roomy = cellsOf(2);
  roomy.add(1, 1, 'a', 1);
  roomy.apply(pull({ 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8, 9: 9, 10: 10 }), 1, 0);
  t.deepEqual(
    [2, 3, 4, 5, 6, 7, 8, 9, 10].map((id) => roomy.peek(id)),
    [2, 3, 4, 5, 6, 7, 8, 0, 0],
    '8 cells at most: the first 7 others kept',
  );
  roomy.forgetOthers();
  t.deepEqual(
    [1, 2].map((id) => roomy.peek(id)),
    [1, 0],
  );
  t.deepEqual(roomy.talkers(), [{ key: 'a', lower: 1, upper: 1 }]);
});
