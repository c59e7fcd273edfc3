'use strict';
/* global require, console, process, fetch */
/* eslint-disable @typescript-eslint/no-require-imports -- a CommonJS consumer, as most Express 4 apps */
// keepcount's middleware under Express 4, which its optional peer range admits: the third request
// in a window of two is refused with 429.
const express = require('express');
const { rateLimit } = require('keepcount/http');

const { version } = require('express/package.json');
if (!version.startsWith('4.')) throw new Error(`express ${version} installed, not 4`);
const app = express();
app.use(rateLimit({ limit: 2, windowMs: 60_000 }));
app.get('/', (_req, res) => res.send('ok'));
const server = app.listen(0, '127.0.0.1', async () => {
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await fetch(`http://127.0.0.1:${server.address().port}/`)).status);
  server.close();
  if (statuses.join() !== '200,200,429') {
    console.log(`Express 4: statuses ${statuses.join()}, not 200,200,429`);
    process.exit(1);
  }
  console.log(`Express ${version} installs beside keepcount; rateLimit answers 200, 200, 429`);
});
