/**
 * The sync's options: {@link RedisSyncOptions} checked and defaulted into what a
 * {@link RedisSync} runs on, and the options every synced structure takes from its sync (its
 * name, which is its keys' hash tag, and its lease).
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { invalidType, outOfRange } from '../errors.js';
import { integerOption, optionsObject } from '../options.js';
import type { SendCommand } from './send.js';
import type { RedisSyncOptions } from './sync-types.js';

/** Longest `syncMs`, `timeoutMs` and `staleAfterMs`: an hour. */
const MAX_MS = 3_600_000;

/**
 * Longest `leaseMs` of a synced structure: two hours, twice the longest `syncMs`, so that a lease
 * can outlast a sync period whatever it is (at one hour the option had no valid value, an
 * integer in [3,600,001, 3,600,000], with `syncMs` at its most). The sync script takes a lease
 * scored later than this from now for none keepcount wrote (script.ts).
 */
export const MAX_LEASE_MS = 7_200_000;

/** {@link RedisSyncOptions} checked, with their defaults filled in. */
export interface SyncConfig {
  send: SendCommand;
  syncMs: number;
  timeoutMs: number;
  staleAfterMs: number;
  prefix: string;
  nodeId: string;
  cluster: boolean;
}

/** `options` checked (throwing for the first invalid one, in their order here) and defaulted. */
export function syncConfig(options: RedisSyncOptions): SyncConfig {
  const o = optionsObject(options);
  if (typeof o.sendCommand !== 'function') {
    throw invalidType('The "sendCommand" option', 'of type function', o.sendCommand);
  }
  const send = o.sendCommand;
  const syncMs = integerOption('syncMs', o.syncMs, 1, MAX_MS, 100);
  const timeoutMs = integerOption('timeoutMs', o.timeoutMs, 1, MAX_MS, 1000);
  const staleAfterMs = integerOption('staleAfterMs', o.staleAfterMs, 1, MAX_MS, Math.min(timeoutMs + syncMs, MAX_MS));
  const prefix = nameOption('prefix', o.prefix ?? 'keepcount');
  const nodeId = nameOption('nodeId', o.nodeId ?? randomUUID());
  if (o.cluster !== undefined && typeof o.cluster !== 'boolean') {
    throw invalidType('The "cluster" option', 'of type boolean', o.cluster);
  }
  return { send, syncMs, timeoutMs, staleAfterMs, prefix, nodeId, cluster: o.cluster ?? false };
}

/**
 * A synced structure's `leaseMs` on `sync`: given, an integer in (`syncMs`, 7,200,000]; else the
 * sync's `staleAfterMs`, but never below `syncMs + timeoutMs`. A lease of `staleAfterMs` alone
 * could be at or below `syncMs` (a `staleAfterMs` of 200 with syncs every 200 ms), which the
 * option itself refuses: such a lease runs out between two syncs that come on time, and the other
 * nodes drop a live node's slots or loans over and over.
 */
export function leaseMsOption(value: unknown, sync: Pick<SyncConfig, 'syncMs' | 'timeoutMs' | 'staleAfterMs'>): number {
  const fallback = Math.min(Math.max(sync.staleAfterMs, sync.syncMs + sync.timeoutMs), MAX_LEASE_MS);
  return integerOption('leaseMs', value, sync.syncMs + 1, MAX_LEASE_MS, fallback);
}

/** A key component: a non-empty string without `{` or `}`, which would move the hash tag. */
export function nameOption(name: string, value: unknown): string {
  if (typeof value !== 'string') throw invalidType(`The "${name}" option`, 'of type string', value);
  if (value.length === 0 || /[{}]/.test(value)) {
    throw outOfRange(`The "${name}" option`, 'a non-empty string without { or }', value);
  }
  return value;
}
