// The segment files behind openShared: options that must match, permissions and owners, damaged
// or foreign files, other layout versions, reuse after close, and the checks made before opening.
// On the fallback backend every entry point refuses with ERR_KEEPCOUNT_UNSUPPORTED.
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { crc32 } from '../fallback/crc32.js';
import { backend, Estimator, Inflight, Limiter, Rate } from '../lib/index.js';
import { runFixture, throwsShape, title } from './helpers.js';
import { scratch, unsupported } from './shared-workers.js';

const SEED = 0x5eedn;

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
  // The system's error stays as the cause, naming the directory it could not create the segment
  // in (it named the creator's temporary file there, a path the caller never gave).
  const error = t.throws(() => opens['Rate.openShared'](missing));
  t.like(error?.cause, {
    code: 'ERR_KEEPCOUNT_IO',
    message: `Cannot open the shared segment: cannot create a segment file in ${missing}: No such file or directory (os error 2)`,
  });
  t.false(existsSync(missing));
  for (const unlink of Object.values(unlinks)) {
    // Nothing to remove where there is no directory, as for any segment that does not exist.
    t.notThrows(() => unlink(missing));
    throwsShape(t, () => unlink(file), noDirectory(file, 'is not a directory'));
  }
});

test(
  title('a "dir" this process cannot create files in is ERR_KEEPCOUNT_IO naming the option and the directory'),
  async (t) => {
    const scratchDir = scratch(t);
    // Root writes anywhere: the opens run as `nobody` then, in a directory that user can enter but
    // not write; anyone else opens here, in a directory without write permission.
    const root = process.getuid?.() === 0;
    chmodSync(scratchDir, 0o755);
    const dir = join(scratchDir, 'read-only');
    mkdirSync(dir, { mode: 0o555 });
    const child = await runFixture('open-in-dir.ts', { args: [dir], ...(root ? { uid: 65_534, gid: 65_534 } : {}) });
    if (root && child.code !== 0 && child.stdout === '' && /EACCES|ERR_MODULE_NOT_FOUND/.test(child.stderr)) {
      // A checkout that only root can read: `nobody` cannot even load the fixture (or tsx).
      t.log(`skipped: user nobody cannot load the fixture here (${child.stderr.split('\n')[0]})`);
      t.pass();
      return;
    }
    t.is(child.code, 0, child.stderr);
    const thrown = JSON.parse(child.stdout) as Record<string, unknown>;
    for (const [what, error] of Object.entries(thrown)) {
      if (backend === 'fallback') {
        t.like(error, { code: 'ERR_KEEPCOUNT_UNSUPPORTED' }, what);
        continue;
      }
      // It named the creator's temporary file (`.keepcount.x.<pid>.<hex>.tmp: Permission denied`),
      // a path the caller never gave, as the only error.
      t.deepEqual(
        error,
        {
          name: 'Error',
          code: 'ERR_KEEPCOUNT_IO',
          message: `The "dir" option names a directory this process cannot create the segment in: ${dir} is not writable by it (EACCES)`,
          cause: `Cannot open the shared segment: cannot create a segment file in ${dir}: Permission denied (os error 13)`,
        },
        what,
      );
    }
    t.false(existsSync(join(dir, 'keepcount.x')));
  },
);

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
