// Estimator.openShared and Rate.openShared: counters shared by real processes (child_process.fork
// workers) through a segment file. On the fallback backend every entry point must refuse with
// ERR_KEEPCOUNT_UNSUPPORTED rather than count per process; argument checks are the same on both.
import { chmodSync, chownSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { crc32 } from '../fallback/crc32.js';
import { backend, Estimator, Inflight, Limiter, ManualClock, Rate } from '../lib/index.js';
import { throwsShape, title } from './helpers.js';
import { pidNamespaceArgs, scratch, sleep, unsupported, workers } from './shared-workers.js';

const SEED = 0x5eedn;

test(title('four processes incrementing one key reach the exact total, and all read it'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Estimator.openShared('hits', { seed: SEED, dir }), unsupported('Estimator.openShared'));
    return;
  }
  const all = await workers(4);
  await Promise.all(all.map((w) => w.send({ op: 'open-estimator', name: 'hits', dir })));
  const perWorker = 20_000;
  const seen = (await Promise.all(all.map((w) => w.send({ op: 'incr', key: 'hot', times: perWorker })))) as number[];
  for (const count of seen) t.true(count >= perWorker && count <= 4 * perWorker);
  const after = await Promise.all(all.map((w) => w.send({ op: 'get', key: 'hot' })));
  t.deepEqual(after, [4 * perWorker, 4 * perWorker, 4 * perWorker, 4 * perWorker]);
  const here = Estimator.openShared('hits', { seed: SEED, dir });
  t.is(here.get('hot'), 4 * perWorker);
  here.close();
  await Promise.all(all.map((w) => w.exit()));
});

test(title('a window quota on a shared Rate holds one limit for all processes together'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Rate.openShared('quota', { intervalMs: 60_000, seed: SEED, dir }),
      unsupported('Rate.openShared'),
    );
    return;
  }
  const all = await workers(3);
  await Promise.all(all.map((w) => w.send({ op: 'open-rate', name: 'quota', dir, intervalMs: 60_000 })));
  // Three processes, 10 requests each from one client, a limit of 12: per-process limits would
  // admit 30, the shared one exactly 12 (one key alone in the sketch reads exactly).
  const allowed = (await Promise.all(
    all.map((w) => w.send({ op: 'consume', key: 'client', times: 10, limit: 12 })),
  )) as number[];
  t.is(
    allowed.reduce((a, b) => a + b, 0),
    12,
    `allowed per process: ${allowed.join(', ')}`,
  );
  await Promise.all(all.map((w) => w.exit()));
});

test(title('a shared Rate rotates once per interval, seen identically by every process'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Rate.openShared('r', { intervalMs: 1000, seed: SEED, dir }), unsupported('Rate.openShared'));
    return;
  }
  // Margins: each round's observations take a few ms right after an interval starts, and all
  // reads come within a few ms of each other 1.5 intervals later, so a read is half an interval
  // from either edge. The test fails only if this machine stalls a process for 1.5 s (timers on
  // it have run 0.8 s late).
  const intervalMs = 3000;
  const all = await workers(3);
  await Promise.all(all.map((w) => w.send({ op: 'open-rate', name: 'r', dir, intervalMs })));
  // Let the interval the creator started lapse, then start a fresh one with a read.
  await sleep(2.5 * intervalMs);
  t.deepEqual(await all[0]!.send({ op: 'sample', key: 'k' }), [0, 0]);
  for (let round = 1; round <= 3; round++) {
    await Promise.all(all.map((w) => w.send({ op: 'observe', key: 'k', times: 100 * round })));
    await sleep(1.5 * intervalMs);
    const samples = await Promise.all(all.map((w) => w.send({ op: 'sample', key: 'k' })));
    // The first read ended the interval for everyone; nobody ended it again.
    t.deepEqual(samples, [
      [300 * round, 0],
      [300 * round, 0],
      [300 * round, 0],
    ]);
  }
  await Promise.all(all.map((w) => w.exit()));
});

