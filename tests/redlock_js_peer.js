// SPDX-License-Identifier: MIT
// redlock_js_peer.js — node-redlock 4 on ioredis (bench/peers/node), the
// peer of dlock's key= layout in tests/interop_redis_test.sh:
//
//   node redlock_js_peer.js NODE_DIR URL KEY hold TTL_S  take KEY (waiting),
//        print "held", release when stdin ends ("released", or "lost")
//   ... try TTL_S   try once: exit 0 taken (and released), 1 held
//   ... wait TTL_S  wait, print "got", release
'use strict';
const path = require('path');
const [dir, url, key, mode, ttlS] = process.argv.slice(2);
const Redis = require(path.join(dir, 'node_modules', 'ioredis'));
const Redlock = require(path.join(dir, 'node_modules', 'redlock'));

const u = new URL(url);
const client = new Redis({host: u.hostname || '127.0.0.1', port: Number(u.port || 6379)});
const ttl = Math.round(Number(ttlS) * 1000);
// node-redlock waits by retrying every retryDelay ms (+ jitter).
const redlock = new Redlock([client], {retryCount: mode === 'try' ? 0 : -1, retryDelay: 20,
                                       retryJitter: 10});

async function main() {
  let lock;
  try {
    lock = await redlock.lock(key, ttl);
  } catch (e) {
    if (mode === 'try')
      return 1;
    throw e;
  }
  if (mode === 'try') {
    await lock.unlock();
    return 0;
  }
  if (mode === 'wait') {
    process.stdout.write('got\n');
    await lock.unlock();
    return 0;
  }
  process.stdout.write('held\n');
  await new Promise((resolve) => {
    process.stdin.on('data', () => {});
    process.stdin.on('end', resolve);
  });
  try {
    await lock.unlock();
    process.stdout.write('released\n');
  } catch (e) {
    process.stdout.write('lost\n');
  }
  return 0;
}

main().then((rc) => {
  client.disconnect();
  process.exit(rc);
}, (e) => {
  process.stderr.write('error: ' + (e && e.message ? e.message : e) + '\n');
  process.exit(2);
});
