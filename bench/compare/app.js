// The "app server + Redis" baseline of the comparative benchmark: an HTTP server that answers
// GET /v1/check?key=K&limit=N&window_ms=W&cost=C with 200 (allowed) or 429 (denied), checking every
// request against redis-server through rate-limiter-flexible (its Lua-scripted counter) and ioredis.
'use strict';
const http = require('http');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const port = Number(process.env.PORT || 7300);
const redis = new Redis({ host: '127.0.0.1', port: Number(process.env.REDIS_PORT || 6399), enableOfflineQueue: true });
const limiters = new Map();  // one per (limit, window)

function limiterFor(points, windowMs) {
  const id = points + '/' + windowMs;
  let l = limiters.get(id);
  if (!l) {
    l = new RateLimiterRedis({ storeClient: redis, keyPrefix: 'rl' + id, points,
                               duration: Math.max(1, Math.ceil(windowMs / 1000)) });
    limiters.set(id, l);
  }
  return l;
}

http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const key = url.searchParams.get('key');
  if (url.pathname !== '/v1/check' || !key) {
    res.writeHead(400, { 'Content-Type': 'application/json' });
    return res.end('{"error":{"code":"invalid_field","message":"key required"}}');
  }
  const limit = Number(url.searchParams.get('limit') || 100);
  const windowMs = Number(url.searchParams.get('window_ms') || 1000);
  const cost = Number(url.searchParams.get('cost') || 1);
  limiterFor(limit, windowMs).consume(key, cost).then(
    (r) => { res.writeHead(200, { 'Content-Type': 'application/json' });
             res.end('{"allowed":true,"remaining":' + r.remainingPoints + '}'); },
    (r) => {
      if (r instanceof Error) { res.writeHead(500); return res.end(); }
      res.writeHead(429, { 'Content-Type': 'application/json' });
      res.end('{"allowed":false}');
    });
}).listen(port, '127.0.0.1');
