// The look at the native binary before it loads (lib/binary.ts): a file cut short once killed the
// process with SIGBUS as glibc mapped it, and one for another CPU was reported as missing. The
// end-to-end case (an installed package's binary truncated, keepcount falling back) is in
// scripts/install-test/run.sh.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { checkBinary } from '../lib/binary.js';
import { title } from './helpers.js';

const BUILT = join(__dirname, '..', `keepcount.linux-x64-gnu.node`);

/** `bytes` written to a file of a scratch directory removed after the test. */
function file(t: ExecutionContext, bytes: Uint8Array): string {
  const dir = mkdtempSync(join(tmpdir(), 'keepcount-binary-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'keepcount.linux-x64-gnu.node');
  writeFileSync(path, bytes);
  return path;
}

const built = (): Buffer => readFileSync(BUILT);

test(title('the built binary passes, on its own CPU'), (t) => {
  t.notThrows(() => checkBinary(BUILT, 'x64'));
});

test(title('a binary cut short anywhere in its loaded segments is refused, saying so'), (t) => {
  const whole = built();
  for (const size of [4096, 100_000, Math.floor(whole.length / 2), whole.length - 300_000]) {
    t.throws(() => checkBinary(file(t, whole.subarray(0, size)), 'x64'), {
      message: new RegExp(`is truncated: ${size} bytes, where its segments need \\d+ .*reinstall it`),
    });
  }
});

test(title('a binary for another CPU is named for it, not reported missing'), (t) => {
  const arm = built();
  arm.writeUInt16LE(183, 18);
  t.throws(() => checkBinary(file(t, arm), 'x64'), {
    message: /is built for arm64, and this process is x64$/,
  });
  t.throws(() => checkBinary(BUILT, 'arm64'), { message: /is built for x64, and this process is arm64$/ });
});

test(title('what is no ELF64 file is left to the loader, which reports it without crashing'), (t) => {
  for (const bytes of [new Uint8Array(0), new Uint8Array(64), Buffer.from('not a shared object at all'.repeat(8))]) {
    t.notThrows(() => checkBinary(file(t, bytes), 'x64'));
  }
  const elf32 = built();
  elf32[4] = 1;
  t.notThrows(() => checkBinary(file(t, elf32), 'x64'), '32-bit ELF: the loader says what is wrong');
});
