// svg_check.mjs — opens a tracemill flame graph SVG in headless Chromium
// (playwright-core) and checks that it works as a page: the root frame is
// visible and reads "all", hovering fills the status line, clicking a frame
// zooms (the frame fills the width, frames outside it disappear, the root
// stays full width) and Reset Zoom restores, Ctrl-F search highlights the
// frames whose names match and prints the share of samples they cover
// (recomputed here from the frames' own attributes), Clear undoes it and
// the Search button does it again. Screenshots: the graph (SCREENSHOT.png)
// and the graph with the search applied (SCREENSHOT-search.png).
//
// usage: node svg_check.mjs CONSUMERS_DIR SVG SCREENSHOT.png SEARCH_TERM
// (CONSUMERS_DIR holds node_modules with playwright-core.)
// Prints SKIP (exit 0) when /usr/bin/chromium is missing.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import path from 'node:path';

const [consumers, svgPath, shotPath, term] = process.argv.slice(2);
if (!term) {
  console.error('usage: svg_check.mjs CONSUMERS_DIR SVG SCREENSHOT SEARCH_TERM');
  process.exit(2);
}
const chromiumPath = '/usr/bin/chromium';
if (!existsSync(chromiumPath)) {
  console.log(`SKIP: ${chromiumPath} missing, browser checks not run`);
  process.exit(0);
}
const require = createRequire(path.join(path.resolve(consumers), 'package.json'));
const { chromium } = require('playwright-core');

function check(cond, what) {
  if (!cond) throw new Error(`FAIL: ${what}`);
  console.log(`ok: ${what}`);
}

// Every frame as the page currently shows it.
async function frames(page) {
  return page.$$eval('g.f', (gs) => gs.map((g) => {
    const r = g.querySelector('rect');
    const box = r.getBoundingClientRect();
    return {
      title: g.querySelector('title').textContent,
      text: g.querySelector('text').textContent,
      s: +g.dataset.s, n: +g.dataset.n, d: +g.dataset.d,
      width: +r.getAttribute('width'), fill: r.getAttribute('fill'),
      shown: getComputedStyle(g).display !== 'none', boxW: box.width, boxH: box.height,
    };
  }));
}

const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('file://' + path.resolve(svgPath));
  // Screenshots cover the whole drawing (fullPage does not apply to an SVG document).
  const [svgW, svgH] = await page.$eval('svg', (s) => [+s.getAttribute('width'), +s.getAttribute('height')]);
  await page.setViewportSize({ width: Math.ceil(svgW), height: Math.min(Math.ceil(svgH), 4000) });

  const root = page.locator('g.f[data-d="0"]');
  check(await root.count() === 1, 'exactly one root frame');
  check(await root.locator('rect').isVisible(), 'root frame is visible');
  const rootBox = await root.locator('rect').boundingBox();
  check(rootBox && rootBox.width > 100 && rootBox.height > 5, `root frame has a real size (${rootBox.width}x${rootBox.height})`);
  check((await root.locator('text').textContent()) === 'all', 'root frame reads "all"');

  const before = await frames(page);
  const total = before.find((f) => f.d === 0).n;
  const avail = +(await page.getAttribute('svg', 'data-avail'));

  // Hover: the status line shows the frame's title.
  const hoverIdx = before.findIndex((f) => f.d === 1);
  await page.locator('g.f').nth(hoverIdx).locator('rect').hover();
  check((await page.textContent('#status')) === before[hoverIdx].title, 'hover shows the frame in the status line');

  // Zoom into the widest frame that is narrower than the root.
  let zi = -1;
  before.forEach((f, i) => { if (f.d > 0 && f.n < total && (zi < 0 || f.n > before[zi].n)) zi = i; });
  check(zi >= 0, 'a frame narrower than the root exists');
  const z = before[zi];
  await page.locator('g.f').nth(zi).locator('rect').click({ force: true });
  const zoomed = await frames(page);
  check(Math.abs(zoomed[zi].width - avail) < 0.02, `clicked frame now spans the width (${z.width} -> ${zoomed[zi].width})`);
  check(zoomed[zi].width > z.width, 'clicked frame grew');
  const rootAfter = zoomed.find((f) => f.d === 0);
  check(rootAfter.shown && Math.abs(rootAfter.width - avail) < 0.02, 'root stays full width as an ancestor');
  let outside = 0, badScale = 0;
  zoomed.forEach((f, i) => {
    const inside = f.d >= z.d && f.s >= z.s && f.s + f.n <= z.s + z.n;
    const above = f.d < z.d && f.s <= z.s && f.s + f.n >= z.s + z.n;
    if (!inside && !above) { if (f.shown) outside++; }
    else if (inside && Math.abs(f.width - f.n * avail / z.n) > 0.006) badScale++;
  });
  check(outside === 0, 'frames outside the zoomed one are hidden');
  check(badScale === 0, 'frames inside the zoomed one are n/zoomed.n of the width');
  check(await page.isVisible('#unzoom'), 'Reset Zoom appears');
  await page.click('#unzoom');
  const reset = await frames(page);
  check(reset.every((f, i) => f.shown && f.width === before[i].width && f.text === before[i].text), 'Reset Zoom restores every frame');
  await page.mouse.move(0, 0);
  await page.screenshot({ path: shotPath });
  console.log(`screenshot: ${shotPath}`);

  // Search via Ctrl-F: matching frames turn magenta; the matched share
  // counts each sample once (frames below a matching frame add nothing).
  page.on('dialog', (d) => d.accept(term));
  await page.keyboard.press('Control+f');
  const searched = await frames(page);
  const nameOf = (f) => f.title.slice(0, f.title.lastIndexOf(' ('));
  let re;
  try { re = new RegExp(term); } catch { re = null; }
  const hits = (f) => (re ? re.test(nameOf(f)) : nameOf(f).includes(term));
  const wantHits = searched.filter(hits);
  const gotHits = searched.filter((f) => f.fill === 'rgb(230,0,230)');
  check(wantHits.length > 0, `search term "${term}" matches some frame names`);
  check(gotHits.length === wantHits.length && gotHits.every(hits), `${wantHits.length} matching frames highlighted`);
  const hasMatchingAncestor = (f) => wantHits.some((a) => a.d < f.d && a.s <= f.s && f.s + f.n <= a.s + a.n);
  const covered = wantHits.filter((f) => !hasMatchingAncestor(f)).reduce((sum, f) => sum + f.n, 0);
  const want = `Matched: ${(100 * covered / total).toFixed(2)}%`;
  const matched = await page.textContent('#matched');
  check(matched.startsWith(want), `matched share shown: "${matched}" (expected "${want}")`);
  const searchShot = shotPath.replace(/\.png$/, '') + '-search.png';
  await page.screenshot({ path: searchShot });
  console.log(`screenshot: ${searchShot}`);
  await page.click('#clear');
  const cleared = await frames(page);
  check(cleared.every((f, i) => f.fill === before[i].fill) && (await page.textContent('#matched')).trim() === '',
    'Clear restores every colour and empties the matched line');
  await page.click('#search');
  const again = (await frames(page)).filter((f) => f.fill === 'rgb(230,0,230)');
  check(again.length === wantHits.length, 'the Search button finds the same frames');
  check(errors.length === 0, `no script errors${errors.length ? ': ' + errors.join('; ') : ''}`);
} finally {
  await browser.close();
}
