// The package entry for `require('keepcount')` and tools that read "main": the CommonJS build of
// lib/index.ts, which picks the native binding (the generated binding.js) or the TypeScript
// fallback. `import` resolves to dist/esm through package.json's "exports".
module.exports = require('./dist/cjs/lib/index.js');
