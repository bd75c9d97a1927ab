// Page load to first full drawing of a kept analysis in headless Chromium: opens BASE/#id=ID
// (the dashboard fetches the analysis, draws the ECG from a decimated window, the heart rate,
// the latent plane and the generated-beat grid) and reports window.ecgd.tFullyDrawn, the time
// from navigation start to the moment all of them are drawn, for `runs` fresh page loads.
// Usage: node bench/dashboard_load.mjs BASE_URL ID RUNS  -> one line of JSON
import puppeteer from 'puppeteer-core';

const [base, id, runs] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--no-first-run', '--disable-sync', '--disable-dev-shm-usage'],
});
const times = [];
try {
  for (let r = 0; r < Number(runs); r++) {
    const page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 1500 });
    await page.goto(`${base}/#id=${id}`, { waitUntil: 'load' });
    await page.waitForFunction(() => window.ecgd && window.ecgd.fullyDrawn, { timeout: 60000 });
    times.push(await page.evaluate(() => window.ecgd.tFullyDrawn));
    await page.close();
  }
} finally {
  await browser.close();
}
times.sort((a, b) => a - b);
console.log(JSON.stringify({ runs: times.length, median_ms: times[times.length >> 1], min_ms: times[0],
                             max_ms: times[times.length - 1] }));
