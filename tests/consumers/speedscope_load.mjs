// speedscope_load.mjs — loads a tracemill speedscope file into the real
// speedscope app (the npm package's dist/release, served over local HTTP)
// in headless Chromium via its #profileURL= hash parameter, and checks that
// the import succeeds: no page error, no "Something went wrong" screen, the
// window title names the profile, and the flame chart canvas is drawn.
//
// usage: node speedscope_load.mjs CONSUMERS_DIR FILE.json TITLE_PART
// Prints SKIP (exit 0) when /usr/bin/chromium is missing.
import { createRequire } from 'node:module';
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const [consumers, file, titlePart] = process.argv.slice(2);
if (!titlePart) {
  console.error('usage: speedscope_load.mjs CONSUMERS_DIR FILE.json TITLE_PART');
  process.exit(2);
}
const chromiumPath = '/usr/bin/chromium';
if (!existsSync(chromiumPath)) {
  console.log(`SKIP: ${chromiumPath} missing, speedscope import not run`);
  process.exit(0);
}
const require = createRequire(path.join(path.resolve(consumers), 'package.json'));
const { chromium } = require('playwright-core');
const release = path.join(path.resolve(consumers), 'node_modules/speedscope/dist/release');

const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.json': 'application/json',
  '.wasm': 'application/wasm', '.woff2': 'font/woff2', '.png': 'image/png', '.ico': 'image/x-icon' };
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  const p = url.pathname === '/profile.json' ? path.resolve(file)
    : path.join(release, path.normalize(url.pathname === '/' ? '/index.html' : url.pathname));
  if (!p.startsWith(release) && p !== path.resolve(file) || !existsSync(p)) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': types[path.extname(p)] || 'application/octet-stream' });
  res.end(readFileSync(p));
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
let failed = null;
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${base}/index.html#profileURL=${encodeURIComponent(`${base}/profile.json`)}`);
  await page.waitForFunction((t) => document.title.includes(t), titlePart, { timeout: 20000 })
    .catch(() => { failed = 'title never named the profile'; });
  if (failed) failed += ` (title: ${JSON.stringify(await page.title())})`;
  const body = await page.textContent('body');
  if (!failed && /Something went wrong|Unrecognized format/i.test(body)) failed = `speedscope says: ${body.slice(0, 200)}`;
  if (!failed && errors.length) failed = `page errors: ${errors.join('; ')}`;
  if (!failed && (await page.$$('canvas')).length === 0) failed = 'no canvas drawn';
  if (!failed) console.log(`ok: speedscope imported ${path.basename(file)} (title "${await page.title()}")`);
} finally {
  await browser.close();
  server.close();
}
if (failed) {
  console.error(`FAIL: ${failed}`);
  process.exit(1);
}
