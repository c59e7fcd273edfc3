/**
 * What a benchmark suite is made of: cases that each run a batch of one contender's operations on
 * a key stream, the suite that holds them with its same-answer check, and the helpers the suites
 * build them with.
 *
 * A case runs `batch` operations per call, each on the next key of its stream, so the harness's
 * own per-call cost is amortised; async contenders `await` every operation, as their users do.
 */
import type { LoadedBackend } from './backends.js';

export interface Case {
  name: string;
  /** Operations per call of `run`. */
  batch: number;
  run: () => unknown;
}

export interface Suite {
  id: string;
  title: string;
  /** The case ratios are taken against (keepcount, native when it loads). */
  reference: string;
  cases: Case[];
  /** Throws unless every contender gives the same answer; returns a line saying what was checked. */
  check: () => string | Promise<string>;
}

/** Operations per call: enough to hide the harness, few enough for benchmark.js to sample often. */
export const SYNC_BATCH = 1024;
export const ASYNC_BATCH = 256;

/** Generous limits: nothing is ever refused during a run, so every contender does the same work. */
export const HUGE = 1e12;

export function assert(ok: boolean, message: string): void {
  if (!ok) throw new Error(`same-answer check failed: ${message}`);
}

/**
 * A fresh copy of the loop per case (new Function): a loop shared by all cases would see many
 * different `op`s, stop inlining them and charge every contender a megamorphic call.
 */
export function syncCase<K>(name: string, keys: K[], op: (key: K) => unknown, batch = SYNC_BATCH): Case {
  const make = new Function(
    'keys',
    'op',
    'batch',
    `let i = 0;
     const mask = keys.length - 1;
     return function run() {
       for (let n = 0; n < batch; n++) { op(keys[i]); i = (i + 1) & mask; }
     };`,
  ) as (k: K[], o: (key: K) => unknown, b: number) => () => void;
  return { name, batch, run: make(keys, op, batch) };
}

export function asyncCase<K>(name: string, keys: K[], op: (key: K) => unknown, batch = ASYNC_BATCH): Case {
  const make = new Function(
    'keys',
    'op',
    'batch',
    `let i = 0;
     const mask = keys.length - 1;
     return async function run() {
       for (let n = 0; n < batch; n++) { await op(keys[i]); i = (i + 1) & mask; }
     };`,
  ) as (k: K[], o: (key: K) => unknown, b: number) => () => Promise<void>;
  return { name, batch, run: make(keys, op, batch) };
}

export const label = (b: LoadedBackend): string => `(${b.name})`;

/** The reference row: keepcount on the first backend that loaded (native when it does). */
export const ref = (backends: LoadedBackend[], what: string): string => `keepcount ${what} ${label(backends[0]!)}`;

/** A seed shared by both backends so their sketches are bit-identical and checkable. */
export const SEED = 0x5eedn;

export type Variant = { id: string; title: string; keys: (string | number)[]; draws: Uint32Array };
