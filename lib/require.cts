// CommonJS on purpose: this gives the ESM and the CJS builds the same synchronous `require`, which
// the backend loader needs to try the native binding without making the package's import async.
export = require;
