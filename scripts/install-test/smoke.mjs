/* global console */
// JavaScript consumer, ES module: keepcount's "import" conditions.
import * as keepcount from 'keepcount';
import * as http from 'keepcount/http';
import exercise from './exercise.cjs';

const digest = await exercise(keepcount, http, 'js-import');
console.log(`js-import backend=${keepcount.backend} sketch=${digest}`);
