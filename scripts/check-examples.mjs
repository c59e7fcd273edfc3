/* global process, console */
// `npm run lint:examples`: type-checks every ```ts example in README.md against the package as
// users import it (`keepcount`, `keepcount/http`, ... through package.json's "exports", so the built
// declarations in dist/: run after `npm run build`). An example that names a method, option or
// export the API no longer has fails here, with the README line it is on, rather than in a
// reader's editor.
//
// Examples are excerpts: they use an Express `app`, a `res`, a `sync` set up in the prose around
// them. examples-context.d.ts declares those names, as globals, so an example's own declarations
// and imports shadow them. Each example compiles as a module of its own, under the repository's
// compiler options less the unused-name checks (an example may show a value it does not use).
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const tsc = require.resolve('typescript/bin/tsc');
// Inside the repository, so that imports resolve through its node_modules and its own "exports".
const dir = 'node_modules/.cache/keepcount-examples';
const source = 'README.md';

/** The ```ts blocks of a markdown text, each with the line its code starts on (1-based). */
function examples(text) {
  const found = [];
  let open;
  text.split('\n').forEach((line, i) => {
    const fence = line.trim();
    if (open === undefined && fence === '```ts') open = { line: i + 2, code: [] };
    else if (open !== undefined && fence === '```') {
      found.push({ line: open.line, code: open.code.join('\n') });
      open = undefined;
    } else open?.code.push(line);
  });
  return found;
}

rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
const blocks = examples(readFileSync(source, 'utf8'));
if (blocks.length === 0) {
  console.error(`${source}: no \`\`\`ts examples found; has the fence changed?`);
  process.exit(1);
}
blocks.forEach(({ code }, i) => writeFileSync(join(dir, `example-${i}.ts`), `${code}\nexport {};\n`));
copyFileSync('scripts/examples-context.d.ts', join(dir, 'examples-context.d.ts'));
writeFileSync(
  join(dir, 'tsconfig.json'),
  JSON.stringify({
    extends: '../../../tsconfig.json',
    compilerOptions: { noUnusedLocals: false, noUnusedParameters: false },
    include: ['*.ts'],
  }),
);

const run = spawnSync(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json'), '--pretty', 'false'], {
  encoding: 'utf8',
});
// tsc names the generated file and its line; say where that is in the README instead.
const report = `${run.stdout}${run.stderr}`.replace(
  /^.*example-(\d+)\.ts\((\d+),(\d+)\)/gm,
  (_, n, line, column) => `${source}:${blocks[Number(n)].line + Number(line) - 1}:${column}`,
);
if (run.status !== 0) {
  process.stderr.write(report);
  process.exit(run.status ?? 1);
}
console.log(`${source}: ${blocks.length} TypeScript examples type-check`);
