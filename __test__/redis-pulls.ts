/**
 * Pulls made up as the sync script would reply them (lib/redis/cells.ts `Pull`), for the unit
 * tests of a synced structure's local state that need no Redis.
 */
import type { Pull } from '../lib/redis/cells.js';

/** A pull of `cells` (cell → the others' count) at `version` of `incarnation`, counting 2 nodes. */
export const pull = (cells: Record<number, number>, incarnation = 'i1', version = 1): Pull => ({
  applied: true,
  idTaken: false,
  version,
  head: version,
  incarnation,
  nodes: 2,
  cells: Object.keys(cells).map(Number),
  others: Object.values(cells),
  cursor: '-1',
  layouts: [],
  ahead: 0,
});
