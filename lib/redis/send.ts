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
  call(command: string, ...args: string[]): Promise<unknown>;
}

/** The part of a node-redis client (`redis` ≥ 4) {@link nodeRedisSender} uses. */
export interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
}

/** A {@link SendCommand} over an ioredis client (or Cluster). */
export function ioredisSender(client: IoredisLike): SendCommand {
  return (args) => client.call(args[0] as string, ...args.slice(1));
}

/** A {@link SendCommand} over a connected node-redis client. */
export function nodeRedisSender(client: NodeRedisLike): SendCommand {
  return (args) => client.sendCommand(args);
}
