/**
 * The load-generator side of the HTTP benches (`http.ts`, `request-path.ts`): a benchmark server
 * started in its own process, and autocannon driving it with a fresh client address per request.
 */
import { fork } from 'node:child_process';
import autocannon from 'autocannon';

/** Connections autocannon keeps open. */
export const CONNECTIONS = 32;

/** A benchmark server running in a child process. */
export interface ServerProcess {
  port: number;
  /** Sends `message` over IPC and resolves with the server's answer. */
  ask<T>(message: string): Promise<T>;
  stop(): void;
}

/**
 * Starts `script <name>` (run through tsx; it must print `{"port": N}` once listening) in a child
 * process, and resolves once it listens.
 */
export async function startServer(script: string, name: string): Promise<ServerProcess> {
  const child = fork(script, [name], {
    execArgv: ['--import=tsx'],
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
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

/** A fresh IPv4 address per request, in 10.0.0.0/8 then onwards: distinct for 2^32 requests. */
export function addresses(): () => string {
  let n = 0;
  return () => {
    const i = n++;
    return `${(10 + (i >>> 24)) & 0xff}.${(i >>> 16) & 0xff}.${(i >>> 8) & 0xff}.${i & 0xff}`;
  };
}

/**
 * Drives `port` for `seconds` with autocannon, each request from the next of `next`'s addresses in
 * `X-Forwarded-For` (the servers trust one proxy hop), so a limiter sees a new client every time.
 */
export function drive(port: number, seconds: number, next: () => string): Promise<autocannon.Result> {
  return autocannon({
    url: `http://127.0.0.1:${port}/`,
    connections: CONNECTIONS,
    duration: seconds,
    requests: [
      {
        setupRequest: (request) => {
          request.headers = { ...request.headers, 'x-forwarded-for': next() };
          return request;
        },
      },
    ],
  });
}
