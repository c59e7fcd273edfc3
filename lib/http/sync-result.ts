/**
 * What the middleware reads at once from what it calls on every request: a value, never a
 * promise. Shared by the option parsers and the adapters.
 *
 * @module
 */
import { types } from 'node:util';
import { invalidType } from '../errors.js';

/**
 * `result`, unless it is a promise or another thenable: then a TypeError naming `what`, the
 * rejection of a native promise marked handled first. For what the middleware calls on every
 * request and reads at once (a per-request function, or the `consume()`, `check()`, `incr()` or
 * `enter()` of an object given as `quota`, `limiter`, `inflight` or `clientInflight`): an `async`
 * one's promise was read as a refusal (every request a 429), and its rejection, unhandled, ended
 * the process.
 */
export function syncResult<T>(what: string, result: T): T {
  if (typeof result === 'object' && result !== null && typeof (result as { then?: unknown }).then === 'function') {
    // isPromise, not instanceof: a promise from another realm (a `vm` context) is one too.
    if (types.isPromise(result)) Promise.prototype.then.call(result, undefined, ignore);
    throw invalidType(what, 'a value, not a promise: it is called synchronously on every request', result);
  }
  return result;
}

/** Swallows the rejection of a promise already reported as a misused result. */
const ignore = (): void => undefined;

/** What {@link syncResult} names for a `quota`'s `consume()` and a `limiter`'s `check()`. */
export const CONSUME_RESULT = 'The "quota" option\'s consume() result';
export const CHECK_RESULT = 'The "limiter" option\'s check() result';
