/**
 * @fastify/rate-limit's in-memory store (the plugin's default), which the package does not type:
 * the bench times its `incr` beside keepcount's store.
 */
declare module '@fastify/rate-limit/store/LocalStore.js' {
  type Callback = (error: Error | null, result?: { current: number; ttl: number }) => void;
  class LocalStore {
    constructor(continueExceeding: boolean, exponentialBackoff: boolean, cache?: number);
    incr(key: string, callback: Callback, timeWindow: number, max: number): void;
  }
  export default LocalStore;
}
