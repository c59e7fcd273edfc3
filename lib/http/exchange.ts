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
 * failed or aborted) or the connection under it did.
 *
 * The response's `close` alone is not enough. With HTTP/1.1 pipelining Node queues the responses
 * behind the one attached to the socket, and when the client disconnects only the attached one
 * emits `close`: the queued ones emit nothing, ever. The socket's `close` covers them, and an
 * exchange whose socket is already gone (its request never started) is over at once. The socket
 * gets one listener however many exchanges wait on it (a pipelining client would otherwise trip
 * Node's `MaxListenersExceededWarning`), and an exchange that ends first leaves that set. A
 * response already attached to its socket (every one but those queued behind a pipeline) needs
 * no place in that set: Node emits its `close` when the socket closes too.
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
}
