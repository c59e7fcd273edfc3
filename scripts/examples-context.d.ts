// The names README's examples take from the prose around them, for scripts/check-examples.mjs.
// A script, not a module: these are globals, which an example's own imports and declarations shadow.

/** The Express application the middleware examples mount on. */
declare const app: import('express').Express;
/** The Fastify instance the Fastify examples register on. */
declare const fastify: import('fastify').FastifyInstance;
/** The response of the request an example decides on. */
declare const res: import('node:http').ServerResponse;
/** A client's address, as a rate limit keys it. */
declare const clientIp: string;
/** Another node's heavy-hitter summary, of the same shape, threshold and seed. */
declare const otherNode: import('keepcount').HeavyHitters;
/** Where a request goes upstream. */
declare const url: string;
declare function urlFor(request: import('express').Request): string;
/** The application's logger. */
declare const log: { warn(fields: object, message: string): void };
/** A `RedisSync` set up as the keepcount/redis section shows. */
declare const sync: import('keepcount/redis').RedisSync;
