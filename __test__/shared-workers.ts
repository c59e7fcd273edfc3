// Forked workers (fixtures/shared-worker.ts) and scratch directories for the specs of shared
// segments: shared*.spec.ts.
import { fork, spawn, spawnSync, type ChildProcess } from 'node:child_process';
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

/**
 * How to run a process in a PID namespace of its own, as a restarted container runs: the arguments
 * `unshare` takes before the command (root makes the namespace itself; anyone else through a user
 * namespace, where the system allows them); `skip` if there is no `unshare` here; `refused` with
 * `unshare`'s words if the system would not make one. `--kill-child`: killing the `unshare`
 * process kills the namespace's init, and with it the namespace.
 */
const pidNamespace: { args: string[] } | { skip: string } | { refused: string } = (() => {
  const base = ['--pid', '--fork', '--kill-child'];
  const probe = (args: string[]) => spawnSync('unshare', [...args, 'true'], { stdio: 'pipe', encoding: 'utf8' });
  const root = probe(base);
  if ((root.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT')
    return { skip: 'no `unshare` (util-linux) on this system: cannot make a PID namespace' };
  if (root.status === 0) return { args: base };
  const user = [...base, '--user', '--map-root-user'];
  if (probe(user).status === 0) return { args: user };
  return { refused: `unshare ${base.join(' ')} true: ${(root.stderr || String(root.error)).trim()}` };
})();

/**
 * `unshare`'s arguments for a worker in a PID namespace of its own, or `undefined` when this system
 * cannot make one: the test then passes saying why in its log (macOS has no `unshare`; unprivileged
 * containers refuse it), unless `KEEPCOUNT_TEST_PID_NAMESPACE=required` (set by `.ci/run`, which
 * runs as root on Linux), where it fails: there the namespace tests must run.
 */
export function pidNamespaceArgs(t: ExecutionContext): string[] | undefined {
  if ('args' in pidNamespace) return pidNamespace.args;
  const why = 'skip' in pidNamespace ? pidNamespace.skip : `no PID namespace here: ${pidNamespace.refused}`;
  if (process.env.KEEPCOUNT_TEST_PID_NAMESPACE === 'required') t.fail(`${why} (KEEPCOUNT_TEST_PID_NAMESPACE=required)`);
  else {
    t.log(`skipped: ${why}`);
    t.pass();
  }
  return undefined;
}

/** A forked worker running fixtures/shared-worker.ts, answering one message per command. */
export class Worker {
  private readonly child: ChildProcess;
  private readonly answers: { ok?: unknown; error?: string }[] = [];
  private waiting: (() => void) | undefined;
  /** How the worker ended, once it has. */
  private ended: string | undefined;

  /** `unshare`: run the worker in a new PID namespace (`pidNamespace.args`), as its init. */
  constructor(unshare?: string[]) {
    this.child = unshare
      ? spawn('unshare', [...unshare, process.execPath, '--import', 'tsx', fixture('shared-worker.ts')], {
          stdio: ['inherit', 'inherit', 'inherit', 'ipc'],
        })
      : fork(fixture('shared-worker.ts'), [], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
    this.child.on('message', (answer: { ok?: unknown; error?: string }) => {
      this.answers.push(answer);
      this.waiting?.();
    });
    this.child.once('exit', (code, signal) => {
      this.ended = `code ${code}, signal ${signal}`;
      this.waiting?.();
    });
  }

  /** The next answer; rejects with the worker's error, or if it ended without answering. */
  private async next(): Promise<unknown> {
    while (this.answers.length === 0) {
      if (this.ended !== undefined) throw new Error(`the worker ended (${this.ended}) without answering`);
      await new Promise<void>((resolve) => (this.waiting = resolve));
    }
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

  /** Kills the worker with SIGKILL and waits until it is gone (at once if it is). */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
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

/** `count` workers, each ready; each in a PID namespace of its own with `unshare` (`pidNamespace.args`). */
export async function workers(count: number, unshare?: string[]): Promise<Worker[]> {
  const all = Array.from({ length: count }, () => new Worker(unshare));
  await Promise.all(all.map((w) => w.ready()));
  return all;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
