// Browser test of the dashboard: real headless Chromium (Debian's chromium, driven by
// puppeteer-core) against a real `ecgd serve`. Uploads a recording through the page's file
// input and checks what the page drew against an answer fetched independently from
// /v1/analyze: one R-peak marker per beat, one latent point per embedded beat, a click on a
// latent point shows that beat over its reconstruction, zooming into a 10-s window fetches a
// decimated window and draws it, the generated-beats grid has its cells.
// Prints TAP-like lines (ok N / not ok N); exits 1 on any failure.
// Usage: node tests/browser/dashboard.mjs BASE_URL RECORDING.csv FS SCREENSHOT_DIR
import { readFileSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

const [base, recording, fs, shots] = process.argv.slice(2);
let n = 0, failed = 0;
const check = (what, cond, detail) => {
  n++;
  if (cond) console.log(`ok ${n} - browser: ${what}`);
  else { failed++; console.log(`not ok ${n} - browser: ${what}${detail ? ` (${detail})` : ''}`); }
};

// The answer, independently of the page: the same bytes to /v1/analyze.
const body = readFileSync(recording);
const res = await fetch(`${base}/v1/analyze?fs=${fs}`, {
  method: 'POST', headers: { 'Content-Type': 'text/csv' }, body,
});
const expected = await res.json();
const nBeats = expected.beats.r_peak.length;
const nKept = expected.beats.latent.filter((z, k) => z && expected.beats.kept[k]).length;

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--no-first-run', '--disable-sync',
         '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1500 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(base + '/', { waitUntil: 'load' });
  check('the page loads with uPlot from the binary', await page.evaluate(() => typeof uPlot === 'function'));

  const input = await page.$('#file');
  await input.uploadFile(recording);
  await page.waitForFunction(() => window.ecgd.fullyDrawn || window.ecgd.error, { timeout: 120000 });
  const s = await page.evaluate(() => ({ ...window.ecgd.drawn, error: window.ecgd.error,
    beats: window.ecgd.answer && window.ecgd.answer.beats.r_peak.length, last: window.ecgd.lastSignal }));
  check('upload through the file input is analysed', !s.error && s.beats === nBeats, s.error || `${s.beats} vs ${nBeats}`);
  check(`R-peak markers drawn equal the answer's beats (${nBeats})`, s.rPeaks === nBeats, `${s.rPeaks}`);
  check(`latent plot has one point per embedded beat (${nKept})`, s.latentPoints === nKept, `${s.latentPoints}`);
  check('the whole recording is drawn from a decimated window', s.last && s.last.decimated && s.signalPoints > 100,
        JSON.stringify(s.last));
  // Unreadable stretches (quality.segments, when the engine reports them) are shaded.
  const unreadable = expected.quality && Array.isArray(expected.quality.segments)
    ? expected.quality.segments.filter((q) => q.reason !== 'ok' && q.reason !== null).length : null;
  if (unreadable === null) console.log(`skip ${++n} - browser: the answer has no quality.segments to shade`);
  else check(`every unreadable stretch is shaded (${unreadable})`, s.quality === unreadable, `${s.quality}`);
  await page.screenshot({ path: `${shots}/dashboard.png`, fullPage: true });

  // Click the point of the top outlier (or of the first embedded beat).
  const target = await page.evaluate(() => {
    const b = window.ecgd.answer.beats;
    let best = -1;
    b.score.forEach((sc, k) => { if (sc !== null && b.kept[k] && (best < 0 || sc > b.score[best])) best = k; });
    return { k: best, ...window.ecgd.latentPixels(best) };
  });
  await page.mouse.click(target.x, target.y);
  await page.waitForFunction(() => window.ecgd.beat && window.ecgd.beat.k === window.ecgd.selectedBeat, { timeout: 20000 });
  const picked = await page.evaluate((t) => {
    const k = window.ecgd.selectedBeat, p = window.ecgd.latentPixels(k);
    return { k, dist: Math.hypot(p.x - t.x, p.y - t.y), beat: window.ecgd.beat,
             title: document.getElementById('beat-title').textContent,
             canvases: document.querySelectorAll('#beat canvas').length, view: window.ecgd.lastSignal };
  }, target);
  check('clicking a latent point shows that beat over its reconstruction',
        picked.dist <= 12 && picked.beat.hasReconstruction && picked.title.startsWith(`#${picked.k} `) &&
        picked.canvases > 0, JSON.stringify(picked));
  await page.waitForFunction((k) => {
    const v = window.ecgd.lastSignal, t = window.ecgd.answer.beats.r_peak[k] / window.ecgd.answer.signal.fs_hz;
    return v && v.start_s <= t && t <= v.end_s && v.end_s - v.start_s < 10;
  }, { timeout: 20000 }, picked.k);
  check('the ECG view jumps to the clicked beat', true);
  await page.screenshot({ path: `${shots}/dashboard-beat.png`, fullPage: true });

  // Zoom: drag-select [60 s, 70 s] on the ECG (first show 0-120 s so both ends are on screen).
  const fetchesBefore = await page.evaluate(() => window.ecgd.signalFetches);
  await page.evaluate(() => { window.ecgd.testShow(0, 120); });
  await page.waitForFunction((f) => window.ecgd.signalFetches > f && window.ecgd.lastSignal.end_s > 100, { timeout: 20000 }, fetchesBefore);
  const box = await page.evaluate(() => {
    const r = document.querySelector('#ecg .u-over').getBoundingClientRect();
    return { x0: r.left + window.ecgd.testPos(60), x1: r.left + window.ecgd.testPos(70), y: r.top + r.height / 2 };
  });
  const before = await page.evaluate(() => window.ecgd.signalFetches);
  await page.mouse.move(box.x0, box.y);
  await page.mouse.down();
  await page.mouse.move((box.x0 + box.x1) / 2, box.y, { steps: 4 });
  await page.mouse.move(box.x1, box.y, { steps: 4 });
  await page.mouse.up();
  await page.waitForFunction((b) => window.ecgd.signalFetches > b && window.ecgd.lastSignal.end_s - window.ecgd.lastSignal.start_s < 11,
                             { timeout: 20000 }, before);
  const z = await page.evaluate(() => ({ ...window.ecgd.lastSignal, drawn: window.ecgd.drawn.signalPoints,
                                         requested: window.ecgd.lastRequestedPoints }));
  const fsN = Number(fs);
  const windowSamples = z.end - z.start;
  check('zooming into a 10-s window fetches that window and draws it',
        Math.abs(z.start_s - 60) < 0.2 && Math.abs(z.end_s - 70) < 0.2 &&
        Math.abs(windowSamples - 10 * fsN) <= 0.3 * fsN && z.drawn === z.points && z.points > 0,
        JSON.stringify(z));
  check('the 10-s window comes decimated when it has more samples than points',
        z.decimated === (windowSamples > z.requested) && z.points <= z.requested, JSON.stringify(z));
  await page.screenshot({ path: `${shots}/dashboard-zoom.png`, fullPage: true });

  const cells = await page.evaluate(() => ({ drawn: window.ecgd.drawn.gridCells,
    dom: document.querySelectorAll('#grid .cell canvas').length }));
  check('the generated-beats grid has its 36 cells drawn', cells.drawn === 36 && cells.dom === 36, JSON.stringify(cells));
  check('no script error on the page', errors.length === 0, errors.join('; '));
} catch (e) {
  check(`browser run: ${e.message}`, false);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
