// The ecgd dashboard: uploads a recording to POST /v1/analyses, then draws the kept analysis
// with uPlot: the ECG (signal windows fetched decimated from .../signal as the view zooms and
// pans), R peaks, beat boundaries and outlier scores, the heart-rate trend on the same time axis,
// the latent plane, one beat over its VAE reconstruction, the decoder's grid of generated beats,
// the summary and the run's backend and timings.
// window.ecgd exposes what was drawn (counts of markers, points, cells) for the browser tests.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const ASYNC_BYTES = 100 * 1024 * 1024; // the server's default --async-mb
  const state = window.ecgd = {
    id: null, answer: null, info: null, selectedBeat: null, signalFetches: 0, lastSignal: null,
    drawn: { rPeaks: 0, boundaries: 0, quality: 0, signalPoints: 0, latentPoints: 0, gridCells: 0 },
    fullyDrawn: false, tFullyDrawn: null, error: null,
  };
  let A = null;          // the analysis
  let T = null;          // per-beat arrays in seconds, and colours
  let ecg = null, hr = null, latent = null, beatPlot = null;
  let syncing = false, settingData = false, fetchTimer = null, fetchSeq = 0;

  // ---------------------------------------------------------------- HTTP
  function authHeaders(extra) {
    const h = Object.assign({}, extra || {});
    const token = $('token').value.trim();
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }
  async function api(path, options) {
    const o = options || {};
    const res = await fetch(path, Object.assign({}, o, { headers: authHeaders(o.headers) }));
    const body = await res.json().catch(() => null);
    if (!res.ok) {
      const e = body && body.error;
      throw new Error(e ? `${e.status} ${e.code}: ${e.message}` : `HTTP ${res.status}`);
    }
    return { status: res.status, body, location: res.headers.get('Location') };
  }

  function setStatus(text, fraction, isError) {
    $('status').textContent = text;
    $('status').className = isError ? 'error' : '';
    if (fraction !== undefined) $('bar').style.width = `${Math.round(fraction * 100)}%`;
    if (isError) state.error = text;
  }

  function contentType(name) {
    const ext = name.toLowerCase().split('.').pop();
    return { csv: 'text/csv', txt: 'text/csv', npy: 'application/x-npy', edf: 'application/edf',
             bdf: 'application/edf', json: 'application/json' }[ext] || 'application/octet-stream';
  }

  // Uploads with XMLHttpRequest (fetch has no upload progress); large bodies ask for 202.
  function upload(blob, name) {
    const type = contentType(name);
    const needsFs = ['text/csv', 'application/octet-stream', 'application/x-npy'].includes(type);
    const url = '/v1/analyses' + (needsFs ? `?fs=${encodeURIComponent($('fs').value)}` : '');
    const xhr = new XMLHttpRequest();
    const t0 = performance.now();
    state.fullyDrawn = false;
    xhr.open('POST', url);
    const headers = authHeaders({ 'Content-Type': type });
    if (blob.size >= ASYNC_BYTES) headers.Prefer = 'respond-async';
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable)
        setStatus(`Uploading ${name}: ${(e.loaded / 1e6).toFixed(1)} of ${(e.total / 1e6).toFixed(1)} MB`,
                  0.8 * e.loaded / e.total);
    };
    xhr.upload.onload = () => setStatus(`Analysing ${name}...`, 0.8);
    xhr.onerror = () => setStatus('Upload failed: the server is unreachable', 0, true);
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      if (xhr.status === 201) return show(body, name, performance.now() - t0, blob.size);
      if (xhr.status === 202) return poll(xhr.getResponseHeader('Location'), name, t0, blob.size);
      const e = body && body.error;
      setStatus(e ? `${e.status} ${e.code}: ${e.message}` : `HTTP ${xhr.status}`, 0, true);
    };
    setStatus(`Uploading ${name}...`, 0);
    xhr.send(blob);
  }

  async function poll(location, name, t0, size) {
    for (;;) {
      const r = await api(location).catch((e) => { setStatus(e.message, 0, true); return null; });
      if (!r) return;
      if (r.status === 200) return show(r.body, name, performance.now() - t0, size);
      setStatus(`Analysing ${name}: ${(r.body.elapsed_ms / 1000).toFixed(1)} s`, 0.9);
      await new Promise((ok) => setTimeout(ok, 500));
    }
  }

  // ---------------------------------------------------------------- colours and helpers
  // Score rank among kept beats -> blue (typical) .. red (unusual).
  function scoreColours(scores) {
    const kept = scores.map((s, k) => [s, k]).filter(([s]) => s !== null).sort((a, b) => a[0] - b[0]);
    const colours = scores.map(() => '#999');
    kept.forEach(([, k], r) => {
      const t = kept.length > 1 ? r / (kept.length - 1) : 0;
      colours[k] = `hsl(${Math.round(220 - 220 * t)}, 75%, 45%)`;
    });
    return colours;
  }
  function firstAtOrAfter(arr, x) { // arr ascending
    let lo = 0, hi = arr.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function fmtTime(s) {
    const m = Math.floor(s / 60);
    return `${m}:${(s - 60 * m).toFixed(2).padStart(5, '0')}`;
  }
  function width(el) { return Math.max(300, el.clientWidth || 600); }

  // ---------------------------------------------------------------- the ECG
  function duration() { return A.signal.samples / A.signal.fs_hz; }

  // Beat bands (coloured by score), quality shading, boundaries and R-peak markers.
  function drawBeats(u) {
    const ctx = u.ctx, { left, top, width: w, height: h } = u.bbox;
    const x0 = u.scales.x.min, x1 = u.scales.x.max;
    const px = (t) => u.valToPos(t, 'x', true);
    ctx.save();
    ctx.beginPath(); ctx.rect(left, top, w, h); ctx.clip();
    let quality = 0;
    for (const seg of qualitySegments()) {
      if (seg[1] < x0 || seg[0] > x1) continue;
      ctx.fillStyle = 'rgba(90, 90, 90, 0.22)';
      ctx.fillRect(px(seg[0]), top, px(seg[1]) - px(seg[0]), h);
      quality++;
    }
    const from = Math.max(0, firstAtOrAfter(T.end, x0)), to = firstAtOrAfter(T.onset, x1);
    const few = to - from < 600;
    let boundaries = 0, peaks = 0;
    for (let k = from; k < to; k++) {
      const a = px(T.onset[k]), b = px(T.end[k]);
      if (A.beats.kept[k] && T.score[k] !== null) {
        ctx.globalAlpha = A.beats.outlier[k] ? 0.28 : 0.10;
        ctx.fillStyle = T.colour[k];
        ctx.fillRect(a, top, b - a, h);
        ctx.globalAlpha = 1;
      }
      if (few) {
        ctx.strokeStyle = 'rgba(0, 0, 0, 0.25)';
        ctx.beginPath(); ctx.moveTo(a, top); ctx.lineTo(a, top + h); ctx.stroke();
        boundaries++;
      }
    }
    ctx.fillStyle = '#c0262d';
    for (let k = firstAtOrAfter(T.r, x0); k < T.r.length && T.r[k] <= x1; k++) {
      const x = px(T.r[k]);
      ctx.beginPath(); ctx.moveTo(x - 4, top + 1); ctx.lineTo(x + 4, top + 1); ctx.lineTo(x, top + 8);
      ctx.fill();
      peaks++;
    }
    if (state.selectedBeat !== null) {
      const k = state.selectedBeat;
      ctx.strokeStyle = '#000'; ctx.lineWidth = 2;
      ctx.strokeRect(px(T.onset[k]), top + 1, px(T.end[k]) - px(T.onset[k]), h - 2);
    }
    ctx.restore();
    Object.assign(state.drawn, { rPeaks: peaks, boundaries, quality });
  }

  // Unreadable stretches, when the answer has a signal-quality verdict: quality.segments of
  // {start, end (seconds), start_sample, end_sample, reason}; [start_s, end_s] pairs.
  function qualitySegments() {
    const segs = A.quality && Array.isArray(A.quality.segments) ? A.quality.segments : [];
    const fs = A.signal.fs_hz;
    const at = (s, key) => (s[`${key}_sample`] !== undefined ? s[`${key}_sample`] / fs : s[key]);
    return segs.filter((s) => s.reason !== 'ok' && s.reason !== null)
      .map((s) => [at(s, 'start'), at(s, 'end')]);
  }

  function makeEcg() {
    const el = $('ecg');
    el.innerHTML = '';
    let down = null;
    ecg = new uPlot({
      width: width(el), height: 300,
      scales: { x: { time: false, auto: false }, y: { auto: false } },
      axes: [{ label: 'time (s)' }, { label: 'mV' }],
      series: [{ label: 't (s)', value: (u, v) => (v === null ? '' : v.toFixed(3)) },
               { label: A.signal.lead || 'signal', stroke: '#1d2330', width: 1, points: { show: false } }],
      cursor: { drag: { x: true, y: false }, bind: { dblclick: () => () => { showRange(0, duration()); return null; } } },
      hooks: {
        draw: [drawBeats],
        setScale: [(u, key) => { if (key === 'x' && !settingData) { syncX(u); scheduleFetch(); } }],
        ready: [(u) => {
          u.over.addEventListener('wheel', (e) => {
            e.preventDefault();
            const { min, max } = u.scales.x;
            if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
              const d = (e.shiftKey ? e.deltaY : e.deltaX) > 0 ? 0.2 : -0.2;
              return showRange(min + d * (max - min), max + d * (max - min));
            }
            const f = e.deltaY < 0 ? 0.7 : 1 / 0.7, c = u.posToVal(e.offsetX, 'x');
            showRange(c - (c - min) * f, c + (max - c) * f);
          }, { passive: false });
          u.over.addEventListener('mousedown', (e) => { down = e.clientX; });
          u.over.addEventListener('click', (e) => {
            if (down === null || Math.abs(e.clientX - down) > 3) return;
            const t = u.posToVal(e.offsetX, 'x'), k = firstAtOrAfter(T.end, t);
            if (k < T.onset.length && T.onset[k] <= t) selectBeat(k, false);
          });
        }],
      },
    }, [[], []], el);
  }

  // Sets the view to [a, b] seconds, kept inside the recording and at least 0.5 s wide.
  function showRange(a, b) {
    const d = duration(), w = Math.min(d, Math.max(0.5, b - a));
    let lo = Math.max(0, Math.min(a, d - w));
    ecg.setScale('x', { min: lo, max: lo + w });
  }

  function syncX(from) {
    if (syncing) return;
    syncing = true;
    const { min, max } = from.scales.x;
    for (const u of [ecg, hr]) if (u && u !== from) u.setScale('x', { min, max });
    syncing = false;
  }

  function scheduleFetch() {
    clearTimeout(fetchTimer);
    fetchTimer = setTimeout(fetchWindow, 40);
  }

  // Fetches the visible window decimated to about two points per pixel.
  async function fetchWindow() {
    const { min, max } = ecg.scales.x;
    const seq = ++fetchSeq;
    const points = Math.max(2, 2 * Math.round(ecg.bbox.width / devicePixelRatio));
    state.lastRequestedPoints = points;
    const url = `/v1/analyses/${state.id}/signal?start_s=${Math.max(0, min).toFixed(4)}` +
                `&end_s=${max.toFixed(4)}&points=${points}`;
    const r = await api(url).catch((e) => { setStatus(e.message, undefined, true); return null; });
    if (!r || seq !== fetchSeq) return;
    const w = r.body, fs = w.fs_hz;
    state.signalFetches++;
    state.lastSignal = { start: w.start, end: w.end, decimated: w.decimated, points: w.i.length,
                         start_s: min, end_s: max };
    // setData without resetting the scales keeps the view; the y range follows the window.
    let lo = Infinity, hi = -Infinity;
    for (const v of w.v) { if (v < lo) lo = v; if (v > hi) hi = v; }
    const pad = 0.05 * (hi - lo || 1);
    // setScale again after setData: uPlot finds the visible index range of the new data then.
    settingData = true;
    ecg.setData([w.i.map((i) => i / fs), w.v], false);
    ecg.setScale('x', { min, max });
    ecg.setScale('y', { min: lo - pad, max: hi + pad });
    settingData = false;
    state.drawn.signalPoints = w.i.length;
    markDrawn('ecg');
  }

  function makeHr() {
    const el = $('hr');
    el.innerHTML = '';
    const xs = [], ys = [];
    A.beats.rr_ms.forEach((rr, k) => { if (rr) { xs.push(T.r[k]); ys.push(60000 / rr); } });
    hr = new uPlot({
      width: width(el), height: 140,
      scales: { x: { time: false, auto: false } },
      axes: [{}, { label: 'bpm' }],
      series: [{}, { label: 'heart rate', stroke: '#c0262d', width: 1, points: { size: 3 } }],
      cursor: { drag: { x: true, y: false } },
      hooks: { setScale: [(u, key) => { if (key === 'x') syncX(u); }] },
    }, [xs, ys], el);
  }

  // ---------------------------------------------------------------- latent plane
  function makeLatent() {
    const el = $('latent');
    el.innerHTML = '';
    const pts = [];
    A.beats.latent.forEach((z, k) => { if (z && A.beats.kept[k]) pts.push([z[0], z[1], k]); });
    const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
    const pad = (lo, hi) => { const m = 0.05 * (hi - lo || 1); return [lo - m, hi + m]; };
    const xr = pad(Math.min(...xs), Math.max(...xs)), yr = pad(Math.min(...ys), Math.max(...ys));
    latent = new uPlot({
      width: Math.min(width(el), 520), height: 360, legend: { show: false },
      scales: { x: { time: false, auto: false, range: () => xr }, y: { auto: false, range: () => yr } },
      axes: [{ label: 'z1' }, { label: 'z2' }],
      series: [{}, { stroke: 'transparent', points: { show: false } }],
      cursor: { drag: { x: false, y: false }, points: { show: false } },
      hooks: {
        draw: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          let n = 0;
          for (const [x, y, k] of pts) {
            ctx.fillStyle = T.colour[k];
            ctx.beginPath(); ctx.arc(u.valToPos(x, 'x', true), u.valToPos(y, 'y', true), 3 * devicePixelRatio, 0, 2 * Math.PI);
            ctx.fill();
            n++;
          }
          if (state.selectedBeat !== null && A.beats.latent[state.selectedBeat]) {
            const z = A.beats.latent[state.selectedBeat];
            ctx.strokeStyle = '#000'; ctx.lineWidth = 2 * devicePixelRatio;
            ctx.beginPath(); ctx.arc(u.valToPos(z[0], 'x', true), u.valToPos(z[1], 'y', true), 7 * devicePixelRatio, 0, 2 * Math.PI);
            ctx.stroke();
          }
          ctx.restore();
          state.drawn.latentPoints = n;
          markDrawn('latent');
        }],
        ready: [(u) => u.over.addEventListener('click', (e) => {
          let best = null, bestD = 12 * 12;
          for (const [x, y, k] of pts) {
            const dx = u.valToPos(x, 'x') - e.offsetX, dy = u.valToPos(y, 'y') - e.offsetY;
            if (dx * dx + dy * dy < bestD) { bestD = dx * dx + dy * dy; best = k; }
          }
          if (best !== null) selectBeat(best, true);
        })],
      },
    }, [[xr[0], xr[1]], [null, null]], el);
    state.latentPixels = (k) => {
      const z = A.beats.latent[k], r = latent.over.getBoundingClientRect();
      return { x: r.left + latent.valToPos(z[0], 'x'), y: r.top + latent.valToPos(z[1], 'y') };
    };
  }

  // ---------------------------------------------------------------- one beat
  async function selectBeat(k, jump) {
    state.selectedBeat = k;
    const r = await api(`/v1/analyses/${state.id}/beats/${k}`).catch((e) => { setStatus(e.message, undefined, true); return null; });
    if (!r || state.selectedBeat !== k) return;
    const b = r.body;
    $('beat-title').textContent = `#${k} at ${fmtTime(b.r_peak / b.fs_hz)}` +
      (b.score !== null ? `, score ${b.score.toFixed(2)}${b.outlier ? ' (outlier)' : ''}` : ', not embedded');
    const el = $('beat');
    el.innerHTML = '';
    const n = b.embedded ? b.beat_len : b.samples.length;
    const xs = Array.from({ length: n }, (_, i) => i);
    beatPlot = new uPlot({
      width: Math.min(width(el), 520), height: 260,
      scales: { x: { time: false } },
      axes: [{ label: b.embedded ? 'sample (analysis rate)' : 'sample' }, {}],
      series: [{}, { label: b.embedded ? 'beat (normalised)' : 'beat (mV)', stroke: '#1d2330', width: 1.5 },
               { label: 'VAE reconstruction', stroke: '#e07b00', width: 1.5 }],
    }, [xs, b.embedded || b.samples, b.reconstruction || xs.map(() => null)], el);
    state.beat = { k, samples: n, hasReconstruction: !!b.reconstruction };
    document.querySelectorAll('#outliers tr').forEach((tr) => tr.classList.toggle('selected', +tr.dataset.beat === k));
    if (jump || ecg.scales.x.max - ecg.scales.x.min > 20) {
      const t = T.r[k];
      showRange(t - 2.5, t + 2.5);
    } else {
      ecg.redraw(false);
    }
    latent.redraw(false);
  }

  // ---------------------------------------------------------------- generated beats
  async function makeGrid() {
    const el = $('grid');
    el.innerHTML = '';
    if (!A.model || !A.model.name) { el.textContent = 'No model: nothing to generate.'; markDrawn('grid'); return; }
    const n = 6;
    const abs = A.beats.latent.filter(Boolean).flatMap((z) => z.map(Math.abs)).sort((a, b) => a - b);
    const range = Math.max(1, Math.ceil(abs[Math.floor(0.95 * (abs.length - 1))] || 3));
    const r = await api(`/v1/models/${encodeURIComponent(A.model.name)}/decode`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ grid: { n, range } }),
    }).catch((e) => { el.textContent = e.message; return null; });
    if (!r) return;
    el.style.gridTemplateColumns = `repeat(${n}, 1fr)`;
    const cellW = Math.floor((width(el) - 2 * n) / n);
    const xs = Array.from({ length: r.body.beat_len }, (_, i) => i);
    r.body.beats.forEach((beat, i) => {
      const cell = document.createElement('div');
      cell.className = 'cell';
      const z = r.body.latent[i];
      cell.title = `z = (${z[0].toFixed(2)}, ${z[1].toFixed(2)})`;
      el.appendChild(cell);
      new uPlot({ width: cellW, height: Math.round(cellW * 0.6), legend: { show: false },
                  cursor: { show: false }, axes: [{ show: false }, { show: false }],
                  scales: { x: { time: false } },
                  series: [{}, { stroke: '#3a6fd8', width: 1.2 }] }, [xs, beat], cell);
    });
    state.drawn.gridCells = el.querySelectorAll('.cell canvas').length;
    markDrawn('grid');
  }

  // ---------------------------------------------------------------- summary, outliers, run
  function stat(value, label) { return `<div class="stat"><b>${value}</b><span>${label}</span></div>`; }
  function fill() {
    const s = A.summary || {}, hrS = s.heart_rate_bpm || {}, rr = s.rr_ms || {};
    const f = (v, d) => (v === undefined || v === null ? '&ndash;' : v.toFixed(d));
    $('summary').innerHTML = [
      stat(fmtTime(duration()), `${A.signal.lead || 'lead'} at ${A.signal.fs_hz} Hz`),
      stat(s.beats, 'beats'), stat(s.kept, 'embedded'), stat(s.outliers === undefined ? '&ndash;' : s.outliers, 'outliers'),
      stat(f(hrS.mean, 0), `bpm (${f(hrS.min, 0)}&ndash;${f(hrS.max, 0)})`),
      stat(f(rr.sdnn, 1), 'SDNN (ms)'), stat(f(rr.rmssd, 1), 'RMSSD (ms)'),
    ].join('') + (A.quality ? stat(A.quality.verdict, `signal quality (${f(100 * A.quality.usable_fraction, 0)} % usable)`) : '');
    const ranked = T.score.map((sc, k) => [sc, k]).filter(([sc]) => sc !== null).sort((a, b) => b[0] - a[0]).slice(0, 12);
    $('outliers').innerHTML = '<tr><th>beat</th><th>time</th><th>RR (ms)</th><th>score</th><th></th></tr>' +
      ranked.map(([sc, k]) => `<tr data-beat="${k}"><td>#${k}</td><td>${fmtTime(T.r[k])}</td>` +
        `<td>${A.beats.rr_ms[k] ? A.beats.rr_ms[k].toFixed(0) : '&ndash;'}</td><td>${sc.toFixed(2)}</td>` +
        `<td>${A.beats.outlier[k] ? 'outlier' : ''}</td></tr>`).join('');
    document.querySelectorAll('#outliers tr[data-beat]').forEach((tr) =>
      tr.addEventListener('click', () => selectBeat(+tr.dataset.beat, true)));
    const t = A.timing_ms || {}, info = state.info || {};
    const rows = [['backend', A.backend], ['device', info.device || ''], ['model', A.model ? `${A.model.name} (${A.model.sha256.slice(0, 12)})` : 'none'],
      ['analysis id', state.id], ...Object.entries(t).map(([k, v]) => [`${k} (ms)`, v.toFixed(2)])];
    if (state.upload) rows.push(['upload + analysis (ms)', state.upload.ms.toFixed(0)], ['body (MB)', (state.upload.bytes / 1e6).toFixed(2)]);
    $('run').innerHTML = rows.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join('');
  }

  const pending = new Set();
  function markDrawn(part) {
    pending.delete(part);
    if (!pending.size && !state.fullyDrawn) {
      state.fullyDrawn = true;
      state.tFullyDrawn = performance.now();
    }
  }

  // ---------------------------------------------------------------- showing an analysis
  function show(answer, name, ms, bytes) {
    A = state.answer = answer;
    state.id = answer.id;
    state.selectedBeat = null;
    state.upload = ms ? { ms, bytes } : null;
    history.replaceState(null, '', `#id=${answer.id}`);
    const fs = A.signal.fs_hz, b = A.beats;
    T = { r: b.r_peak.map((i) => i / fs), onset: b.onset.map((i) => Math.max(0, i) / fs),
          end: b.end.map((i) => i / fs), score: b.score || b.r_peak.map(() => null) };
    T.colour = scoreColours(T.score);
    pending.clear();
    ['ecg', 'latent', 'grid'].forEach((p) => pending.add(p));
    state.fullyDrawn = false;
    $('dash').hidden = false;
    setStatus(`${name}: ${b.r_peak.length} beats`, 1);
    fill();
    makeEcg();
    makeHr();
    makeLatent();
    $('beat').innerHTML = '';
    $('beat-title').textContent = 'click a point, a beat or an outlier';
    showRange(0, duration());
    makeGrid();
  }

  async function openId(id) {
    setStatus('Loading analysis...', 0.5);
    const r = await api(`/v1/analyses/${id}`).catch((e) => { setStatus(e.message, 0, true); return null; });
    if (r) show(r.body, `analysis ${id.slice(0, 8)}`);
  }

  // ---------------------------------------------------------------- wiring
  $('file').addEventListener('change', (e) => { const f = e.target.files[0]; if (f) upload(f, f.name); });
  $('example').addEventListener('click', async () => {
    const res = await fetch('/ui/example-mitdb-100.csv');
    $('fs').value = 360;
    upload(await res.blob(), 'mitdb-100.csv');
  });
  document.addEventListener('dragover', (e) => { e.preventDefault(); $('open').classList.add('over'); });
  document.addEventListener('dragleave', () => $('open').classList.remove('over'));
  document.addEventListener('drop', (e) => {
    e.preventDefault();
    $('open').classList.remove('over');
    const f = e.dataTransfer.files[0];
    if (f) upload(f, f.name);
  });
  const pan = (d) => { const { min, max } = ecg.scales.x; showRange(min + d * (max - min), max + d * (max - min)); };
  $('left').addEventListener('click', () => pan(-0.5));
  $('right').addEventListener('click', () => pan(0.5));
  document.addEventListener('keydown', (e) => {
    if (!ecg || e.target.tagName === 'INPUT') return;
    if (e.key === 'ArrowLeft') pan(-0.25);
    if (e.key === 'ArrowRight') pan(0.25);
  });
  fetch('/v1/info', { headers: authHeaders() }).then((r) => r.json()).then((info) => {
    state.info = info;
    $('server').textContent = `ecgd ${info.version || ''} - ${info.backend || ''} - ${info.device || ''}`;
  }).catch(() => {});
  // For tests and scripts: set the ECG view, and a time's x in CSS pixels of the plot area.
  state.testShow = (a, b) => showRange(a, b);
  state.testPos = (t) => ecg.valToPos(t, 'x');
  const m = /id=([0-9a-f]{32})/.exec(location.hash);
  if (m) openId(m[1]);
})();
