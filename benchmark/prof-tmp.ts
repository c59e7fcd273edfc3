import { SETUPS } from './http-server.js';
process.on('SIGTERM', () => process.exit(0));
void SETUPS[process.argv[2]!]!().then((port) => console.log(port));
