/**
 * A look at the native binary before it is loaded, for the failures `dlopen` cannot report.
 *
 * glibc maps an ELF shared object's loadable segments as its program headers describe them, and a
 * file cut short (an interrupted install, a full disk, a partial copy into an image layer) then
 * has pages mapped past its end: the first touch of one kills the process with SIGBUS, which no
 * `try` catches, so the fallback never runs (a binary of 1.6 MB cut anywhere from 4 KiB to 1.38 MB
 * did, 2026-11-29). And a binary for another CPU fails with "cannot open shared object file: No
 * such file or directory" although the file is there. So the file about to load is read first:
 * its header says which machine it is for and where its program headers are, and every loadable
 * segment must lie within the file. A file that is no 64-bit little-endian ELF is left to the
 * loader, which reports it (an empty file, random bytes) without crashing.
 *
 * @module
 */
import { closeSync, existsSync, openSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';
import nodeRequire from './require.cjs';

/** ELF `e_machine` values of the CPUs keepcount ships binaries for, by `process.arch`. */
const MACHINES: Record<string, number> = { x64: 62, arm64: 183 };

/** `process.arch` names of {@link MACHINES}, for the message. */
const ARCH_OF_MACHINE: Record<number, string> = { 62: 'x64', 183: 'arm64', 3: 'ia32', 40: 'arm' };

/** `p_type` of a loadable segment. */
const PT_LOAD = 1;

/** The size of an ELF64 header; a file shorter than it is left to the loader. */
const ELF64_HEADER = 64;

/** The size of an ELF64 program header. */
const ELF64_PHDR = 56;

/** The name of the platform package napi's loader looks for on this machine. */
export function platformPackage(): string {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
    return `keepcount-linux-${arch}-${report?.header?.glibcVersionRuntime === undefined ? 'musl' : 'gnu'}`;
  }
  if (platform === 'win32') return `keepcount-win32-${arch}-msvc`;
  return `keepcount-${platform}-${arch}`;
}

/**
 * Checks the binary napi's loader (`binding.js` in `root`) would load first on this machine, as
 * {@link checkBinary} does: a local build beside the loader (`keepcount.<platform>.node`), else
 * the platform package's. Nothing to check off Linux, where binaries are no ELF, when
 * `NAPI_RS_NATIVE_LIBRARY_PATH` names another, or when neither is there (the loader says so).
 */
export function checkBinaryToLoad(root: string): void {
  if (process.platform !== 'linux' || process.env.NAPI_RS_NATIVE_LIBRARY_PATH) return;
  const pkg = platformPackage();
  const local = join(root, `keepcount.${pkg.slice('keepcount-'.length)}.node`);
  let file: string;
  if (existsSync(local)) file = local;
  else {
    try {
      file = nodeRequire.resolve(pkg);
    } catch {
      return;
    }
  }
  checkBinary(file);
}

/**
 * Throws an `Error` saying what is wrong when `file` is an ELF64 shared object that would crash
 * the process or fail for a reason the loader words badly: built for another CPU than this
 * process's `arch`, or cut short before the end of a loadable segment. Returns otherwise, also
 * when the file is not ELF64 (the loader then reports it), and on platforms that load no ELF.
 */
export function checkBinary(file: string, arch: string = process.arch): void {
  const size = statSync(file).size;
  if (size < ELF64_HEADER) return;
  const fd = openSync(file, 'r');
  try {
    const header = read(fd, 0, ELF64_HEADER);
    // "\x7fELF", 64-bit (class 2), little-endian (data 1).
    if (header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2 || header[5] !== 1) return;
    const machine = header.readUInt16LE(18);
    const expected = MACHINES[arch];
    if (expected !== undefined && machine !== expected) {
      const built = ARCH_OF_MACHINE[machine] ?? `ELF machine ${machine}`;
      throw new Error(`${file} is built for ${built}, and this process is ${arch}`);
    }
    const phoff = Number(header.readBigUInt64LE(32));
    const count = header.readUInt16LE(56);
    if (header.readUInt16LE(54) !== ELF64_PHDR || phoff + count * ELF64_PHDR > size) {
      throw truncated(file, size, phoff + count * ELF64_PHDR);
    }
    const headers = read(fd, phoff, count * ELF64_PHDR);
    let needed = 0;
    for (let i = 0; i < count; i++) {
      const at = i * ELF64_PHDR;
      if (headers.readUInt32LE(at) !== PT_LOAD) continue;
      const end = Number(headers.readBigUInt64LE(at + 8)) + Number(headers.readBigUInt64LE(at + 32));
      needed = Math.max(needed, end);
    }
    if (needed > size) throw truncated(file, size, needed);
  } finally {
    closeSync(fd);
  }
}

function read(fd: number, position: number, length: number): Buffer {
  const buffer = Buffer.alloc(length);
  readSync(fd, buffer, 0, length, position);
  return buffer;
}

function truncated(file: string, size: number, needed: number): Error {
  return new Error(
    `${file} is truncated: ${size} bytes, where its segments need ${needed} (an interrupted install? ` +
      'reinstall it)',
  );
}
