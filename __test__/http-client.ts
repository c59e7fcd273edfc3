/** Loopback HTTP for the http*.spec.ts files: start servers on port 0, send bounded requests. */
import { request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** Listens on 127.0.0.1 on a free port; returns the port. */
export function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}

/** Closes the server and every connection it still holds. */
export function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** One request on a fresh connection; rejects after 5 s so a hung server cannot hang a spec. */
export function get(port: number, path = '/', headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers, agent: false, timeout: 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

/** Sends a request and destroys it once the server has it (`arrived` resolves); resolves when gone. */
export function abortAfter(port: number, path: string, arrived: Promise<unknown>): Promise<void> {
  return new Promise((resolve) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, agent: false });
    req.on('error', () => resolve());
    req.on('close', () => resolve());
    req.end();
    void arrived.then(() => req.destroy());
  });
}

/**
 * A raw HTTP/1.1 client that pipelines `count` GETs of `path` on one connection, then closes the
 * connection once `arrived` resolves; resolves when the socket is gone.
 */
export function pipelineAndLeave(port: number, path: string, count: number, arrived: Promise<unknown>): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`.repeat(count));
      void arrived.then(() => socket.destroy());
    });
    socket.on('error', reject);
    socket.on('close', () => resolve());
  });
}

/** Polls `check` every 5 ms for up to `ms`; returns its last value. */
export async function eventually(check: () => boolean, ms = 2000): Promise<boolean> {
  const until = performance.now() + ms;
  while (!check() && performance.now() < until) await new Promise((r) => setTimeout(r, 5));
  return check();
}

/** A parsed `RateLimit`/`RateLimit-Policy` field: the item's name and its parameters. */
export function parseField(value: string | string[] | undefined): { name: string; params: Record<string, number> } {
  if (typeof value !== 'string') throw new Error(`expected one header line, got ${String(value)}`);
  const match = /^"((?:[^"\\]|\\.)*)"((?:;[a-z]+=\d+)*)$/.exec(value);
  if (match === null) throw new Error(`not a structured-field item with integer parameters: ${value}`);
  const params: Record<string, number> = {};
  for (const part of match[2]!.split(';').slice(1)) {
    const [k, v] = part.split('=');
    params[k!] = Number(v);
  }
  return { name: match[1]!, params };
}

/** A reply's rate-limit header fields, each `undefined` when absent: to compare replies in one assertion. */
export function limitFields(
  reply: Reply,
): Record<'policy' | 'rateLimit' | 'retryAfter', string | string[] | undefined> {
  const { headers } = reply;
  return { policy: headers['ratelimit-policy'], rateLimit: headers.ratelimit, retryAfter: headers['retry-after'] };
}

/** A deferred promise. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
