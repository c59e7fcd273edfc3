#!/usr/bin/env bash
# Install test: keepcount as users get it. Packs the main package and this platform's binding
# package, installs the tarballs into fresh projects outside the repository (no Rust toolchain on
# PATH), and loads keepcount and keepcount/http from JavaScript (require, import) and from
# TypeScript (type-checked with tsc against the "require" and the "import" declarations, and with
# a value typed by one passed where the other's type is expected):
#   1. with the platform package: every consumer must run on the native backend, silently;
#   2. without it (npm --omit=optional, as on a platform with no prebuilt binary): every consumer
#      must run on the fallback, with one warning line on stderr that
#      KEEPCOUNT_SILENCE_FALLBACK=1 removes.
# In both, a caught import() of an entry that fails to load (keepcount/metrics without prom-client,
# a KEEPCOUNT_BACKEND that cannot be met) must leave the process running; and a project on Express 4
# must install keepcount (its peer range) and rate-limit with it.
# It also checks what the tarballs hold. Reuses the addon, binding.js and dist/ that `npm run build`
# produced (builds them if missing; --build rebuilds). Set KEEP=1 to keep the temporary directory,
# and KEEPCOUNT_CONSUMER_NODE_DIR to a directory holding another node/npm for the consumers (CI
# runs them on the engines floor, which is older than the build tools need).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/scripts/install-test"
# Main tarball bound: dist/ (the CommonJS build with declarations, the ES module entries), the
# README and the generated loader are ~402 kB packed today (keepcount/redis, shared limiters and
# buffers grew it from ~60 kB, the synced heavy hitters and the README's performance notes from
# ~213 kB, the audits' fixes and their documented bounds from ~302 kB; the README alone is 218 kB
# unpacked); 450 kB leaves room to grow and still catches sources (lib/ and fallback/ add ~240 kB
# packed), tests, benchmark results or a .node (~700 kB packed) sneaking in.
max_main_bytes=450000

failures=0
pass() { printf 'PASS %s\n' "$*"; }
# Line count as a bare number (BSD wc pads it with spaces).
lines_of() { echo $(($(wc -l <"$1"))); }
fail() {
  printf 'FAIL %s\n' "$*"
  failures=$((failures + 1))
}
step() { printf '\n--- %s\n' "$*"; }

