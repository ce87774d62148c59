// Allocation-heavy JavaScript for the LD_PRELOAD tests, run as `node -e "require(...)"`.
// The V8 heap is V8's own, but node allocates array buffers (calloc/malloc), strings crossing
// into C++, zlib and OpenSSL state, and libuv and V8 worker-thread memory with malloc, and it
// aborts without posix_memalign and malloc_usable_size. Prints a digest that compare.sh
// requires to match the run without the preloaded allocator.
'use strict';
const crypto = require('crypto');
const zlib = require('zlib');

const hash = crypto.createHash('sha256');
const N = 300000;

// A big Map of objects, half deleted, then refilled.
const map = new Map();
for (let i = 0; i < N; i++) map.set('k' + i, { id: i, name: 'n'.repeat(i % 20), tags: [i % 7, i % 11] });
for (let i = 0; i < N; i += 2) map.delete('k' + i);
for (let i = 0; i < N / 4; i++) map.set('r' + i, [i, String(i * 3)]);
let sum = 0;
for (const [k, v] of map) sum += k.length + (Array.isArray(v) ? v[0] : v.id);
hash.update(`map ${map.size} ${sum}\n`);

// JSON round trip of a large array.
const rows = [];
for (let i = 0; i < 100000; i++) rows.push({ i, s: 'row' + i, f: i / 3 });
const json = JSON.stringify(rows);
const back = JSON.parse(json);
if (back.length !== rows.length || back[99999].s !== 'row99999') throw new Error('JSON round trip lost data');
hash.update(json);

// Buffers outside the V8 heap (malloc/calloc), compressed and inflated by zlib.
const buffers = [];
for (let i = 0; i < 2000; i++) buffers.push(Buffer.alloc(1 + (i * 97) % 65536, i & 0xff));
const joined = Buffer.concat(buffers);
const inflated = zlib.inflateSync(zlib.deflateSync(joined));
if (!inflated.equals(joined)) throw new Error('zlib round trip lost data');
hash.update(inflated);

console.log(`map ${map.size} rows ${back.length} bytes ${joined.length}`);
console.log(`digest ${hash.digest('hex')}`);
