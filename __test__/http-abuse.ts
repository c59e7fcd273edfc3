/**
 * What the http-abuse specs share: a record of unhandled rejections each test asserts empty, the
 * raw `net` connections that send requests by hand.
 */
import type { ExecutionContext } from 'ava';
import { connect, type Socket } from 'node:net';

/** Every unhandled rejection in this file; each test asserts none happened during it. */
const unhandled: unknown[] = [];
process.on('unhandledRejection', (reason) => unhandled.push(reason));

/** Asserts no unhandled rejection so far, after two turns of the event loop let late ones surface. */
export async function noUnhandled(t: ExecutionContext): Promise<void> {
  for (let i = 0; i < 2; i++) await new Promise((resolve) => setImmediate(resolve));
  t.deepEqual(unhandled.splice(0), [], 'no unhandled rejection');
}

/** A raw connection to `port`, resolved once connected. */
export function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.on('error', reject);
  });
}

/** `socket` with everything it receives, and a promise settled when it closes. */
export function record(socket: Socket): { text: () => string; closed: Promise<void> } {
  let text = '';
  socket.setEncoding('latin1').on('data', (chunk: string) => (text += chunk));
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('error', () => undefined); // a reset by the server is one of the endings under test
  return { text: () => text, closed };
}

export const requestLine = (method: string, path: string, extra = ''): string =>
  `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}\r\n`;

/** Statuses of the HTTP/1.1 responses in `text`, in order. */
export const statuses = (text: string): number[] => [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
