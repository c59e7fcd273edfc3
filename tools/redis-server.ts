/**
 * A real `redis-server` for the keepcount/redis specs, the `--redis` demo and the Redis benchmark:
 * its own process on a free loopback port, with a temporary directory for its files, never the
 * system service. `.ci/run` installs Debian's `redis-server` (and with it `redis-cli`) when it is
 * missing. Servers still running when this process exits, however it exits short of SIGKILL, are
 * killed with it: a failed test or an interrupted demo leaves no server behind.
 *
 * Fault helpers act on that process only: `restart()` kills and starts it again on the same port
 * and directory (so an append-only file, when enabled, brings the data back), `pause()`/`resume()`
 * send SIGSTOP/SIGCONT: a hang, not a refusal, as a stuck server looks to its clients.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Options of {@link startRedis}. */
export interface RedisServerOptions {
  /** Keep an append-only file fsynced on every write, so a restart loses nothing. Defaults to false. */
  appendonly?: boolean;
  /**
   * Start as a Redis Cluster node (`cluster-enabled`, its config file in the server's directory),
   * with its cluster bus on this port: the default, port + 10000, is out of range for most ports
   * the kernel hands out. Defaults to a standalone server.
   */
  clusterBusPort?: number;
}

/** A running test server. */
export interface RedisServer {
  readonly port: number;
  readonly url: string;
  /** Kills the server (SIGKILL) and starts it again on the same port and directory. */
  restart(): Promise<void>;
  /** Kills the server (SIGKILL) and leaves it down. */
  kill(): Promise<void>;
  /** Starts a killed server again. */
  start(): Promise<void>;
  /** SIGSTOP: the server hangs with its connections open. */
  pause(): void;
  /** SIGCONT after {@link pause}. */
  resume(): void;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}

/** How long a starting server may take to accept connections. */
const START_TIMEOUT_MS = 10_000;

/** Servers of this process not yet stopped: killed if the process exits first. */
const running = new Set<ChildProcess>();
/** Their directories: removed if the process exits (or is interrupted) before `stop()`. */
const directories = new Set<string>();
function abandon(): void {
  for (const child of running) child.kill('SIGKILL');
  // The killed servers no longer write there (SIGKILL is delivered before rmSync returns, and a
  // file a dying server still held open goes with the directory entry).
  for (const dir of directories) rmSync(dir, { recursive: true, force: true });
}
process.once('exit', abandon);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    abandon();
    process.kill(process.pid, signal);
  });
}

/**
 * Throws a plain error saying what to install when `redis-server` is not on the PATH, rather
 * than the spawn's ENOENT.
 */
export function requireRedisServer(): void {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      'redis-server was not found on the PATH: install Redis >= 7 (Debian/Ubuntu: apt-get install redis-server)',
    );
  }
}

/** A free TCP port on 127.0.0.1, from the kernel. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject()));
    });
  });
}

/** Resolves once `port` accepts a connection and answers PING, or rejects after {@link START_TIMEOUT_MS}. */
async function waitForPing(port: number, child: ChildProcess): Promise<void> {
  const deadline = performance.now() + START_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with code ${child.exitCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.setTimeout(500, () => socket.destroy());
      socket.on('error', () => resolve(false));
      socket.on('close', () => resolve(false));
      socket.on('connect', () => socket.write('PING\r\n'));
      socket.on('data', (data) => {
        resolve(data.toString().startsWith('+PONG'));
        socket.destroy();
      });
    });
    if (ok) return;
    if (performance.now() > deadline) throw new Error(`redis-server on port ${port} did not answer PING`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Starts a `redis-server` on a free loopback port with a fresh temporary directory. */
export async function startRedis(options: RedisServerOptions = {}): Promise<RedisServer> {
  requireRedisServer();
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'keepcount-redis-'));
  directories.add(dir);
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--daemonize',
    'no',
    '--loglevel',
    'warning',
    ...(options.appendonly === true ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']),
    ...(options.clusterBusPort === undefined
      ? []
      : [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          join(dir, 'nodes.conf'),
          '--cluster-port',
          String(options.clusterBusPort),
        ]),
  ];
  let child: ChildProcess | undefined;
  const exited = (): Promise<void> =>
    new Promise((resolve) => {
      if (child === undefined || child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once('exit', () => resolve());
    });
  const start = async (): Promise<void> => {
    const started = spawn('redis-server', args, { stdio: 'ignore' });
    child = started;
    running.add(started);
    started.once('exit', () => running.delete(started));
    await waitForPing(port, started);
  };
  const kill = async (): Promise<void> => {
    const done = exited();
    child?.kill('SIGKILL');
    await done;
  };
  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    restart: async () => {
      await kill();
      await start();
    },
    kill,
    start,
    pause: () => child?.kill('SIGSTOP'),
    resume: () => child?.kill('SIGCONT'),
    stop: async () => {
      child?.kill('SIGCONT');
      await kill();
      rmSync(dir, { recursive: true, force: true });
      directories.delete(dir);
    },
  };
}
