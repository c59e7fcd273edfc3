// The declarations of the package entry (index.js): those of lib/index.ts, built into dist/.
export * from './dist/cjs/lib/index.js';