test(title('opening with another shape, seed or kind is ERR_KEEPCOUNT_MISMATCH naming the field'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Rate.unlink('m', { dir }), unsupported('Rate.unlink'));
    return;
  }
  using e = Estimator.openShared('m', { hashes: 4, slots: 1024, seed: 1n, dir });
  e.incr('a');
  // Every mismatch of options says how to go on, naming the call that removes the segment as it was
  // opened (a segment of another kind is another's: see the next test).
  const fix = (opener: string, name = 'm') =>
    `to change them, call ${opener}.unlink('${name}', { dir: '${dir}' }) once no process has it open (or use a new name)`;
  const mismatch = (what: string, opener: string, name = 'm') => ({
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message:
      `Cannot open the shared segment: ${join(dir, `keepcount.${name}`)} was created with ${what} as requested: ` +
      `every process must open it with the same options; ${fix(opener, name)}`,
  });
  // Never the seeds themselves: they are secret, and messages end up in logs.
  throwsShape(t, () => Estimator.openShared('m', { hashes: 4, slots: 1024, seed: 2n, dir }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message:
      `Cannot open the shared segment: ${join(dir, 'keepcount.m')} was created with another seed than the one ` +
      'requested (seeds are secret: neither is shown): every process must open it with the same options; ' +
      fix('Estimator'),
  });
  throwsShape(
    t,
    () => Estimator.openShared('m', { hashes: 4, slots: 512, seed: 1n, dir }),
    mismatch('slots 1024, not 512', 'Estimator'),
  );
  throwsShape(t, () => Rate.openShared('m', { intervalMs: 1000, hashes: 4, slots: 1024, seed: 1n, dir }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message:
      "Cannot open the shared segment: the name 'm' is taken by an Estimator segment: use another name " +
      `(${join(dir, 'keepcount.m')} was created by Estimator.openShared, not Rate.openShared as requested)`,
  });
  using r = Rate.openShared('r', { intervalMs: 1000, seed: 1n, dir });
  r.observe('a');
  // The interval as the option gives it, in milliseconds (it was in nanoseconds).
  throwsShape(
    t,
    () => Rate.openShared('r', { intervalMs: 60_000, seed: 1n, dir }),
    mismatch('intervalMs 1000, not 60000', 'Rate', 'r'),
  );
});

