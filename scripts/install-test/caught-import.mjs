/* global console, process, setTimeout */
// An application that tries an optional part of keepcount and carries on without it: a caught
// import() of an entry that fails to load must leave the process running. On Node 20 a CommonJS
// load error reached through an ES module's static import was also raised as an uncaught exception
// (nodejs/node#51603), which killed the process after the catch had run.
const [specifier] = process.argv.slice(2);
try {
  await import(specifier);
  console.log('loaded');
} catch (error) {
  console.log(`caught ${error.code}`);
}
setTimeout(() => console.log('alive'), 50);
