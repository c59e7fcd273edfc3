/**
 * What `Estimator.openShared` and `Rate.openShared` have in common: the segment name and where it
 * lives, validated once, and the backend that can share it.
 *
 * A segment is a file, `<dir>/keepcount.<name>`, that every process of the host maps: `dir` is
 * `/dev/shm` on Linux (memory, cleared at reboot) and the system's temporary directory on macOS,
 * unless the `dir` option says otherwise. Processes share counts when they open the same name in
 * the same directory with the same configuration.
 *
 * @module
 */
import { accessSync, constants, lstatSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { active } from './backend.js';
import type { SharedBackend } from './core.js';
import { invalidType, outOfRange, withCode, type KeepcountError } from './errors.js';
import { integerOption, seedOption } from './options.js';

/** Longest segment name, in bytes (`crates/limits/src/shared/segment.rs` `MAX_NAME_BYTES`). */
const MAX_NAME_BYTES = 200;
/** Letters, digits, `.`, `_` and `-`, not starting with `.` and without `..`: it names one file in `dir`. */
const NAME = /^(?!\.)(?!.*\.\.)[A-Za-z0-9._-]+$/;
/** Default file mode: the owner reads and writes, nobody else. */
const DEFAULT_MODE = 0o600;

/** Where a shared segment lives: options of `Estimator.openShared`, `Rate.openShared` and `unlink`. */
export interface SharedPlacement {
  /**
   * The directory of the segment file. Every process that shares the segment must name the same
   * one; containers need it shared between them (`--ipc=host` for `/dev/shm`, or a mounted volume).
   * Defaults to `/dev/shm` on Linux, the system's temporary directory elsewhere.
   */
  dir?: string;
}

/** How a shared segment is created, beside where. */
export interface SharedCreation extends SharedPlacement {
  /**
   * Permissions of the file when this call creates it, applied exactly whatever the umask: an
   * integer in [0, 0o777] giving the group and others read and write together or neither (read
   * alone would let a user who cannot write the file lock a shared `Inflight`'s slots, and read
   * its seed). Defaults to `0o600` (only the owner's processes can open it); `0o660` shares it
   * with the group. An existing file with bits beyond it, or another user's that it does not let
   * in (the group's: a file of one of this process's groups; others': anyone's), is refused
   * (`ERR_KEEPCOUNT_MISMATCH`): whoever else can write the file can rewrite the counts or
   * truncate it under the processes that map it.
   */
  mode?: number;
}

/** A validated segment name. */
export function sharedName(name: unknown): string {
  if (typeof name !== 'string') throw invalidType('The "name" argument', 'of type string', name);
  if (name.length > MAX_NAME_BYTES || !NAME.test(name)) {
    throw outOfRange(
      'The "name" argument',
      `1 to ${MAX_NAME_BYTES} ASCII letters, digits, ".", "_" or "-", not starting with "." nor containing ".."`,
      name,
    );
  }
  return name;
}

/** `dir` from validated options (`undefined`: the default). */
export function sharedDir(options: SharedPlacement): string | undefined {
  const { dir } = options;
  if (dir === undefined) return undefined;
  if (typeof dir !== 'string') throw invalidType('The "dir" option', 'of type string', dir);
  if (dir === '') throw outOfRange('The "dir" option', 'a non-empty path', dir);
  // No path holds one, and the system's error for it would name a path cut at the NUL.
  if (dir.includes('\0')) throw invalidType('The "dir" option', 'a path without null bytes', dir);
  return dir;
}

/**
 * Runs `segment` (an open or an unlink of segment `name` in `dir`, `undefined`: the default
 * directory) and, if it fails with `ERR_KEEPCOUNT_IO` because the `dir` option names no directory,
 * or one this process cannot create the segment in, throws an `ERR_KEEPCOUNT_IO` saying so
 * instead, the system's error as its `cause`: that one names a path (a file in `dir`, or the
 * directory the segment could not be created in) but not the option to fix. Checked once the call
 * failed, so an open pays nothing for it and the fallback's `ERR_KEEPCOUNT_UNSUPPORTED` comes
 * first; an unlink of a directory that does not exist still removes nothing without error.
 */
export function inSharedDir<T>(dir: string | undefined, name: string, segment: () => T): T {
  try {
    return segment();
  } catch (error) {
    throw (dir !== undefined && (noDirectory(dir, error) ?? notWritable(dir, name, error))) || error;
  }
}

/** The error naming the `dir` option when `error` is an I/O error and `dir` is not a directory. */
function noDirectory(dir: string, error: unknown): KeepcountError | undefined {
  if ((error as { code?: unknown } | null)?.code !== 'ERR_KEEPCOUNT_IO') return undefined;
  let why: string;
  try {
    if (statSync(dir).isDirectory()) return undefined;
    why = 'is not a directory';
  } catch (statError) {
    const code = (statError as NodeJS.ErrnoException).code;
    // ENOTDIR: a file where the path needs a directory (`/etc/passwd/x`); anything else (EACCES
    // on a parent, say) is the system's to tell.
    if (code !== 'ENOENT' && code !== 'ENOTDIR') return undefined;
    why = 'does not exist (create it first)';
  }
  return withCode(
    new Error(`The "dir" option names no directory: ${dir} ${why}`, { cause: error }),
    'ERR_KEEPCOUNT_IO',
  );
}

/**
 * The error naming the `dir` option when `error` is an I/O error creating segment `name` in
 * `dir`, a directory this process cannot write. Only while the segment does not exist: an open or
 * unlink of an existing one fails on that file, which the system's error names.
 */
function notWritable(dir: string, name: string, error: unknown): KeepcountError | undefined {
  if ((error as { code?: unknown } | null)?.code !== 'ERR_KEEPCOUNT_IO') return undefined;
  try {
    lstatSync(join(dir, `keepcount.${name}`));
    return undefined;
  } catch {
    // No segment: the failed call was creating it.
  }
  let code: string | undefined;
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
    return undefined;
  } catch (accessError) {
    code = (accessError as NodeJS.ErrnoException).code;
  }
  let why: string;
  if (code === 'EROFS') why = 'is on a read-only filesystem (EROFS)';
  else if (code === 'EACCES' || code === 'EPERM') why = `is not writable by it (${code})`;
  else return undefined;
  return withCode(
    new Error(`The "dir" option names a directory this process cannot create the segment in: ${dir} ${why}`, {
      cause: error,
    }),
    'ERR_KEEPCOUNT_IO',
  );
}

