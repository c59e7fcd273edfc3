import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import { backend } from '../lib/index.js';

/** A spec title naming the backend under test, e.g. `[fallback] merges sketches`. */
export const title = (sentence: string): string => `[${backend}] ${sentence}`;

/**
 * How many times `fn` calls `process.hrtime()`, the default clock's read (lib/clock.ts
 * `hostClock`). `fn` must be synchronous: the count is global while it runs.
 */
export function hrtimeCalls(fn: () => void): number {
  const hrtime = process.hrtime;
  let calls = 0;
  const counting = Object.assign((time?: [number, number]) => {
    calls++;
    return hrtime(time);
  }, hrtime);
  process.hrtime = counting;
  try {
    fn();
  } finally {
    process.hrtime = hrtime;
  }
  return calls;
}

/** What an error must look like: its class, `code` and exact message. */
export interface ErrorShape {
  instanceOf: new (...args: never[]) => Error;
  code: string;
  message: string | RegExp;
}

/** Asserts `fn` throws an error of exactly this shape. */
export function throwsShape(t: ExecutionContext, fn: () => unknown, shape: ErrorShape): void {
  t.throws(fn, { instanceOf: shape.instanceOf, code: shape.code, message: shape.message });
}

/** Asserts `promise` rejects with an error of exactly this shape. */
export async function rejectsShape(t: ExecutionContext, promise: Promise<unknown>, shape: ErrorShape): Promise<void> {
  await t.throwsAsync(promise, { instanceOf: shape.instanceOf, code: shape.code, message: shape.message });
}

export const fixture = (name: string): string => join(__dirname, 'fixtures', name);

export interface ChildResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** performance.now() when the child first wrote `done` to stdout, if it did. */
  doneAt: number | undefined;
  exitAt: number;
}

/**
 * Runs a fixture (with `args`) with tsx in a child process, inheriting KEEPCOUNT_BACKEND unless
 * `env` overrides it; as the user and group `uid` and `gid` if given (which takes root).
 */
export function runFixture(
  name: string,
  options: {
    env?: Record<string, string | undefined>;
    nodeArgs?: string[];
    args?: string[];
    uid?: number;
    gid?: number;
  } = {},
): Promise<ChildResult> {
  const env: Record<string, string | undefined> = { ...process.env, ...options.env };
  for (const key of Object.keys(env)) if (env[key] === undefined) delete env[key];
  const child = spawn(
    process.execPath,
    [...(options.nodeArgs ?? []), '--import', 'tsx', fixture(name), ...(options.args ?? [])],
    {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      uid: options.uid,
      gid: options.gid,
    },
  );
  let stdout = '';
  let stderr = '';
  let doneAt: number | undefined;
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    if (doneAt === undefined && stdout.includes('done')) doneAt = performance.now();
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code, stdout, stderr, doneAt, exitAt: performance.now() }));
  });
}

/** mulberry32: a small seeded PRNG, so a failure names the seed that reproduces it. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
