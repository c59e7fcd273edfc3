import test from 'ava';
import { Room } from '../lib/redis/room.js';
import { title } from './helpers.js';

/** A room with `n` offers (1..n) whose current period began at 1,000 after one of 100 ms. */
function roomOf(n: number): Room<number> {
  const room = new Room<number>(900);
  for (let i = 1; i <= n; i++) room.offer(i);
  room.startPeriod(1000);
  return room;
}

/** Takes usable offers at `now` until refused; returns what was taken. */
function takeAll(room: Room<number>, now: number, usable = (_: number): boolean => true): number[] {
  const taken: number[] = [];
  for (let item = room.take(now, usable); item !== undefined; item = room.take(now, usable)) taken.push(item);
  return taken;
}

test(title('a room hands out its offers evenly over the period, oldest first, a burst no faster'), (t) => {
  const room = roomOf(100);
  t.deepEqual(takeAll(room, 1000), [], 'none at the very start of the period');
  // A burst just after the period began takes its share, rounded up: one at first.
  t.deepEqual(takeAll(room, 1000.5), [1]);
  t.deepEqual(takeAll(room, 1010), [2, 3, 4, 5, 6, 7, 8, 9, 10], 'a tenth of the period, a tenth of the room');
  t.is(takeAll(room, 1050).length, 40, 'half the period, half');
  t.deepEqual(
    takeAll(room, 1100),
    Array.from({ length: 50 }, (_, i) => 51 + i),
    'the rest once the period is over',
  );
  t.deepEqual(takeAll(room, 5000), [], 'nothing left on offer');
});

test(title('room left over stays on offer in the next period, whose pace follows the period before'), (t) => {
  const room = roomOf(10);
  t.is(takeAll(room, 1050).length, 5);
  // The next period begins 400 ms later: 5 left over and 5 new offers, handed out over 400 ms.
  for (let i = 11; i <= 15; i++) room.offer(i);
  room.startPeriod(1400);
  t.deepEqual(takeAll(room, 1440), [6]);
  t.deepEqual(takeAll(room, 1600), [7, 8, 9, 10]);
  t.deepEqual(takeAll(room, 1800), [11, 12, 13, 14, 15]);
});

test(title('offers no longer usable are passed over and dropped; withdrawn ones are never taken'), (t) => {
  const room = roomOf(6);
  room.withdraw(2);
  const asked: number[] = [];
  const odd = (item: number): boolean => {
    asked.push(item);
    return item % 2 === 1;
  };
  t.deepEqual(takeAll(room, 2000, odd), [1, 3, 5]);
  t.deepEqual(asked, [1, 3, 4, 5, 6], 'each offer asked about once: 4 and 6 were dropped when passed over');
  room.offer(4);
  t.is(
    room.take(2000, () => true),
    4,
    'offered again, usable again',
  );
  room.offer(7);
  room.clear();
  t.is(
    room.take(2000, () => true),
    undefined,
  );
});
