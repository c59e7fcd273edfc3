/**
 * `onExchangeEnd` on a real server: the end of every exchange is reported exactly once, on every
 * path it can end by, and nothing of it stays behind on the connection.
 */
import test from 'ava';
import { Agent, createServer, IncomingMessage, request, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { onExchangeEnd } from '../lib/http/exchange.js';
import { abortAfter, close, deferred, eventually, listen, pipelineAndLeave } from './http-client.js';
import { open, record, requestLine, statuses } from './http-abuse.js';
import { title } from './helpers.js';

/** A server that reports each exchange's end in `ends` (by request path) and holds `/hang` open. */
async function serve(arrived: () => void) {
  const ends = new Map<string, number>();
  const responses: ServerResponse[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = req.url ?? '';
    onExchangeEnd(req, res, () => ends.set(path, (ends.get(path) ?? 0) + 1));
    responses.push(res);
    if (path.startsWith('/hang')) arrived();
    else res.end('ok');
  });
  return { server, ends, responses, port: await listen(server) };
}

/** `count` GETs one after another on one kept-alive connection. */
async function sequential(port: number, count: number): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  for (let i = 0; i < count; i++) {
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: `/${i}`, agent }, (res) => {
        res.resume().on('end', resolve);
      });
      req.on('error', reject).end();
    });
  }
  agent.destroy();
}

test(title('onExchangeEnd reports each exchange once: finished, aborted, or queued behind a pipeline'), async (t) => {
  let seen = 0;
  const hung = deferred();
  const { server, ends, responses, port } = await serve(() => {
    if (++seen === 1) hung.resolve();
  });
  try {
    // Finished exchanges on one kept-alive connection: one end each, no listener left on them.
    await sequential(port, 5);
    t.true(await eventually(() => ends.size === 5));
    t.deepEqual([...ends.values()], [1, 1, 1, 1, 1]);
    // The listener stays on a finished response (taking it off cost more than adding it); a
    // second `close` must not end the exchange again.
    for (const res of responses) res.emit('close');
    t.deepEqual([...ends.values()], [1, 1, 1, 1, 1], 'a second close ends nothing');
    t.true(
      responses.every((res) => res.listenerCount('close') <= 1),
      'one close listener per response at most',
    );

    // A client that leaves mid-response.
    await abortAfter(port, '/hang-abort', hung.promise);
    t.true(await eventually(() => ends.get('/hang-abort') === 1));

    // A pipelining client that leaves: the queued exchanges end with the connection.
    const queued = deferred();
    const before = seen;
    const check = setInterval(() => seen > before && queued.resolve(), 5);
    await pipelineAndLeave(port, '/hang-pipelined', 4, queued.promise);
    clearInterval(check);
    t.true(await eventually(() => ends.get('/hang-pipelined') === 4), `ended ${ends.get('/hang-pipelined')} of 4`);

    // Nothing ends twice, however long we wait.
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.true([...ends.values()].every((n) => n === 1 || n === 4));
    t.is(ends.get('/hang-abort'), 1);
  } finally {
    await close(server);
  }
});

test(title('a done that throws does not keep the other exchanges on its connection from ending'), (t) => {
  // A custom counter's release can throw from a socket's close listener: every exchange queued
  // on that socket must still end (each holds a slot), the error surfacing once all have.
  const socket = new Socket();
  const ended: number[] = [];
  for (let i = 0; i < 3; i++) {
    const req = new IncomingMessage(socket);
    onExchangeEnd(req, new ServerResponse(req), () => {
      ended.push(i);
      if (i < 2) throw new Error(`release ${i} failed`);
    });
  }
  t.throws(() => socket.emit('close'), { message: 'release 0 failed' });
  t.deepEqual(ended, [0, 1, 2]);
  socket.destroy();
});

test(title('an exchange whose response already closed is over at once, on a connection still open'), async (t) => {
  // A limit reached only after the response closed (an async middleware before it, a handler that
  // answered and went on): no `close` is left to come, so the end must be reported at once, and once.
  const ends: number[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    res.end('ok');
    res.on('close', () => {
      const before = ends.length;
      onExchangeEnd(req, res, () => ends.push(ends.length));
      t.is(ends.length, before + 1, 'reported during the call');
    });
  });
  const port = await listen(server);
  try {
    await sequential(port, 3);
    // The connection closed too (the agent is destroyed): nothing is reported again.
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.deepEqual(ends, [0, 1, 2]);
  } finally {
    await close(server);
  }
});

test(title('an exchange queued behind a pipeline ends when its handler ends or destroys it, once'), async (t) => {
  // Node emits no `finish` or `close` for a response queued behind an answer still being sent,
  // nor when it is destroyed: without its `end` and `destroy`, a client that holds the first
  // answer open would hold the exchanges behind it. Once the first is sent, the queued ones are
  // sent and close (the destroyed one takes the connection with it): none may end again.
  const ends = new Map<string, number>();
  const held: ServerResponse[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = req.url ?? '';
    onExchangeEnd(req, res, () => ends.set(path, (ends.get(path) ?? 0) + 1));
    if (path === '/held') held.push(res);
    else if (path === '/destroy') res.destroy();
    else res.end('ok');
  });
  const port = await listen(server);
  try {
    const socket = await open(port);
    const { text, closed } = record(socket);
    socket.write(['/held', '/end-1', '/end-2', '/destroy'].map((p) => requestLine('GET', p)).join(''));
    t.true(await eventually(() => ends.size === 3), `ended: ${[...ends.keys()].join(', ')}`);
    t.deepEqual(Object.fromEntries(ends), { '/end-1': 1, '/end-2': 1, '/destroy': 1 });
    t.deepEqual(statuses(text()), [], 'nothing sent yet');
    held[0]!.end('held');
    await closed;
    t.deepEqual(statuses(text()), [200, 200, 200]);
    t.deepEqual(Object.fromEntries(ends), { '/held': 1, '/end-1': 1, '/end-2': 1, '/destroy': 1 });
  } finally {
    await close(server);
  }
});
