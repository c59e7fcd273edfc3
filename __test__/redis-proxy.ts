/**
 * A TCP proxy in front of a redis-server that can cut the connection as a reply comes back: the
 * command ran in Redis, and the client never sees its reply (a network fault). Clients that
 * reconnect may then send the command again (ioredis does, node-redis rejects it).
 */
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface ReplyCutter {
  /** The port clients connect to. */
  readonly port: number;
  /** Cuts the connection at the next reply from Redis, instead of passing it on. */
  cutNextReply(): void;
  /** Replies cut so far. */
  readonly cuts: number;
  close(): Promise<void>;
}

export async function startReplyCutter(redisPort: number): Promise<ReplyCutter> {
  let cutNext = false;
  let cuts = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(redisPort, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
      socket.on('error', () => undefined);
    }
    client.on('data', (data) => upstream.write(data));
    upstream.on('data', (data) => {
      if (!cutNext) {
        client.write(data);
        return;
      }
      cutNext = false;
      cuts++;
      client.destroy();
      upstream.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    cutNextReply: () => {
      cutNext = true;
    },
    get cuts() {
      return cuts;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