test(
  title('a name taken by another kind of segment is ERR_KEEPCOUNT_MISMATCH advising another name, not unlink'),
  (t) => {
    const dir = scratch(t);
    const quota = { requests: { perSecond: 10, burst: 20 } };
    if (backend === 'fallback') {
      throwsShape(
        t,
        () => Limiter.openShared('api-clients', { quota, seed: SEED, dir }),
        unsupported('Limiter.openShared'),
      );
      throwsShape(t, () => Inflight.openShared('api-clients', { seed: SEED, dir }), unsupported('Inflight.openShared'));
      return;
    }
    // The other workers' limiter: unlinking it, as a mismatch of options advises, would split them.
    using limiter = Limiter.openShared('api-clients', { quota, seed: SEED, dir });
    limiter.check('a');
    const error = t.throws(() => Inflight.openShared('api-clients', { seed: SEED, dir }), {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_MISMATCH',
      message:
        "Cannot open the shared segment: the name 'api-clients' is taken by a Limiter segment: use another name " +
        `(${join(dir, 'keepcount.api-clients')} was created by Limiter.openShared, not Inflight.openShared as requested)`,
    });
    t.notRegex(error.message, /unlink/);
    // In the default directory too, where the unlink call would name no dir.
    throwsShape(t, () => Rate.openShared('api-clients', { intervalMs: 1000, seed: SEED, dir }), {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_MISMATCH',
      message:
        /^Cannot open the shared segment: the name 'api-clients' is taken by a Limiter segment: use another name \(/,
    });
    // The segment is untouched: the limiter goes on, and opens again as what it is.
    using again = Limiter.openShared('api-clients', { quota, seed: SEED, dir });
    t.true(again.check('a').allowed);
  },
);

test(title('a "dir" that names no directory is ERR_KEEPCOUNT_IO naming the option, not a file in it'), (t) => {
  const scratchDir = scratch(t);
  const missing = join(scratchDir, 'no', 'such');
  const file = join(scratchDir, 'file');
  writeFileSync(file, '');
  const quota = { requests: { perSecond: 10, burst: 20 } };
  const opens = {
    'Estimator.openShared': (dir: string) => Estimator.openShared('d', { seed: SEED, dir }),
    'Rate.openShared': (dir: string) => Rate.openShared('d', { intervalMs: 1000, seed: SEED, dir }),
    'Inflight.openShared': (dir: string) => Inflight.openShared('d', { seed: SEED, dir }),
    'Limiter.openShared': (dir: string) => Limiter.openShared('d', { quota, seed: SEED, dir }),
  };
  const unlinks = {
    'Estimator.unlink': (dir: string) => Estimator.unlink('d', { dir }),
    'Rate.unlink': (dir: string) => Rate.unlink('d', { dir }),
    'Inflight.unlink': (dir: string) => Inflight.unlink('d', { dir }),
    'Limiter.unlink': (dir: string) => Limiter.unlink('d', { dir }),
  };
  if (backend === 'fallback') {
    // The backend's refusal first: no directory would make a shared segment work here.
    for (const [what, call] of Object.entries({ ...opens, ...unlinks })) {
      for (const dir of [missing, file]) throwsShape(t, () => call(dir), unsupported(what));
    }
    return;
  }
  const noDirectory = (dir: string, why: string) => ({
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_IO',
    message: `The "dir" option names no directory: ${dir} ${why}`,
  });
  const absent = 'does not exist (create it first)';
  for (const open of Object.values(opens)) {
    throwsShape(t, () => open(missing), noDirectory(missing, absent));
    throwsShape(t, () => open(file), noDirectory(file, 'is not a directory'));
    // A file where the path needs a directory: no such directory either.
    throwsShape(t, () => open(join(file, 'sub')), noDirectory(join(file, 'sub'), absent));
  }
  // The system's error stays as the cause, for whoever needs the file it failed on.
  const error = t.throws(() => opens['Rate.openShared'](missing));
  t.like(error?.cause, { code: 'ERR_KEEPCOUNT_IO' });
  t.true(
    (error?.cause as Error).message.startsWith(`Cannot open the shared segment: ${join(missing, '.keepcount.d.')}`),
  );
  t.false(existsSync(missing));
  for (const unlink of Object.values(unlinks)) {
    // Nothing to remove where there is no directory, as for any segment that does not exist.
    t.notThrows(() => unlink(missing));
    throwsShape(t, () => unlink(file), noDirectory(file, 'is not a directory'));
  }
});

test(title('a mismatch in the default directory names the unlink call without a dir'), (t) => {
  if (backend === 'fallback') {
    throwsShape(t, () => Rate.unlink('m'), unsupported('Rate.unlink'));
    return;
  }
  // The platform's directory is the host's: a name of this process's own, removed afterwards.
  const name = `keepcount-test-${process.pid}-mismatch`;
  t.teardown(() => Rate.unlink(name));
  using r = Rate.openShared(name, { intervalMs: 1000, seed: SEED });
  r.observe('a');
  const error = t.throws(() => Rate.openShared(name, { intervalMs: 60_000, seed: SEED }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
  });
  t.regex(
    error.message,
    new RegExp(
      `^Cannot open the shared segment: .*keepcount\\.${name} was created with intervalMs 1000, not 60000 as ` +
        'requested: every process must open it with the same options; to change them, call ' +
        `Rate\\.unlink\\('${name}'\\) once no process has it open \\(or use a new name\\)$`,
    ),
  );
});

test(title('segment files are created 0600 unless a mode is given'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Estimator.openShared('p', { seed: SEED, dir, mode: 0o660 }),
      unsupported('Estimator.openShared'),
    );
    return;
  }
  Estimator.openShared('private', { seed: SEED, dir }).close();
  t.is(statSync(join(dir, 'keepcount.private')).mode & 0o777, 0o600);
  Estimator.openShared('group', { seed: SEED, dir, mode: 0o660 }).close();
  t.is(statSync(join(dir, 'keepcount.group')).mode & 0o777, 0o660);
  // Read without write serves no process, and would let a user who cannot write the file lock a
  // shared Inflight's slots (fill them, or keep a dead holder's counts) and read its seed.
  for (const mode of [0o640, 0o604, 0o620, 0o644]) {
    throwsShape(t, () => Estimator.openShared('readable', { seed: SEED, dir, mode }), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: new RegExp(
        `^The "mode" option must be a mode giving the group and others read and write together or neither \\(e\\.g\\. 0o600, 0o660\\), not 0o${mode.toString(8)}\\. Received ${mode}$`,
      ),
    });
  }
  t.false(existsSync(join(dir, 'keepcount.readable')));
});

