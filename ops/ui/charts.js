// Small SVG charts and a Prometheus text parser for the dashboard.
const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function empty(text) {
  const p = document.createElement("p");
  p.className = "muted";
  p.textContent = text;
  return p;
}

// barChart draws one bar per value (oldest first); labels, if given, name
// each bar under the axis.
export function barChart(values, fmt, emptyText, labels) {
  if (!values.length || values.every((v) => v === 0)) return empty(emptyText);
  const W = 320, H = 160, pad = 22, max = Math.max(...values);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `bar chart of ${values.length} values, largest ${fmt(max)}` });
  const bw = (W - pad) / values.length;
  values.forEach((v, i) => {
    const h = max ? ((H - 2 * pad) * v) / max : 0;
    const r = svg("rect", { class: "bar", x: pad + i * bw + 1, y: H - pad - h, width: Math.max(1, bw - 2), height: h });
    const t = svg("title");
    t.textContent = (labels ? `≤ ${labels[i]}: ` : "") + fmt(v);
    r.append(t);
    s.append(r);
  });
  s.append(svg("line", { class: "axis", x1: pad, y1: H - pad, x2: W, y2: H - pad }));
  const top = svg("text", { x: 0, y: pad - 6 });
  top.textContent = fmt(max);
  s.append(top);
  if (labels && labels.length) {
    for (const i of [0, Math.floor(labels.length / 2), labels.length - 1]) {
      const t = svg("text", { x: pad + i * bw, y: H - 6 });
      t.textContent = labels[i];
      s.append(t);
    }
  }
  return s;
}

// lineChart draws values over time, oldest first.
export function lineChart(values, emptyText) {
  if (values.length < 2) return empty(emptyText);
  const W = 640, H = 160, pad = 22, max = Math.max(1, ...values);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `line chart, latest ${values[values.length - 1].toFixed(1)} per second` });
  const x = (i) => pad + ((W - pad) * i) / (values.length - 1);
  const y = (v) => H - pad - ((H - 2 * pad) * v) / max;
  s.append(svg("line", { class: "axis", x1: pad, y1: H - pad, x2: W, y2: H - pad }));
  s.append(svg("path", { class: "line", d: values.map((v, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join("") }));
  const top = svg("text", { x: 0, y: pad - 6 });
  top.textContent = `${max.toFixed(1)}/s`;
  const last = svg("text", { x: W - 60, y: pad - 6 });
  last.textContent = `now ${values[values.length - 1].toFixed(1)}/s`;
  s.append(top, last);
  return s;
}

// parseMetrics reads the Prometheus text format into name -> [{labels, value}].
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: Number(m[4]) });
  }
  return out;
}

// histogramQuantile estimates quantiles of a histogram as Prometheus does
// (linear within the bucket); null if it has no observations.
export function histogramQuantile(metrics, name, qs) {
  const buckets = (metrics.get(name + "_bucket") || [])
    .map((b) => ({ le: b.labels.le === "+Inf" ? Infinity : Number(b.labels.le), n: b.value }))
    .sort((a, b) => a.le - b.le);
  if (!buckets.length) return null;
  const total = buckets[buckets.length - 1].n;
  if (!total) return null;
  return qs.map((q) => {
    const rank = q * total;
    for (let i = 0; i < buckets.length; i++) {
      if (buckets[i].n >= rank) {
        const lo = i ? buckets[i - 1].le : 0, loN = i ? buckets[i - 1].n : 0;
        if (buckets[i].le === Infinity) return lo;
        return lo + ((buckets[i].le - lo) * (rank - loN)) / Math.max(1, buckets[i].n - loN);
      }
    }
    return buckets[buckets.length - 2] ? buckets[buckets.length - 2].le : 0;
  });
}