/** `mode` from validated options. */
export function sharedMode(options: SharedCreation): number {
  const mode = integerOption('mode', options.mode, 0, 0o777, DEFAULT_MODE);
  // Read alone serves no process (they open segments to write), and lets a user who cannot write
  // the file lock a shared Inflight's slots (crates/limits segment/file.rs `valid_mode`).
  if ([(mode >> 3) & 0o6, mode & 0o6].some((rw) => rw !== 0 && rw !== 0o6)) {
    throw outOfRange(
      'The "mode" option',
      `a mode giving the group and others read and write together or neither (e.g. 0o600, 0o660), not 0o${mode.toString(8)}`,
      mode,
    );
  }
  return mode;
}

/** The seed every process must agree on: required, since a random default would differ per process. */
export function sharedSeed(seed: unknown): bigint {
  if (seed === undefined) {
    throw invalidType('The "seed" option', 'of type bigint or number (every process must pass the same one)', seed);
  }
  return seedOption(seed);
}

/** The active backend's shared segments, or `ERR_KEEPCOUNT_UNSUPPORTED` naming what to use instead. */
export function sharedBackend(what: string): SharedBackend {
  if (active.shared !== null) return active.shared;
  throw unsupported(what);
}

function unsupported(what: string): KeepcountError {
  return withCode(
    new Error(
      `${what} needs the native backend: the TypeScript fallback cannot map memory shared between processes, ` +
        'and a per-process count would silently admit more than the limit. Build or install the native ' +
        'addon (see "Backends and platforms" in the README); within one process, share one object, and across its ' +
        'worker threads a SharedArrayBuffer (Estimator.createSharedBuffer and fromSharedBuffer, the same for Rate).',
    ),
    'ERR_KEEPCOUNT_UNSUPPORTED',
  );
}
