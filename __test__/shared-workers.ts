// Forked workers (fixtures/shared-worker.ts) and scratch directories for the specs of shared
// segments: shared.spec.ts and shared-limiter.spec.ts.
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import { fixture } from './helpers.js';

/** A fresh directory for one test's segments, removed after it. */
export function scratch(t: ExecutionContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'keepcount-shared-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export const unsupported = (what: string) => ({
  instanceOf: Error,
  code: 'ERR_KEEPCOUNT_UNSUPPORTED',
  message: new RegExp(`^${what.replace('.', '\\.')} needs the native backend: .*Build or install the native addon`),
});

/** A forked worker running fixtures/shared-worker.ts, answering one message per command. */
export class Worker {
  private readonly child: ChildProcess;
  private readonly answers: { ok?: unknown; error?: string }[] = [];
  private waiting: (() => void) | undefined;

  constructor() {
    this.child = fork(fixture('shared-worker.ts'), [], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
    this.child.on('message', (answer: { ok?: unknown; error?: string }) => {
      this.answers.push(answer);
      this.waiting?.();
    });
  }

  /** The next answer; rejects with the worker's error. */
  private async next(): Promise<unknown> {
    while (this.answers.length === 0) await new Promise<void>((resolve) => (this.waiting = resolve));
    const answer = this.answers.shift()!;
    if (answer.error !== undefined) throw new Error(answer.error);
    return answer.ok;
  }

  async ready(): Promise<void> {
    await this.next();
  }

  async send(command: object): Promise<unknown> {
    this.child.send(command);
    return this.next();
  }

  /** Kills the worker with SIGKILL and waits until it is gone. */
  async kill(): Promise<void> {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill('SIGKILL');
    await exited;
  }

  async exit(): Promise<void> {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    await this.send({ op: 'exit' });
    await exited;
  }
}

/** `count` workers, each ready. */
export async function workers(count: number): Promise<Worker[]> {
  const all = Array.from({ length: count }, () => new Worker());
  await Promise.all(all.map((w) => w.ready()));
  return all;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