test(title('a damaged or foreign segment file is ERR_KEEPCOUNT_CORRUPT, and unlink clears it'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Estimator.unlink('bad', { dir }), unsupported('Estimator.unlink'));
    return;
  }
  const path = join(dir, 'keepcount.bad');
  // Owner-only, as a segment file is: a more open one is refused before it is read (below).
  writeFileSync(path, Buffer.alloc(4096, 7), { mode: 0o600 });
  throwsShape(t, () => Estimator.openShared('bad', { seed: SEED, dir }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CORRUPT',
    message: `Cannot open the shared segment: ${path} is not a valid keepcount segment (magic check failed); remove it to start afresh`,
  });
  Estimator.unlink('bad', { dir });
  t.false(existsSync(path));
  using e = Estimator.openShared('bad', { seed: SEED, dir });
  t.is(e.incr('a'), 1);
});

test(title('a segment file more open than the mode asked for, or another user’s, is refused unread'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Estimator.openShared('wide', { seed: SEED, dir }), unsupported('Estimator.openShared'));
    return;
  }
  // Anyone can create files in /dev/shm: another user creating the segment's name first,
  // world-writable, for the shape and seed a service uses, could rewrite its counts, or truncate
  // the file and kill every process mapping it with SIGBUS.
  Estimator.openShared('wide', { seed: SEED, dir, mode: 0o666 }).close();
  const path = join(dir, 'keepcount.wide');
  throwsShape(t, () => Estimator.openShared('wide', { seed: SEED, dir }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: new RegExp(`^Cannot open the shared segment: ${path} was created with mode 0o666, not 0o600 as requested`),
  });
  // No more open than asked for: a 0600 file under a group mode.
  Estimator.openShared('narrow', { seed: SEED, dir }).close();
  Estimator.openShared('narrow', { seed: SEED, dir, mode: 0o660 }).close();
  // Another user's file, owner-only: only root can open it at all, and must not use it.
  if (process.getuid?.() !== 0) {
    t.log('not root: the other-owner case needs chown, checked in CI (root)');
    return;
  }
  chownSync(join(dir, 'keepcount.narrow'), 65_534, 65_534);
  throwsShape(t, () => Estimator.openShared('narrow', { seed: SEED, dir }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: /was created with owner uid 65534 \(group 65534\), not uid 0 as requested/,
  });
  // A group mode lets in the group's users only: the file must be of one of this process's groups
  // (root ignores permissions, so a 0660 file any user planted with their own group would do).
  throwsShape(t, () => Estimator.openShared('narrow', { seed: SEED, dir, mode: 0o660 }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: /was created with owner uid 65534 \(group 65534\), not uid 0 as requested/,
  });
  chownSync(join(dir, 'keepcount.narrow'), 65_534, process.getegid!());
  Estimator.openShared('narrow', { seed: SEED, dir, mode: 0o660 }).close();
  // Others' read and write lets anyone in: a choice to share with every user.
  chownSync(join(dir, 'keepcount.narrow'), 65_534, 65_534);
  Estimator.openShared('narrow', { seed: SEED, dir, mode: 0o666 }).close();
  // A file the group can read but not write is refused under any mode: such a user could still
  // lock a shared Inflight's slot bytes.
  chmodSync(join(dir, 'keepcount.narrow'), 0o640);
  throwsShape(t, () => Estimator.openShared('narrow', { seed: SEED, dir, mode: 0o660 }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: /was created with mode 0o640, not 0o660 as requested/,
  });
});

test(title('a segment another keepcount version left (after an upgrade) is a mismatch saying what to do'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Rate.openShared('older', { intervalMs: 1000, seed: SEED, dir }),
      unsupported('Rate.openShared'),
    );
    return;
  }
  // A segment outlives its processes, so an upgrade that changed the layout meets the old build's
  // file: not damaged, and the error must say so and how to go on.
  const rate = Rate.openShared('older', { intervalMs: 1000, seed: SEED, dir });
  rate.observe('a');
  rate.close();
  const path = join(dir, 'keepcount.older');
  const bytes = readFileSync(path);
  bytes.writeUInt32LE(2, 8);
  // Version 2 wrote a consistent header: its checksum over its own version.
  bytes.writeUInt32LE(crc32(bytes, 60), 60);
  writeFileSync(path, bytes);
  const older = (opener: string) => ({
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message:
      `Cannot open the shared segment: ${path} was made by another version of keepcount, with segment layout 2 ` +
      'where this one reads layout 5. A segment outlives its processes: once no process of that version has it ' +
      `open, call ${opener}.unlink('older', { dir: '${dir}' }) to start afresh (or use a new name)`,
  });
  throwsShape(t, () => Rate.openShared('older', { intervalMs: 1000, seed: SEED, dir }), older('Rate'));
  // Whatever else the caller asks for: the version comes first.
  throwsShape(t, () => Inflight.openShared('older', { seed: SEED, dir }), older('Inflight'));
  Rate.unlink('older', { dir });
  using fresh = Rate.openShared('older', { intervalMs: 1000, seed: SEED, dir });
  t.is(fresh.observe('a'), 1);
});

