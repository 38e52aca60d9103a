// orderflow operations page, rates charts: the per-minute counts and
// sampled peaks of the last hour (GET /v1/ops/rates), drawn with uPlot
// (static/lib/uplot, pinned in thirdparty/package.json). It reads the
// token ops.js keeps in sessionStorage and refreshes while the console is
// shown and "live" is ticked.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const KEY = 'orderflow.ops.token';
  const section = $('charts');
  const params = new URLSearchParams(location.search);
  const refreshMs = Number(params.get('refreshMs') || section.dataset.refreshMs || 10000);
  const colours = {
    submitted: '#1f5fd1', finished: '#17733f', failed: '#b42318',
    deadLettered: '#8a5a00', slotUtilisation: '#6b3fd1', checkLatenessSeconds: '#0f7285',
  };
  const plots = new Map();

  // value reads one minute's figure of a series: counts are int64 (JSON
  // strings), gauges are absent when no sample was taken (a gap).
  function value(point, name) {
    const v = point[name];
    if (v === undefined || v === null) {
      return name === 'slotUtilisation' || name === 'checkLatenessSeconds' ? null : 0;
    }
    return name === 'slotUtilisation' ? Number(v) * 100 : Number(v);
  }

  function format(v, unit) {
    if (v === null || v === undefined) return '–';
    if (unit === '%') return v.toFixed(0) + '%';
    if (unit === 's') return v.toFixed(1) + ' s';
    return String(Math.round(v));
  }

  function plotFor(fig, data) {
    const name = fig.dataset.series;
    const unit = fig.dataset.unit;
    const box = fig.querySelector('.chart-plot');
    const opts = {
      width: Math.max(box.clientWidth, 200),
      height: 150,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max, unit === '%' ? 100 : 1)] } },
      axes: [
        { stroke: '#5b6576', grid: { stroke: '#eef0f3' }, size: 30 },
        {
          stroke: '#5b6576', grid: { stroke: '#eef0f3' }, size: 52,
          // Counts tick at whole numbers only.
          incrs: unit === '/min' ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5] : undefined,
          values: (u, ticks) => ticks.map((t) => format(t, unit === '/min' ? '' : unit)),
        },
      ],
      series: [
        {},
        {
          label: fig.querySelector('figcaption').firstChild.textContent.trim(),
          stroke: colours[name], width: 2, fill: colours[name] + '22', spanGaps: false,
          // Gauges may have lone samples between gaps: mark every one.
          points: { show: unit !== '/min', size: 4, fill: colours[name] },
        },
      ],
    };
    // eslint-disable-next-line no-undef
    return new uPlot(opts, data, box);
  }

  let loading = false;

  async function load() {
    const token = sessionStorage.getItem(KEY) || '';
    if (loading || !token || $('console').hidden || !$('live').checked) return;
    loading = true;
    try {
      await draw(token);
    } finally {
      loading = false;
    }
  }

  async function draw(token) {
    let res;
    try {
      res = await fetch('/v1/ops/rates', { headers: { Authorization: 'Bearer ' + token } });
    } catch (e) {
      return; // ops.js shows the lost connection
    }
    const body = await res.json().catch(() => ({}));
    const err = $('charts-error');
    if (!res.ok) {
      err.textContent = res.status + ': ' + (body.message || 'rates unavailable');
      err.hidden = false;
      return;
    }
    err.hidden = true;
    const points = body.points || [];
    const xs = points.map((p) => Date.parse(p.startTime) / 1000);
    for (const fig of section.querySelectorAll('figure.chart')) {
      const name = fig.dataset.series;
      const unit = fig.dataset.unit;
      const ys = points.map((p) => value(p, name));
      const seen = ys.filter((v) => v !== null);
      const last = seen.length ? seen[seen.length - 1] : null;
      if (unit === '/min') {
        const total = seen.reduce((a, b) => a + b, 0);
        fig.dataset.total = String(total);
        fig.querySelector('.chart-summary').textContent = '· ' + total + ' in the hour, ' + format(ys[ys.length - 1], unit) + ' this minute';
      } else {
        const peak = seen.length ? Math.max(...seen) : null;
        fig.dataset.peak = peak === null ? '' : String(peak);
        fig.querySelector('.chart-summary').textContent = '· now ' + format(last, unit) + ', peak ' + format(peak, unit);
      }
      fig.dataset.points = String(seen.length);
      const data = [xs, ys];
      const plot = plots.get(fig);
      if (plot) {
        plot.setData(data);
      } else {
        plots.set(fig, plotFor(fig, data));
      }
    }
    section.dataset.loaded = String(Date.now());
  }

  let timer = null;
  async function tick() {
    clearTimeout(timer);
    await load();
    timer = setTimeout(tick, refreshMs);
  }

  window.addEventListener('resize', () => {
    for (const [fig, plot] of plots) {
      plot.setSize({ width: Math.max(fig.querySelector('.chart-plot').clientWidth, 200), height: 150 });
    }
  });
  // Load as soon as the console is shown (sign-in), then every refreshMs.
  new MutationObserver(() => { if (!$('console').hidden) tick(); })
    .observe($('console'), { attributes: true, attributeFilter: ['hidden'] });
  tick();
})();
