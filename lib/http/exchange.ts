/** When a node:http request/response exchange is over, on every path it can end by. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { EventEmitter } from 'node:events';

/**
 * `EventEmitter.prototype.on`, called on the response directly. Express swaps each response's
 * prototype for its own, and a method looked up through that chain per request cost an Express
 * hello-world about 3k instructions more than the call itself (callgrind; `res.on` is five
 * prototypes up). Node's responses do not override `on`.
 */
const { on } = EventEmitter.prototype;

/** The exchanges still open on each socket, ended together when it closes: one listener per socket. */
const open = new WeakMap<Socket, Set<() => void>>();

/**
 * Ends every exchange still open on the socket. One whose `done` throws (a custom counter's
 * release, say) does not keep the others from ending: the first error is rethrown once all ran.
 */
function endAll(this: Socket): void {
  const ends = open.get(this);
  open.delete(this);
  let failed: { error: unknown } | undefined;
  for (const end of ends ?? []) {
    try {
      end();
    } catch (error) {
      failed ??= { error };
    }
  }
  if (failed !== undefined) throw failed.error;
}

/**
 * Calls `done` once, when the exchange of `req` and `res` is over: the response closed (finished,
 * failed or aborted) or the connection under it did, or, for a response queued behind a pipeline,
 * the handler ended or destroyed it.
 *
 * The response's `close` alone is not enough. With HTTP/1.1 pipelining Node queues the responses
 * behind the one attached to the socket, and when the client disconnects only the attached one
 * emits `close`: the queued ones emit nothing, ever. The socket's `close` covers them, and an
 * exchange whose socket is already gone (its request never started) is over at once. The socket
 * gets one listener however many exchanges wait on it (a pipelining client would otherwise trip
 * Node's `MaxListenersExceededWarning`), and an exchange that ends first leaves that set. A
 * response already attached to its socket (every one but those queued behind a pipeline) needs
 * no place in that set: Node emits its `close` when the socket closes too.
 *
 * Nor is the socket's `close`: while the client stays, a queued response emits neither `finish`
 * nor `close` until every response ahead of it was sent, and `res.destroy()` on it emits nothing
 * either. One connection whose first answer stays open (a stream, or a large answer it does not
 * read) followed by `max` pipelined requests held every slot of the upstream after their handlers
 * had answered, for as long as it liked, and the README's write deadline freed none. So a queued
 * response's exchange also ends when the handler calls its `end` or `destroy` (once Node's own
 * returned). Its upstream call is over by then, as when an attached response closes (a handler
 * that streams the upstream's answer ends the response after the last chunk, held back by
 * backpressure meanwhile), so the upstream's real concurrency stays within `max`. One connection
 * then keeps a slot past its handler only for the response being sent on it when the limit ran.
 * What a pipeline can make the server buffer is Node's bound, as for any route: it stops reading
 * the connection once its queued answers reach the socket's high-water mark (16 KiB on Node 20),
 * though every request of the read under way still runs (see the README).
 */
export function onExchangeEnd(req: IncomingMessage, res: ServerResponse, done: () => void): void {
  const socket: Socket | null = req.socket;
  // `destroyed`, not also `closed`: Node sets both as a response closes, and on an Express
  // response each read up its swapped prototype chain cost ~4k instructions.
  if (res.destroyed || socket === null || socket.destroyed) {
    done();
    return;
  }
  let over = false;
  if (res.socket === socket) {
    // Express hello-world under callgrind: 6k instructions a request less than through the set.
    on.call(res, 'close', () => {
      if (over) return;
      over = true;
      done();
    });
    return;
  }
  let ends = open.get(socket);
  if (ends === undefined) {
    ends = new Set();
    open.set(socket, ends);
    socket.once('close', endAll);
  }
  const waiting = ends;
  const end = (): void => {
    if (over) return;
    over = true;
    waiting.delete(end);
    done();
  };
  waiting.add(end);
  // The listener stays on the response once it has run, here and above: the response is done with
  // and goes with it, and `off` cost more than `on` (Express hello-world under callgrind: 30.7k
  // instructions a request for this function with `off`, 19.1k without; the flag keeps a second
  // `close` from ending the exchange twice). `on`, not `once`: `once` would wrap `end` in two more
  // objects.
  on.call(res, 'close', end);
  // Own properties, so they win over Express's swapped prototype; Fastify ends `reply.raw` through
  // them too. Only once Node's method returned: one that throws (a bad chunk) ended nothing.
  const { end: endResponse, destroy } = res;
  res.end = function (this: ServerResponse, ...args: unknown[]) {
    const result: unknown = Reflect.apply(endResponse, this, args);
    end();
    return result;
  } as ServerResponse['end'];
  res.destroy = function (this: ServerResponse, error?: Error) {
    const result = destroy.call(this, error);
    end();
    return result;
  };
}