# Physical path: node reports resolved modules by their real path (macOS's /var is /private/var).
work=$(cd "$(mktemp -d "${TMPDIR:-/tmp}/keepcount-install-test.XXXXXX")" && pwd -P)
cleanup() { if [[ "${KEEP:-}" == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT

cd "$repo"
# napi's name for this platform (the suffix of the .node file and of the platform package).
platform=$(node -p '
  const abi = process.platform === "linux"
    ? (process.report.getReport().header.glibcVersionRuntime ? "-gnu" : "-musl")
    : process.platform === "win32" ? "-msvc" : "";
  `${process.platform}-${process.arch}${abi}`')
addon="keepcount.$platform.node"
[[ -d "npm/$platform" ]] || { echo "FAIL no npm/$platform: keepcount ships no binary for this platform"; exit 1; }

step "build (reused when present)"
if [[ "${1:-}" == --build || ! -f "$addon" || ! -f binding.js || ! -f dist/esm/lib/index.js || ! -f dist/cjs/lib/index.js ]]; then
  npm run build
fi
ls -l "$addon"

step "pack"
mkdir -p "$work/tarballs" "$work/stage/artifacts/bindings-$platform"
npm pack --json --loglevel=warn --pack-destination "$work/tarballs" >"$work/main-pack.json"
# The release workflow's path to the platform package: `napi artifacts` moves the downloaded
# artifact into npm/<platform>/, the license is copied in, then the directory is packed. Done on a
# copy (napi needs package.json beside npm/), so the working tree is left alone; the copy's
# napi.targets is cut down to this platform, since napi artifacts insists on every target's file.
cp -R package.json npm "$work/stage/"
node -e '
  const fs = require("fs");
  const [manifest, platform] = process.argv.slice(1);
  const pkg = JSON.parse(fs.readFileSync(manifest, "utf8"));
  const name = (triple) => {
    const [arch, , os, abi] = triple.replace("apple-darwin", "apple-darwin-").split("-");
    const node = { x86_64: "x64", aarch64: "arm64" }[arch] ?? arch;
    const plat = { linux: "linux", darwin: "darwin", windows: "win32" }[os] ?? os;
    return [plat, node, abi].filter(Boolean).join("-");
  };
  pkg.napi.targets = pkg.napi.targets.filter((t) => name(t) === platform);
  if (pkg.napi.targets.length !== 1) throw new Error(`no napi target for ${platform}`);
  fs.writeFileSync(manifest, JSON.stringify(pkg, null, 2));
' "$work/stage/package.json" "$platform"
cp "$addon" "$work/stage/artifacts/bindings-$platform/"
npx --no-install napi artifacts --cwd "$work/stage" --output-dir artifacts --npm-dir npm >"$work/artifacts.log" 2>&1 ||
  { cat "$work/artifacts.log"; exit 1; }
cp LICENSE "$work/stage/npm/$platform/"
(cd "$work/stage/npm/$platform" && npm pack --json --loglevel=warn --pack-destination "$work/tarballs") >"$work/platform-pack.json"

# napi prepublish (prepublishOnly) writes every platform package into the published manifest as
# an optional dependency of the same version; do the same to the packed main package.
mkdir "$work/stage/main"
tar -xzf "$work/tarballs/keepcount-"[0-9]*.tgz -C "$work/stage/main"
rm "$work/tarballs/keepcount-"[0-9]*.tgz
node -e '
  const fs = require("fs");
  const [manifest, npmDir] = process.argv.slice(1);
  const pkg = JSON.parse(fs.readFileSync(manifest, "utf8"));
  pkg.optionalDependencies = {};
  for (const dir of fs.readdirSync(npmDir).sort()) {
    const file = `${npmDir}/${dir}/package.json`;
    if (fs.existsSync(file)) pkg.optionalDependencies[JSON.parse(fs.readFileSync(file, "utf8")).name] = pkg.version;
  }
  fs.writeFileSync(manifest, JSON.stringify(pkg, null, 2) + "\n");
' "$work/stage/main/package/package.json" "$repo/npm"
(cd "$work/stage/main/package" && npm pack --loglevel=warn --pack-destination "$work/tarballs" >/dev/null)
main_tgz=$(ls "$work/tarballs/keepcount-"[0-9]*.tgz)
platform_tgz=$(ls "$work/tarballs/keepcount-$platform-"*.tgz)

step "tarball contents"
node - "$work/main-pack.json" "$work/platform-pack.json" "$addon" "$max_main_bytes" <<'EOF' || failures=$((failures + 1))
const fs = require('fs');
const [mainJson, platformJson, addon, maxBytes] = process.argv.slice(2);
const [main] = JSON.parse(fs.readFileSync(mainJson, 'utf8'));
const [platform] = JSON.parse(fs.readFileSync(platformJson, 'utf8'));
let ok = true;
const check = (cond, what) => {
  console.log(`${cond ? 'PASS' : 'FAIL'} ${what}`);
  ok &&= cond;
};
const files = main.files.map((f) => f.path);
const forbidden = files.filter(
  (f) => /^(src|crates|__test__|benchmark|demo|docs|scripts|npm|target|lib|fallback)\//.test(f) || /\.(node|rs|tgz)$/.test(f),
);
check(forbidden.length === 0, `main tarball holds no sources, tests, benchmarks or addons${forbidden.length ? ': ' + forbidden.join(', ') : ''}`);
const required = [
  'package.json', 'LICENSE', 'index.js', 'index.d.ts', 'binding.js', 'binding.d.ts',
  'dist/esm/package.json', 'dist/cjs/package.json',
  'dist/esm/lib/index.js', 'dist/esm/lib/index.d.ts', 'dist/cjs/lib/index.js', 'dist/cjs/lib/index.d.ts',
  'dist/esm/lib/http/index.js', 'dist/esm/lib/http/index.d.ts', 'dist/cjs/lib/http/index.js', 'dist/cjs/lib/http/index.d.ts',
  'dist/cjs/lib/native.cjs',
];
const missing = required.filter((f) => !files.includes(f));
check(missing.length === 0, `main tarball holds the entries, declarations and loader${missing.length ? '; missing: ' + missing.join(', ') : ''}`);
// dist/esm is the ES module entries of "exports" and nothing else (scripts/build-ts.mjs): no build
// of the sources that nothing loads.
const { exports } = JSON.parse(fs.readFileSync('package.json', 'utf8'));
const esm = ['dist/esm/package.json', ...Object.values(exports).flatMap((e) => Object.values(e.import ?? {}))]
  .map((f) => f.replace(/^\.\//, ''))
  .sort();
const shipped = files.filter((f) => f.startsWith('dist/esm/')).sort();
check(JSON.stringify(shipped) === JSON.stringify(esm), `main tarball's dist/esm holds exactly the ${esm.length} files of the "import" entries${JSON.stringify(shipped) === JSON.stringify(esm) ? '' : ': ' + shipped.join(', ')}`);
check(main.size < Number(maxBytes), `main tarball ${main.filename}: ${(main.size / 1000).toFixed(1)} kB packed (bound ${maxBytes / 1000} kB), ${(main.unpackedSize / 1000).toFixed(1)} kB unpacked, ${files.length} files`);
const pfiles = platform.files.map((f) => f.path).sort();
const expected = [addon, 'LICENSE', 'README.md', 'package.json'].sort();
check(JSON.stringify(pfiles) === JSON.stringify(expected), `platform tarball ${platform.filename}: ${(platform.size / 1000).toFixed(1)} kB packed, holds exactly ${pfiles.join(', ')}`);
process.exit(ok ? 0 : 1);
EOF

# The consumers run with no Rust toolchain on PATH and nothing of the repository on the module path.
consumer_path="${KEEPCOUNT_CONSUMER_NODE_DIR:-}"
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  [[ -x "$dir/cargo" || -x "$dir/rustc" ]] || consumer_path="${consumer_path:+$consumer_path:}$dir"
done
ts_version=$(node -p 'require("./node_modules/typescript/package.json").version')
types_node_version=$(node -p 'require("./node_modules/@types/node/package.json").version')

# install <dir> <npm install flags...>: a fresh consumer project holding the test's consumers.
install() {
  local dir=$1
  shift
  mkdir -p "$dir"
  cp "$here"/exercise.cjs "$here"/exercise.d.cts "$here"/smoke.cjs "$here"/smoke.mjs "$here"/dual.mjs \
    "$here"/ts-consumer.cts "$here"/ts-consumer.mts "$here"/tsconfig.json "$here"/ts-node10.ts \
    "$here"/tsconfig.node10.json "$here"/ts-quota.cts "$here"/caught-import.mjs "$here"/express4.cjs "$dir/" || return 1
  printf '{ "name": "keepcount-consumer", "version": "1.0.0", "private": true }\n' >"$dir/package.json"
  (cd "$dir" && env PATH="$consumer_path" npm install --no-audit --no-fund --loglevel=error "$@" \
    "typescript@$ts_version" "@types/node@$types_node_version")
}

# run_consumers <dir> <backend>: each consumer prints "<flavor> backend=<b> sketch=<digest>".
run_consumers() {
  local dir=$1 backend=$2
  (
    cd "$dir" || exit 1
    export PATH="$consumer_path" EXPECT_BACKEND="$backend"
    unset NODE_PATH KEEPCOUNT_BACKEND KEEPCOUNT_SILENCE_FALLBACK NAPI_RS_NATIVE_LIBRARY_PATH
    if command -v cargo >/dev/null || command -v rustc >/dev/null; then
      echo "cargo/rustc still on PATH" >&2
      exit 1
    fi
    resolved=$(node -p 'require.resolve("keepcount")')
    [[ "$resolved" == "$dir/node_modules/keepcount/"* ]] || { echo "keepcount resolved to $resolved" >&2; exit 1; }
    # (set -e does not apply here: the caller tests this function's status.)
    ./node_modules/.bin/tsc -p tsconfig.json || exit 1
    ./node_modules/.bin/tsc -p tsconfig.node10.json || exit 1
    for entry in smoke.cjs smoke.mjs ts-consumer.cjs ts-consumer.mjs; do
      node "$entry" 2>"$entry.stderr"
      echo "$entry stderr: $(lines_of "$entry.stderr") line(s)"
    done
  ) >"$dir.log" 2>&1
}

# caught_import <dir> <code> <specifier> [VAR=value...]: a caught import() of an entry that fails to
# load with <code>; the process must carry on (exit 0, its timer fires).
caught_import() {
  local dir=$1 code=$2 specifier=$3 out
  shift 3
  out=$(cd "$dir" && env -u KEEPCOUNT_BACKEND -u KEEPCOUNT_SILENCE_FALLBACK PATH="$consumer_path" "$@" \
    node caught-import.mjs "$specifier" 2>"$dir/caught-import.stderr") || true
  if [[ $out == "caught $code"$'\n'alive ]]; then
    pass "a caught import('$specifier')${*:+ with $*} fails with $code and the process carries on"
  else
    printf '%s\n' "$out" | sed 's/^/  stdout: /'
    sed 's/^/  stderr: /' "$dir/caught-import.stderr"
    fail "a caught import('$specifier')${*:+ with $*} did not leave the process running"
  fi
}

digests=()
# check_run <dir> <backend> <stderr lines expected>
check_run() {
  local dir=$1 backend=$2 lines=$3 label=$4
  if ! run_consumers "$dir" "$backend"; then
    fail "$label: consumers failed"
    cat "$dir.log"
    return
  fi
  cat "$dir.log"
  local n
  n=$(grep -c "backend=$backend sketch=" "$dir.log" || true)
  [[ $n == 4 ]] && pass "$label: require, import, TS require and TS import all run on $backend" ||
    fail "$label: $n of 4 consumers ran on $backend"
  local bad=0 entry
  for entry in smoke.cjs smoke.mjs ts-consumer.cjs ts-consumer.mjs; do
    [[ $(lines_of "$dir/$entry.stderr") == "$lines" ]] || { bad=1; echo "  $entry stderr:"; cat "$dir/$entry.stderr"; }
  done
  [[ $bad == 0 ]] && pass "$label: $lines line(s) on stderr from each consumer" || fail "$label: stderr is not $lines line(s)"
  while read -r digest; do digests+=("$digest"); done < <(grep -o 'sketch=[0-9a-f]*' "$dir.log")
}

step "1. main + $platform packages"
if install "$work/native" "$main_tgz" "$platform_tgz" >"$work/native-install.log" 2>&1; then
  node_file=$(find "$work/native/node_modules/keepcount-$platform" -name '*.node')
  [[ -n "$node_file" ]] && pass "installed keepcount and keepcount-$platform" || fail "keepcount-$platform holds no .node"
  check_run "$work/native" native 0 "with the platform package"
  if (cd "$work/native" && env PATH="$consumer_path" node dual.mjs >"$work/dual.log" 2>&1); then
    pass "imported and required in one process, keepcount is one copy (one Rate class, reset times right)"
  else
    sed 's/^/  /' "$work/dual.log"
    fail "imported and required in one process, keepcount is two copies"
  fi
  # Node 20 before 20.19 cannot require() an ES module; the flag reproduces that on newer Node.
  if env PATH="$consumer_path" node --no-experimental-require-module -e 0 2>/dev/null; then
    if (cd "$work/native" && env PATH="$consumer_path" EXPECT_BACKEND=native \
      node --no-experimental-require-module smoke.mjs >/dev/null 2>&1); then
      pass "the ESM entry loads the native backend without require(esm), as on Node < 20.19"
    else
      fail "the ESM entry does not load the native backend without require(esm)"
    fi
  fi
  caught_import "$work/native" MODULE_NOT_FOUND keepcount/metrics
  caught_import "$work/native" ERR_KEEPCOUNT_BACKEND keepcount KEEPCOUNT_BACKEND=bogus
  # A binary cut short once killed the process with SIGBUS as it loaded (glibc maps its segments
  # past the file's end), and one for another CPU was reported as "No such file or directory".
  if [[ $(uname -s) == Linux && -n "$node_file" ]]; then
    cp "$node_file" "$work/intact.node"
    broken_binary() {
      local label=$1 reason=$2 out
      out=$(cd "$work/native" && env -u KEEPCOUNT_BACKEND -u KEEPCOUNT_SILENCE_FALLBACK PATH="$consumer_path" \
        node -e 'console.log(require("keepcount").backend)' 2>&1) || true
      if [[ $out == *"native binding unavailable ("*"$reason"* && $out == *$'\n'fallback ]]; then
        pass "a $label binary falls back, saying so: $(head -n 1 <<<"$out" | cut -c1-160)…"
      else
        printf '%s\n' "$out" | sed 's/^/  /'
        fail "a $label binary did not fall back with a clear reason"
      fi
      cp "$work/intact.node" "$node_file"
    }
    head -c 100000 "$work/intact.node" >"$node_file"
    broken_binary truncated "is truncated: 100000 bytes"
    # e_machine (offset 18): aarch64 on an x64 machine, x86-64 elsewhere.
    if [[ $(uname -m) == x86_64 ]]; then machine='\xb7\x00'; else machine='\x3e\x00'; fi
    printf "$machine" | dd of="$node_file" bs=1 seek=18 conv=notrunc status=none
    broken_binary foreign-CPU "is built for"
  fi
else
  cat "$work/native-install.log"
  fail "npm install of the main and platform tarballs"
fi

step "2. main package only (--omit=optional: no prebuilt binary)"
if install "$work/fallback" "$main_tgz" --omit=optional >"$work/fallback-install.log" 2>&1; then
  [[ ! -e "$work/fallback/node_modules/keepcount-$platform" ]] && pass "installed keepcount without any platform package" ||
    fail "a platform package was installed despite --omit=optional"
  check_run "$work/fallback" fallback 1 "without the platform package"
  grep -h '' "$work/fallback/smoke.cjs.stderr" | sed 's/^/  warning: /'
  if grep -q "^keepcount: native binding unavailable (no prebuilt binary for .*keepcount-$platform is not installed)" \
    "$work/fallback/smoke.cjs.stderr"; then
    pass "the warning names the fallback and the missing keepcount-$platform package"
  else
    fail "unexpected warning text"
  fi
  silenced=$(cd "$work/fallback" && env PATH="$consumer_path" EXPECT_BACKEND=fallback KEEPCOUNT_SILENCE_FALLBACK=1 \
    node smoke.mjs 2>&1 >/dev/null | grep -c '') || true
  [[ $silenced == 0 ]] && pass "KEEPCOUNT_SILENCE_FALLBACK=1 silences the warning" ||
    fail "KEEPCOUNT_SILENCE_FALLBACK=1 left $silenced line(s) on stderr"
  forced=$(cd "$work/fallback" && env PATH="$consumer_path" EXPECT_BACKEND=native KEEPCOUNT_BACKEND=native \
    node -e 'try { require("keepcount"); console.log("loaded") } catch (e) { console.log(e.code) }' 2>&1) || true
  [[ $forced == ERR_KEEPCOUNT_BACKEND ]] && pass "KEEPCOUNT_BACKEND=native fails with ERR_KEEPCOUNT_BACKEND" ||
    fail "KEEPCOUNT_BACKEND=native without a binary gave: $forced"
  caught_import "$work/fallback" MODULE_NOT_FOUND keepcount/metrics KEEPCOUNT_SILENCE_FALLBACK=1
  caught_import "$work/fallback" ERR_KEEPCOUNT_BACKEND keepcount KEEPCOUNT_BACKEND=native
  # Express 4 from the registry beside the installed keepcount: npm refuses it (ERESOLVE) if the
  # optional peer range leaves Express 4 out.
  if (cd "$work/fallback" && env PATH="$consumer_path" npm install --no-audit --no-fund --loglevel=error \
    --omit=optional express@4 >"$work/express4-install.log" 2>&1 &&
    env PATH="$consumer_path" KEEPCOUNT_SILENCE_FALLBACK=1 node express4.cjs >"$work/express4.log" 2>&1); then
    pass "$(cat "$work/express4.log")"
  else
    sed 's/^/  /' "$work/express4-install.log" "$work/express4.log" 2>/dev/null | tail -20
    fail "a project on Express 4 cannot install or use keepcount"
  fi
else
  cat "$work/fallback-install.log"
  fail "npm install of the main tarball alone"
fi

# ${a[@]+...}: bash 3.2 (macOS) treats an empty array as unset under set -u.
unique=$(printf '%s\n' ${digests[@]+"${digests[@]}"} | sort -u | grep -c .) || true
[[ ${#digests[@]} == 8 && $unique == 1 ]] && pass "all 8 runs serialize the same sketch bytes (${digests[0]})" ||
  fail "serialized sketches differ across runs: ${digests[*]-none}"

echo
if [[ $failures == 0 ]]; then
  echo "install test: PASS (keepcount $(node -p 'require("./package.json").version'), $platform, consumers on node $(env PATH="$consumer_path" node --version))"
else
  echo "install test: FAIL ($failures failure(s))"
  exit 1
fi
