'use strict';
/* global require, console */
/* eslint-disable @typescript-eslint/no-require-imports -- this consumer tests require() */
// JavaScript consumer, CommonJS: keepcount's "require" conditions.
const keepcount = require('keepcount');
const http = require('keepcount/http');
const exercise = require('./exercise.cjs');

exercise(keepcount, http, 'js-require').then((digest) => {
  console.log(`js-require backend=${keepcount.backend} sketch=${digest}`);
});
