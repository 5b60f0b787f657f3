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

// axisLabels names a chart's axes: y along the left edge, x under the axis.
function axisLabels(s, W, H, padL, axes) {
  if (!axes) return;
  if (axes.y) {
    const y = svg("text", { class: "axis-label", "text-anchor": "middle", transform: `translate(10 ${(H - 14) / 2}) rotate(-90)` });
    y.textContent = axes.y;
    s.append(y);
  }
  if (axes.x) {
    const x = svg("text", { class: "axis-label", "text-anchor": "middle", x: padL + (W - padL) / 2, y: H - 2 });
    x.textContent = axes.x;
    s.append(x);
  }
}

// barChart draws one bar per value (oldest first); labels, if given, name
// each bar under the axis; axes ({x, y}) names the axes.
export function barChart(values, fmt, emptyText, labels, axes) {
  if (!values.length || values.every((v) => v === 0)) return empty(emptyText);
  const W = 320, H = 176, padT = 22, padL = axes && axes.y ? 34 : 22, max = Math.max(...values);
  const padB = (axes && axes.x ? 16 : 0) + (labels && labels.length ? 18 : 6);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `bar chart of ${values.length} values, largest ${fmt(max)}` + (axes ? `: ${axes.y || ""} by ${axes.x || ""}` : "") });
  const bw = (W - padL) / values.length;
  const base = H - padB;
  values.forEach((v, i) => {
    const h = max ? ((base - padT) * v) / max : 0;
    const r = svg("rect", { class: "bar", x: padL + i * bw + 1, y: base - h, width: Math.max(1, bw - 2), height: h });
    const t = svg("title");
    t.textContent = (labels ? `≤ ${labels[i]}: ` : "") + fmt(v);
    r.append(t);
    s.append(r);
  });
  s.append(svg("line", { class: "axis", x1: padL, y1: base, x2: W, y2: base }));
  s.append(svg("line", { class: "axis", x1: padL, y1: padT, x2: padL, y2: base }));
  const top = svg("text", { x: padL + 2, y: padT - 6 });
  top.textContent = fmt(max);
  s.append(top);
  if (labels && labels.length) {
    for (const i of [0, Math.floor(labels.length / 2), labels.length - 1]) {
      const t = svg("text", { x: padL + i * bw, y: base + 13 });
      t.textContent = labels[i];
      s.append(t);
    }
  }
  axisLabels(s, W, H, padL, axes);
  return s;
}

// lineChart draws values over time, oldest first; axes ({x, y}) names the axes.
export function lineChart(values, emptyText, axes) {
  if (values.length < 2) return empty(emptyText);
  const W = 640, H = 176, padT = 22, padL = axes && axes.y ? 34 : 22, padB = axes && axes.x ? 22 : 6, max = Math.max(1, ...values);
  const base = H - padB;
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `line chart, latest ${values[values.length - 1].toFixed(1)} per second` });
  const x = (i) => padL + ((W - padL) * i) / (values.length - 1);
  const y = (v) => base - ((base - padT) * v) / max;
  s.append(svg("line", { class: "axis", x1: padL, y1: base, x2: W, y2: base }));
  s.append(svg("line", { class: "axis", x1: padL, y1: padT, x2: padL, y2: base }));
  s.append(svg("path", { class: "line", d: values.map((v, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join("") }));
  const top = svg("text", { x: padL + 2, y: padT - 6 });
  top.textContent = `${max.toFixed(1)}/s`;
  const last = svg("text", { x: W - 60, y: padT - 6 });
  last.textContent = `now ${values[values.length - 1].toFixed(1)}/s`;
  s.append(top, last);
  axisLabels(s, W, H, padL, axes);
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
