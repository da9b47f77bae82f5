// SPDX-License-Identifier: MIT
// redlock_peer.js — one worker of bench/peers/peer_bench.py with node-redlock
// 4 on ioredis (npm, installed in bench/peers/node by scripts/install-deps.sh
// peers): connect, print "ready", read "START_NS END_NS", loop lock /
// busy-wait HOLD_US / unlock, print "a b c d" per section
// (process.hrtime.bigint: CLOCK_MONOTONIC on Linux) and "done".
//
//   node redlock_peer.js REDIS_URL NAME HOLD_US RETRY_MS
'use strict';
const path = require('path');
const dir = process.env.DLOCK_PEERS_NODE_DIR || path.join(__dirname, 'node');
const Redis = require(path.join(dir, 'node_modules', 'ioredis'));
const Redlock = require(path.join(dir, 'node_modules', 'redlock'));

const [url, name, holdUs, retryMs] = process.argv.slice(2);
const u = new URL(url);
const client = new Redis({host: u.hostname || '127.0.0.1', port: Number(u.port || 6379),
                          password: u.password ? decodeURIComponent(u.password) : undefined,
                          lazyConnect: true, enableOfflineQueue: false});
// node-redlock waits by retrying: retryDelay is its poll interval (its default
// 200 ms is for contention that is rare); no jitter, so no waiter sleeps more.
const redlock = new Redlock([client], {retryCount: -1, retryDelay: Number(retryMs), retryJitter: 0});
const holdNs = BigInt(holdUs) * 1000n;
const now = process.hrtime.bigint;

function fail(e) {
  process.stderr.write('error: ' + (e && e.message ? e.message : e) + '\n');
  process.exit(1);
}

async function main() {
  await client.connect();
  process.stdout.write('ready\n');
  const line = await new Promise((resolve) => {
    let buf = '';
    process.stdin.on('data', (d) => {
      buf += d;
      if (buf.includes('\n'))
        resolve(buf);
    });
  });
  const [start, end] = line.trim().split(' ').map(BigInt);
  const wait = Number(start - now()) / 1e6 - 0.5;
  if (wait > 0)
    await new Promise((r) => setTimeout(r, wait));
  while (now() < start)
    ;
  const recs = [];
  for (;;) {
    const a = now();
    if (a >= end)
      break;
    const lock = await redlock.lock(name, 30000);
    const b = now();
    while (holdNs > 0n && now() < b + holdNs)
      ;
    const c = now();
    await lock.unlock();
    recs.push(a + ' ' + b + ' ' + c + ' ' + now());
  }
  recs.push('done');
  process.stdout.write(recs.join('\n') + '\n', () => {
    client.disconnect();
    process.exit(0);
  });
}
main().catch(fail);