test(title('a segment outlives close() and is reused until unlinked'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Estimator.openShared('keep', { seed: SEED, dir }), unsupported('Estimator.openShared'));
    return;
  }
  const first = Estimator.openShared('keep', { seed: SEED, dir });
  first.incr('a', 5);
  first.close();
  throwsShape(t, () => first.incr('a'), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CLOSED',
    message: 'This Estimator was closed; its counters are gone',
  });
  {
    using again = Estimator.openShared('keep', { seed: SEED, dir });
    t.is(again.get('a'), 5);
    const local = new Estimator({ hashes: 4, slots: 8192, seed: SEED });
    local.incr('a', 2);
    again.merge(local);
    t.is(again.get('a'), 7);
    local.merge(again);
    t.is(local.get('a'), 9);
  }
  Estimator.unlink('keep', { dir });
  Estimator.unlink('keep', { dir });
  using fresh = Estimator.openShared('keep', { seed: SEED, dir });
  t.is(fresh.get('a'), 0);
});

test(title('names, seeds, modes and directories are checked before anything is opened'), (t) => {
  const badName = (name: string) => ({
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: `The "name" argument must be 1 to 200 ASCII letters, digits, ".", "_" or "-", not starting with "." nor containing "..". Received type string (${JSON.stringify(name)})`,
  });
  for (const name of ['../etc', 'a/b', '', '.hidden', 'x'.repeat(201)]) {
    const shown = name.length > 28 ? `${name.slice(0, 25)}...` : name;
    throwsShape(t, () => Estimator.openShared(name, { seed: SEED }), badName(shown));
    throwsShape(t, () => Estimator.unlink(name), badName(shown));
  }
  throwsShape(t, () => Estimator.openShared(5 as unknown as string, { seed: SEED }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "name" argument must be of type string. Received 5',
  });
  throwsShape(t, () => Rate.openShared('r', { intervalMs: 1000 } as unknown as { intervalMs: number; seed: bigint }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message:
      'The "seed" option must be of type bigint or number (every process must pass the same one). Received undefined',
  });
  throwsShape(t, () => Estimator.openShared('m', { seed: SEED, mode: 0o1000 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "mode" option must be an integer in [0, 511]. Received 512',
  });
  throwsShape(t, () => Estimator.openShared('m', { seed: SEED, dir: '' }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "dir" option must be a non-empty path. Received type string ("")',
  });
  for (const open of [
    () => Rate.openShared('r', { intervalMs: 1000, seed: SEED, dir: '/tmp/a\0b' }),
    () => Rate.unlink('r', { dir: '/tmp/a\0b' }),
  ]) {
    throwsShape(t, open, {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: 'The "dir" option must be a path without null bytes. Received type string ("/tmp/a\\u0000b")',
    });
  }
});

/** Polls `read` until it returns `want`, for at most `ms`; resolves with the time it took. */
async function until(read: () => number, want: number, ms: number): Promise<number> {
  const start = performance.now();
  while (read() !== want && performance.now() - start < ms) await sleep(5);
  return performance.now() - start;
}

test(title('a worker killed holding in-flight guards gives its count back to the survivors'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Inflight.openShared('up', { seed: SEED, dir }), unsupported('Inflight.openShared'));
    return;
  }
  const here = Inflight.openShared('up', { seed: SEED, dir });
  const mine = [here.incr('api')[0], here.incr('api')[0]];
  const [worker] = await workers(1);
  await worker!.send({ op: 'open-inflight', name: 'up', dir });
  t.is(await worker!.send({ op: 'hold', key: 'api', times: 3 }), 5);
  t.is(here.get('api'), 5);
  await worker!.kill();
  // Survivors check every 100 ms; 5 s leaves room for a loaded machine.
  const tookMs = await until(() => here.get('api'), 2, 5000);
  t.log(`count back to the survivors' ${here.get('api')} ${tookMs.toFixed(0)} ms after the SIGKILL`);
  t.is(here.get('api'), 2);
  for (const guard of mine) guard.release();
  t.is(here.get('api'), 0);
});

