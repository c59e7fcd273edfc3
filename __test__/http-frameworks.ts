/** The node:http and Express mounts the HTTP middleware specs run every chain on. */
import express from 'express';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Middleware } from '../lib/http/index.js';

export type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

/** The same middleware chain and handler, mounted on plain node:http or on Express. */
export const frameworks: Record<string, (chain: Middleware[], handler: Handler) => Server> = {
  'node:http': (chain, handler) =>
    createServer((req, res) => {
      const run = (i: number): void => {
        if (i === chain.length) {
          Promise.resolve(handler(req, res)).catch(() => res.writeHead(500).end());
          return;
        }
        chain[i]!(req, res, (error) => (error === undefined ? run(i + 1) : res.writeHead(500).end()));
      };
      run(0);
    }),
  express: (chain, handler) => {
    const app = express();
    for (const mw of chain) app.use(mw);
    app.get('/{*path}', (req, res, next) => Promise.resolve(handler(req, res)).catch(next));
    return createServer(app);
  },
};

export const ok: Handler = (_req, res) => void res.end('ok');
