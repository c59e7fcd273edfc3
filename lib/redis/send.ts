/**
 * How keepcount/redis talks to Redis: one function that sends a command and resolves with its
 * reply, as rate-limit-redis' `sendCommand`, so any client works and none is a dependency.
 * Adapters for the two common clients are here; both are optional peer dependencies, typed by the
 * one method each adapter calls so these declarations compile without either installed.
 */

/**
 * Sends one Redis command (`args[0]` is its name) and resolves with the reply: integers as
 * numbers, bulk strings as strings, arrays as arrays, as ioredis and node-redis both reply.
 */
export type SendCommand = (args: string[]) => Promise<unknown>;

/** The part of an ioredis client {@link ioredisSender} uses. */
export interface IoredisLike {
  call(command: string, args: string[]): Promise<unknown>;
}

/** The part of a node-redis client (`redis` ≥ 4) {@link nodeRedisSender} uses. */
export interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
}

/** The part of a node-redis cluster (`createCluster`, `redis` ≥ 5) {@link nodeRedisClusterSender} uses. */
export interface NodeRedisClusterLike {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
}

/**
 * A {@link SendCommand} over an ioredis client or an ioredis `Cluster`: ioredis finds the slot of
 * a script call from its keys on its own. The arguments go as one array (ioredis flattens it into
 * the command), never spread: a spread passes each as a call argument, and V8 throws `RangeError:
 * Maximum call stack size exceeded` past its limit, before anything is sent (measured: a call of
 * 120,000 arguments went, one of 200,000 threw).
 */
export function ioredisSender(client: IoredisLike): SendCommand {
  return (args) => client.call(args[0] as string, args.slice(1));
}

/** A {@link SendCommand} over a connected node-redis client. */
export function nodeRedisSender(client: NodeRedisLike): SendCommand {
  return (args) => client.sendCommand(args);
}

/**
 * A {@link SendCommand} over a connected node-redis cluster, which routes a raw command by the
 * key it is given: the first key of an `EVAL`/`EVALSHA`/`FCALL` (keepcount sends only script
 * calls), else the command's first argument. Pair it with `RedisSync`'s `cluster: true`.
 */
export function nodeRedisClusterSender(cluster: NodeRedisClusterLike): SendCommand {
  return (args) => cluster.sendCommand(firstKey(args), false, args);
}

/** The first key of a script call (`EVAL script numkeys key …`), or the first argument of any other command. */
function firstKey(args: string[]): string | undefined {
  if (/^(EVAL|EVALSHA|FCALL)$/i.test(args[0] ?? '')) return Number(args[2]) > 0 ? args[3] : undefined;
  return args[1];
}
