// CommonJS on purpose: this gives lib/ a synchronous `require` wherever it runs (the CommonJS build,
// and as ES modules under tsx in the tests and benches), which the backend loader needs to try the
// native binding without making the package's import async.
export = require;
