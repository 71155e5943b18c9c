// The JavaScript reference point for the normalizer benchmark: postal-mime (the parser the
// TypeScript AECS-1 reference implementation uses) parsing the same files, median of rounds.
// node scripts/bench_postal_mime.mjs DIR [ROUNDS]  ->  one JSON line
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import PostalMime from "postal-mime";

const dir = process.argv[2];
const rounds = Number(process.argv[3] || 5);
const files = readdirSync(dir).filter((f) => f.endsWith(".eml")).sort();
const blobs = files.map((f) => readFileSync(join(dir, f)));
const bytes = blobs.reduce((n, b) => n + b.length, 0);
const times = [];
let failed = 0;
for (let r = 0; r <= rounds; r++) {
  const start = process.hrtime.bigint();
  for (const b of blobs) {
    try {
      await PostalMime.parse(b);
    } catch (e) {
      if (r === 0) failed += 1;
    }
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  if (r > 0) times.push(seconds); // round 0 warms the JIT
}
times.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)];
console.log(JSON.stringify({ messages: blobs.length, failed, seconds: median, msgsPerS: blobs.length / median, mbPerS: bytes / 1e6 / median }));