test(title('a worker killed mid-increment never blocks the survivors and leaves their count exact'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Inflight.openShared('churn', { seed: SEED, dir }), unsupported('Inflight.openShared'));
    return;
  }
  // One row: a counter a kill left over would show in the estimate (with more, the minimum hides it).
  const here = Inflight.openShared('churn', { seed: SEED, dir, hashes: 1 });
  const [guard] = here.incr('api');
  const all = await workers(2);
  await Promise.all(all.map((w) => w.send({ op: 'open-inflight', name: 'churn', dir, hashes: 1 })));
  await Promise.all(all.map((w) => w.send({ op: 'churn', key: 'api' })));
  for (const worker of all) {
    await sleep(50);
    // The survivors keep counting while the others churn and die.
    for (let i = 0; i < 1000; i++) here.incr('other')[0].release();
    await worker.kill();
  }
  // A kill may land between a counter's two adds: the survivors settle it back.
  const tookMs = await until(() => here.get('api'), 1, 5000);
  t.log(`count back to exact ${tookMs.toFixed(0)} ms after the last SIGKILL`);
  t.is(here.get('api'), 1);
  t.is(here.get('other'), 0);
  guard.release();
});

test(title('a worker killed in another PID namespace gives its count back and frees its slot'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Inflight.openShared('ns', { seed: SEED, dir }), unsupported('Inflight.openShared'));
    return;
  }
  const unshare = pidNamespaceArgs(t);
  if (unshare === undefined) return;
  // Two slots: this process's and the worker's, a container sharing the directory (--ipc=host)
  // whose pid (1, its namespace's init) means nothing here.
  const here = Inflight.openShared('ns', { seed: SEED, dir, processes: 2 });
  const [guard] = here.incr('api');
  const [worker] = await workers(1, unshare);
  t.teardown(() => worker!.kill());
  await worker!.send({ op: 'open-inflight', name: 'ns', dir, processes: 2 });
  t.is(await worker!.send({ op: 'hold', key: 'api', times: 3 }), 4);
  await worker!.kill();
  const tookMs = await until(() => here.get('api'), 1, 5000);
  t.log(`count back ${tookMs.toFixed(0)} ms after the SIGKILL of the namespace`);
  t.is(here.get('api'), 1);
  // Its slot is free: a second object here takes it.
  const second = Inflight.openShared('ns', { seed: SEED, dir, processes: 2 });
  t.is(second.get('api'), 1);
  second.close();
  guard!.release();
  t.is(here.get('api'), 0);
  here.close();
});

test(title('containers restarted again and again (a new PID namespace each) never fill the slots'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Inflight.openShared('restarts', { seed: SEED, dir }), unsupported('Inflight.openShared'));
    return;
  }
  const unshare = pidNamespaceArgs(t);
  if (unshare === undefined) return;
  // Three slots, five restarts: a slot left behind by each dead namespace would be
  // ERR_KEEPCOUNT_FULL ("held by live processes") by the third.
  const here = Inflight.openShared('restarts', { seed: SEED, dir, processes: 3 });
  const holding: unknown[] = [];
  const after: number[] = [];
  for (let round = 0; round < 5; round++) {
    const [worker] = await workers(1, unshare);
    t.teardown(() => worker!.kill());
    // Rejects with the worker's ERR_KEEPCOUNT_FULL if the dead namespaces' slots stayed taken.
    await worker!.send({ op: 'open-inflight', name: 'restarts', dir, processes: 3 });
    holding.push(await worker!.send({ op: 'hold', key: 'api', times: 2 }));
    await worker!.kill();
    await until(() => here.get('api'), 0, 5000);
    after.push(here.get('api'));
  }
  t.deepEqual(holding, [2, 2, 2, 2, 2], 'each restart counts from what the live ones hold');
  t.deepEqual(after, [0, 0, 0, 0, 0], "each dead namespace's count back");
  // Every slot but this one free: two more objects open.
  const more = [0, 1].map(() => Inflight.openShared('restarts', { seed: SEED, dir, processes: 3 }));
  for (const inflight of more) inflight.close();
  here.close();
});

