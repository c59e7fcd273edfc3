/**
 * The load-generator side of the HTTP benches (`http.ts`, `request-path.ts`): a benchmark server
 * started in its own process, and autocannon driving it with a fresh client address per request.
 */
import { execFileSync, spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';

/** Connections autocannon keeps open. */
export const CONNECTIONS = 32;

/**
 * Which CPUs the server and the load generator run on. With at least two CPUs (and `taskset`),
 * the server gets the first and this process (autocannon) the others: a limiter's work then comes
 * out of the server's own core, not out of a core it shares with the load generator, so the
 * server's throughput is what its one core can do, as on a host that gives each worker a core.
 * `KEEPCOUNT_BENCH_PIN=0` turns it off (both sides share every CPU).
 */
export interface CoreSplit {
  /** The CPUs the bench could run on before the split. */
  cores: number;
  /** The server's CPUs, or `undefined` when not pinned. */
  server: number[] | undefined;
  /** The load generator's CPUs, or `undefined` when not pinned. */
  load: number[] | undefined;
}

/** The CPUs this process may run on, from `taskset`, or `undefined` without it. */
function affinity(): number[] | undefined {
  try {
    const out = execFileSync('taskset', ['-c', '-p', String(process.pid)], { encoding: 'utf8' });
    return out
      .slice(out.lastIndexOf(':') + 1)
      .trim()
      .split(',')
      .flatMap((part) => {
        const [from, to = from] = part.split('-').map(Number) as [number, number?];
        return Array.from({ length: to - from + 1 }, (_, i) => from + i);
      });
  } catch {
    return undefined;
  }
}

/** Pins this process's threads to the load generator's CPUs; see {@link CoreSplit}. */
export function splitCores(): CoreSplit {
  const cores = availableParallelism();
  const cpus = process.env.KEEPCOUNT_BENCH_PIN === '0' ? undefined : affinity();
  if (cpus === undefined || cpus.length < 2) return { cores, server: undefined, load: undefined };
  const split = { cores, server: cpus.slice(0, 1), load: cpus.slice(1) };
  execFileSync('taskset', ['-a', '-c', '-p', split.load.join(','), String(process.pid)], { stdio: 'ignore' });
  return split;
}

/** The server an HTTP setup runs beside: its framework's bare hello-world (`express-none` for `express-…`). */
export const bareOf = (setup: string): string => `${setup.split('-')[0]}-none`;

/** A benchmark server running in a child process. */
export interface ServerProcess {
  port: number;
  /** Sends `message` over IPC and resolves with the server's answer. */
  ask<T>(message: string): Promise<T>;
  stop(): void;
}

/**
 * Starts `script <name>` (run through tsx; it must print `{"port": N}` once listening) in a child
 * process, on `cpus` when given (see {@link splitCores}), and resolves once it listens.
 */
export async function startServer(script: string, name: string, cpus?: number[]): Promise<ServerProcess> {
  const node = [process.execPath, '--import=tsx', script, name];
  const [command, ...args] = cpus === undefined ? node : ['taskset', '-c', cpus.join(','), ...node];
  // spawn, not fork, so that taskset can come first; the IPC channel reaches node through it.
  const child = spawn(command as string, args, { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      const line = out.split('\n')[0];
      if (out.includes('\n') && line !== undefined) resolve((JSON.parse(line) as { port: number }).port);
    });
    child.once('exit', (code) => reject(new Error(`server ${name} exited with ${code} before listening`)));
  });
  const ask = <T>(message: string): Promise<T> =>
    new Promise((resolve) => {
      child.once('message', (answer) => resolve(answer as T));
      child.send(message);
    });
  return { port, ask, stop: () => child.kill() };
}

/**
 * Starts `setups` (names of `http-server.ts`) side by side, each in its own server process on
 * `cpus` and driven by its own autocannon from its own addresses, drives them all for
 * `warmUpSeconds` (until the JIT has compiled the hot path: what it compiles is paid once per
 * process, not per request, and a limiter brings more code to compile than the bare server), then
 * resolves with what `measure` makes of them, given a `driveAll(seconds)` that drives them all at
 * once again. The servers stop whatever happens.
 */
export async function sideBySide<T>(
  setups: string[],
  cpus: number[] | undefined,
  warmUpSeconds: number,
  measure: (servers: ServerProcess[], driveAll: (seconds: number) => Promise<autocannon.Result[]>) => Promise<T>,
): Promise<T> {
  const script = join(__dirname, 'http-server.ts');
  const servers = await Promise.all(setups.map((setup) => startServer(script, setup, cpus)));
  try {
    const nexts = servers.map(() => addresses());
    const driveAll = (seconds: number): Promise<autocannon.Result[]> =>
      Promise.all(servers.map((server, i) => drive(server.port, seconds, nexts[i]!)));
    await driveAll(warmUpSeconds);
    return await measure(servers, driveAll);
  } finally {
    for (const server of servers) server.stop();
  }
}

/** A fresh IPv4 address per request, in 10.0.0.0/8 then onwards: distinct for 2^32 requests. */
export function addresses(): () => string {
  let n = 0;
  return () => {
    const i = n++;
    return `${(10 + (i >>> 24)) & 0xff}.${(i >>> 16) & 0xff}.${(i >>> 8) & 0xff}.${i & 0xff}`;
  };
}

/** How many requests autocannon cycles through; see {@link drive}. */
const REQUEST_SLOTS = 64;

/**
 * Drives `port` for `seconds` with autocannon, each request from the next of `next`'s addresses in
 * `X-Forwarded-For` (the servers trust one proxy hop), so a limiter sees a new client every time.
 *
 * Not through autocannon's `setupRequest`: with one, it rebuilds the request from scratch each
 * time, merging every option of the run into a fresh object, and that was a quarter of its time
 * (`--cpu-prof`), enough that autocannon, not the servers, set the pace on node:http and Fastify.
 * Each connection asks its client's `getRequestBuffer` for the bytes to send, once per request,
 * so `setupClient` gives every client one that writes the next address into the request's fixed
 * text: the bytes autocannon would build, at a fraction of its cost. `REQUEST_SLOTS` requests
 * rather than one because autocannon resets a context each time it wraps around its list. Should
 * a later autocannon stop calling it, the requests would go out without the header: `drive`
 * throws when fewer were built than answered.
 */
export async function drive(port: number, seconds: number, next: () => string): Promise<autocannon.Result> {
  const head = `GET / HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: keep-alive\r\nx-forwarded-for: `;
  let built = 0;
  const addressed = (): Buffer => {
    built++;
    return Buffer.from(`${head}${next()}\r\n\r\n`, 'latin1');
  };
  const result = await autocannon({
    url: `http://127.0.0.1:${port}/`,
    connections: CONNECTIONS,
    duration: seconds,
    requests: Array.from({ length: REQUEST_SLOTS }, () => ({})),
    setupClient: (client) => {
      (client as unknown as { getRequestBuffer: () => Buffer }).getRequestBuffer = addressed;
    },
  });
  const answered = result.requests.total;
  if (built < answered) throw new Error(`autocannon sent ${answered} requests but built ${built} with addresses`);
  return result;
}
