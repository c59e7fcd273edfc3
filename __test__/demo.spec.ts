import test from 'ava';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { backend } from '../lib/index.js';
import { title } from './helpers.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs `npm run demo -- --short` the way the script does (tsx), killed after `limitMs`. */
function runDemo(limitMs: number): Promise<Run> {
  const started = performance.now();
  const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, '..', 'demo', 'index.ts'), '--short'], {
    env: { ...process.env, KEEPCOUNT_SILENCE_FALLBACK: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const killer = setTimeout(() => child.kill('SIGKILL'), limitMs);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(killer);
      resolve({ code, stdout, stderr, ms: performance.now() - started });
    });
  });
}

/** The table's row for `client`: its numbers by column name. */
function row(stdout: string, client: string): Record<string, number> {
  const lines = stdout.split('\n');
  const head = lines
    .find((l) => l.startsWith('client '))
    ?.trim()
    .split(/\s+/);
  const cells = lines
    .find((l) => l.startsWith(`${client} `))
    ?.trim()
    .split(/\s+/);
  if (head === undefined || cells === undefined) throw new Error(`no table row for ${client} in:\n${stdout}`);
  return Object.fromEntries(head.slice(1).map((name, i) => [name, Number(cells[i + 1])]));
}

test(
  title('npm run demo -- --short prints the outcome table, floods get 429s, the polite client mostly 200s'),
  async (t) => {
    t.timeout(40_000);
    const run = await runDemo(30_000);
    t.is(run.code, 0, run.stderr);
    t.true(run.ms < 30_000, `finished in ${run.ms} ms`);
    t.regex(run.stdout, new RegExp(`^keepcount demo: backend ${backend}`));
    t.regex(run.stdout, /client\s+requests\s+200\s+429\s+503\s+504\s+other\s+p50\/ms\s+p99\/ms/);

    const polite = row(run.stdout, 'polite');
    const flood = row(run.stdout, 'flood');
    t.log(`polite ${JSON.stringify(polite)}\nflood ${JSON.stringify(flood)}`);
    t.true(polite.requests! > 0 && polite['200']! > polite.requests! / 2, 'polite: mostly 200');
    t.is(polite['429'], 0, 'polite stays within its quota');
    t.true(flood['429']! > flood['200']!, 'flood: mostly 429');
    t.true(flood['429']! > 0);
    for (const r of [polite, flood]) t.true(Number.isFinite(r['p50/ms']) && Number.isFinite(r['p99/ms']));
    t.regex(run.stdout, /in flight after the run: 0;/, 'no in-flight slot leaked');
    // The flooder heads the top talkers, with more requests than the polite client sends at all.
    const top = /top talkers[^\n]*\n\s+(\S+)\s+(\d+)/.exec(run.stdout);
    t.is(top?.[1], 'flood', run.stdout);
    t.true(Number(top?.[2]) > 40, `flood's lower bound ${top?.[2]}`);
  },
);