test(title('a shared Inflight with every process slot held is ERR_KEEPCOUNT_FULL'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Inflight.openShared('one', { seed: SEED, dir, processes: 1 }),
      unsupported('Inflight.openShared'),
    );
    return;
  }
  const first = Inflight.openShared('one', { seed: SEED, dir, processes: 1 });
  first.incr('k');
  throwsShape(t, () => Inflight.openShared('one', { seed: SEED, dir, processes: 1 }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_FULL',
    message: `Cannot open the shared segment: all 1 process slots of ${join(dir, 'keepcount.one')} are held by live processes`,
  });
  throwsShape(t, () => Inflight.openShared('one', { seed: SEED, dir, processes: 2 }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message:
      `Cannot open the shared segment: ${join(dir, 'keepcount.one')} was created with processes 1, not 2 as ` +
      'requested: every process must open it with the same options; to change them, call ' +
      `Inflight.unlink('one', { dir: '${dir}' }) once no process has it open (or use a new name)`,
  });
  throwsShape(t, () => Inflight.openShared('one', { seed: SEED, dir, processes: 0 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "processes" option must be an integer in [1, 1024]. Received 0',
  });
});

test(title('closing a shared Inflight takes back what it holds and frees its slot at once'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Inflight.openShared('handover', { seed: SEED, dir, processes: 1 }),
      unsupported('Inflight.openShared'),
    );
    throwsShape(t, () => Inflight.unlink('handover', { dir }), unsupported('Inflight.unlink'));
    return;
  }
  const first = Inflight.openShared('handover', { seed: SEED, dir, processes: 1 });
  const [guard] = first.incr('api', 2);
  first.enter('api', 3);
  t.is(first.get('api'), 5);
  first.close();
  first.close();
  // Its one slot is free again: no ERR_KEEPCOUNT_FULL, and nothing of the first left counted.
  const second = Inflight.openShared('handover', { seed: SEED, dir, processes: 1 });
  t.is(second.get('api'), 0);
  t.is(second.enter('api'), 1);
  guard.release();
  t.is(second.get('api'), 1);
  throwsShape(t, () => first.get('api'), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CLOSED',
    message: 'This Inflight was closed; its counters are gone',
  });
  second.leave('api');
  second.close();
  // Inflight.unlink removes the file: the next open starts afresh with another process count.
  Inflight.unlink('handover', { dir });
  t.false(existsSync(join(dir, 'keepcount.handover')));
  Inflight.openShared('handover', { seed: SEED, dir, processes: 2 }).close();
});

test(title('observeWindow on a shared Rate counts once and tells the time left in the host’s interval'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Rate.openShared('w', { intervalMs: 60_000, seed: SEED, dir }), unsupported('Rate.openShared'));
    return;
  }
  const rate = Rate.openShared('w', { intervalMs: 60_000, seed: SEED, dir });
  const before = rate.rateWith('k', (c) => c.currentIntervalFraction);
  const first = rate.observeWindow('k', 2);
  const second = rate.observeWindow(7, 1);
  const third = rate.observeWindow(new Uint8Array([1, 2]), 3);
  t.deepEqual([first.count, second.count, third.count], [2, 1, 3]);
  t.is(
    rate.rateWith('k', (c) => c.currSamples),
    2,
  );
  // Whole milliseconds left, counting down: in [1, intervalMs], no more than before the calls.
  for (const { resetMs } of [first, second, third]) {
    t.true(Number.isInteger(resetMs) && resetMs >= 1 && resetMs <= 60_000, String(resetMs));
    t.true(resetMs <= Math.ceil((1 - before) * 60_000), `${resetMs} after ${before}`);
  }
  throwsShape(t, () => rate.observeWindow('k', 0.5), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /^The "events" argument must be/,
  });
  rate.close();
});

test(title('a clock option is refused where time is shared, on both backends, before anything is opened'), (t) => {
  const dir = scratch(t);
  const clock = new ManualClock();
  const refused = {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message:
      'The "clock" option must be absent: a shared rate keeps time on the host\'s monotonic clock, which every ' +
      'process and thread reads. Received an instance of ManualClock',
  };
  // Before, the clock was ignored: a test advancing it ran on real time without knowing.
  throwsShape(t, () => Rate.openShared('clocked', { intervalMs: 1000, seed: SEED, dir, clock } as never), refused);
  throwsShape(t, () => Rate.createSharedBuffer({ intervalMs: 1000, clock } as never), refused);
  t.false(existsSync(join(dir, 'keepcount.clocked')));
});
