// speedscope_check.mjs — validates a tracemill speedscope file against the
// schema that ships with speedscope (dist/release/file-format-schema.json,
// JSON Schema draft-07, checked with ajv), then checks what the schema
// cannot say: every frame index points into shared.frames, samples and
// weights have the same length, weights are non-negative and add up to
// endValue - startValue, and the unit is the expected one.
// Prints "counts profiles=P frames=F samples=S nonempty=N weight=W" for the
// calling script to compare with the trace.
//
// usage: node speedscope_check.mjs CONSUMERS_DIR FILE.json UNIT
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [consumers, file, unit] = process.argv.slice(2);
if (!unit) {
  console.error('usage: speedscope_check.mjs CONSUMERS_DIR FILE.json UNIT');
  process.exit(2);
}
const modules = path.join(path.resolve(consumers), 'node_modules');
const require = createRequire(path.join(path.resolve(consumers), 'package.json'));
const Ajv = require('ajv');

function check(cond, what) {
  if (!cond) throw new Error(`FAIL: ${what}`);
}

const schema = JSON.parse(readFileSync(path.join(modules, 'speedscope/dist/release/file-format-schema.json'), 'utf8'));
check(schema.$schema === 'http://json-schema.org/draft-07/schema#', `schema is draft-07 (${schema.$schema})`);
const doc = JSON.parse(readFileSync(file, 'utf8'));
const ajv = new Ajv({ allErrors: true, strict: false });
const validate = ajv.compile(schema);
if (!validate(doc)) {
  console.error(JSON.stringify(validate.errors.slice(0, 10), null, 1));
  throw new Error(`FAIL: ${file} does not match speedscope's file-format schema`);
}
console.log(`ok: ${path.basename(file)} matches speedscope's schema`);

const nFrames = doc.shared.frames.length;
let samples = 0, nonEmpty = 0, weight = 0n;
for (const p of doc.profiles) {
  check(p.type === 'sampled', `${p.name}: sampled`);
  check(p.unit === unit, `${p.name}: unit ${p.unit}, expected ${unit}`);
  check(p.samples.length === p.weights.length, `${p.name}: ${p.samples.length} samples, ${p.weights.length} weights`);
  let sum = 0n;
  for (const w of p.weights) {
    check(Number.isSafeInteger(w) && w >= 0, `${p.name}: weight ${w} is a non-negative integer`);
    sum += BigInt(w);
  }
  for (const s of p.samples) {
    for (const i of s) check(Number.isInteger(i) && i >= 0 && i < nFrames, `${p.name}: frame index ${i} < ${nFrames}`);
    nonEmpty += s.length > 0;
  }
  // startValue/endValue beyond 2^53 lose precision in JSON.parse: compare
  // exactly only when both are exact.
  if (Number.isSafeInteger(p.startValue) && Number.isSafeInteger(p.endValue)) {
    check(sum === BigInt(p.endValue) - BigInt(p.startValue),
      `${p.name}: weights add up to ${sum}, endValue - startValue is ${p.endValue - p.startValue}`);
  }
  samples += p.samples.length;
  weight += sum;
}
console.log(`ok: ${doc.profiles.length} profiles: indices in range, weights add up to each profile's span`);
console.log(`counts profiles=${doc.profiles.length} frames=${nFrames} samples=${samples} nonempty=${nonEmpty} weight=${weight}`);
