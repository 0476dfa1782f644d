// The page of `ragfind serve`: search, per-stage ranks and scores, and for a chosen passage the
// BM25 terms re-scored live for any k1 and b (the formulas of ragfind/serve/explain.py, which
// follow the C++ scorer), the dense cosine, and the MaxSim alignment. No dependencies.
"use strict";

const params = new URLSearchParams(location.search);
// The key may come as ?key=... for local use; it is sent as a Bearer header, never in URLs.
const apiKey = params.get("key") || "";
const state = { info: null, query: "", explanation: null, chosen: null };

function $(id) { return document.getElementById(id); }

function fmt(x, digits) {
  if (x === null || x === undefined) return "–";
  return Number(x).toFixed(digits === undefined ? 4 : digits);
}

async function api(path, body) {
  const headers = { "Content-Type": "application/json" };
  if (apiKey) headers["Authorization"] = "Bearer " + apiKey;
  const resp = await fetch(path, body === undefined ? { headers } : { method: "POST", headers, body: JSON.stringify(body) });
  const data = await resp.json().catch(() => ({ error: resp.statusText }));
  if (!resp.ok) throw new Error(data.error || ("HTTP " + resp.status));
  return data;
}

// The text with its highlights ([start, end) offsets in code points, as Python counts them)
// wrapped in <mark>; built from text nodes, never from HTML.
function markText(el, text, highlights) {
  el.textContent = "";
  const chars = Array.from(text);
  let at = 0;
  for (const [start, end] of highlights || []) {
    if (start < at || end <= start || end > chars.length) continue;
    if (start > at) el.append(chars.slice(at, start).join(""));
    const m = document.createElement("mark");
    m.textContent = chars.slice(start, end).join("");
    el.append(m);
    at = end;
  }
  if (at < chars.length) el.append(chars.slice(at).join(""));
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

// ---------------------------------------------------------------- BM25, as the server scores it

function bm25Idf(method, df, n) {
  switch (method) {
    case "robertson": return Math.log(Math.max(1.0, (n - df + 0.5) / (df + 0.5)));
    case "lucene": return Math.log(1.0 + (n - df + 0.5) / (df + 0.5));
    case "atire": return Math.log(n / df);
    case "bm25l": return Math.log((n + 1.0) / (df + 0.5));
    case "bm25+": case "bm25plus": return Math.log((n + 1.0) / df);
  }
  throw new Error("unknown BM25 variant " + method);
}

function bm25TfComponent(method, k1, b, delta, tf, dl, avgdl) {
  const norm = avgdl > 0 ? (1.0 - b + b * dl / avgdl) : 1.0;
  if (tf <= 0) {
    if (method === "bm25l") return (k1 + 1) * delta / (k1 + delta);
    if (method === "bm25+" || method === "bm25plus") return delta;
    return 0.0;
  }
  switch (method) {
    case "lucene": case "robertson": return tf / (k1 * norm + tf);
    case "atire": return tf * (k1 + 1) / (tf + k1 * norm);
    case "bm25l": { const c = tf / norm; return (k1 + 1) * (c + delta) / (k1 + c + delta); }
    case "bm25+": case "bm25plus": return (k1 + 1) * tf / (k1 * norm + tf) + delta;
  }
  throw new Error("unknown BM25 variant " + method);
}

// The explanation re-computed for k1 and b: {score, terms: [{..., idf, length_norm, tf_component, contribution}]}.
function bm25Rescore(ex, k1, b) {
  const n = ex.num_docs, dl = ex.doc_len, avgdl = ex.avgdl;
  let total = 0.0;
  const terms = ex.terms.map((t) => {
    const norm = avgdl > 0 ? (1.0 - b + b * dl / avgdl) : 1.0;
    let idf = 0.0, comp = 0.0, contrib = 0.0;
    if (t.df !== 0) {
      idf = bm25Idf(ex.method, t.df, n);
      comp = bm25TfComponent(ex.method, k1, b, ex.delta, t.tf, dl, avgdl);
      contrib = t.query_tf * idf * comp;
    }
    total += contrib;
    return { term: t.term, query_tf: t.query_tf, tf: t.tf, df: t.df, idf, length_norm: norm, tf_component: comp, contribution: contrib };
  });
  return { k1, b, score: total, terms };
}
window.ragfindBm25Rescore = bm25Rescore;  // for tests and the console

// ---------------------------------------------------------------- search and results

function stageBoxes(info) {
  const box = $("stage-boxes");
  box.textContent = "";
  for (const name of info.stages || []) {
    const label = document.createElement("label");
    const cb = document.createElement("input");
    cb.type = "checkbox"; cb.checked = true; cb.value = name; cb.className = "stage-box";
    label.append(cb, " " + name);
    box.append(label);
  }
}

function chosenStages() {
  const boxes = Array.from(document.querySelectorAll(".stage-box"));
  if (!boxes.length) return null;
  const on = boxes.filter((b) => b.checked).map((b) => b.value);
  return on.length === boxes.length ? null : on;
}

function fusionLine(r) {
  const rrfK = state.info ? state.info.rrf_k : 60;
  const weights = (state.info && state.info.weights) || {};
  const convex = state.info && state.info.fusion === "convex";
  const parts = Object.entries(r.ranks).map(([s, rank]) => {
    const w = weights[s] === undefined ? 1 : weights[s];
    return (w === 1 ? "" : w + "·") + (convex ? "norm(" + s + ")" : "1/(" + rrfK + "+" + rank + ")");
  });
  return parts.length ? "fused = " + parts.join(" + ") + " = " + fmt(r.scores.fused, 5) : "";
}

function renderResults(data) {
  const ol = $("results");
  ol.textContent = "";
  data.results.forEach((r, i) => {
    const li = document.createElement("li");
    li.className = "result";
    li.dataset.chunkId = r.chunk_id;
    li.dataset.docId = r.doc_id;
    const head = document.createElement("div");
    head.className = "head";
    const doc = document.createElement("span"); doc.className = "doc"; doc.textContent = r.title || r.doc_id;
    const id = document.createElement("span"); id.className = "hint"; id.textContent = r.doc_id + " #" + r.chunk_id;
    const score = document.createElement("span"); score.className = "score"; score.textContent = fmt(r.score, 5);
    const why = document.createElement("button"); why.type = "button"; why.className = "why"; why.textContent = "Why?";
    why.addEventListener("click", () => explain(r, li));
    head.append(doc, id, score, why);
    const text = document.createElement("div"); text.className = "text"; markText(text, r.text, r.highlights);
    const chips = document.createElement("div"); chips.className = "chips";
    for (const [s, rank] of Object.entries(r.ranks)) {
      const c = document.createElement("span"); c.className = "chip stage-" + s; c.dataset.stage = s;
      c.textContent = s + " #" + rank + " · " + fmt(r.scores[s]);
      chips.append(c);
    }
    for (const [s, v] of Object.entries(r.scores)) {
      if (s in r.ranks || s === "fused") continue;
      const c = document.createElement("span"); c.className = "chip"; c.textContent = s + " " + fmt(v);
      chips.append(c);
    }
    const fusion = document.createElement("div"); fusion.className = "fusion-line"; fusion.textContent = fusionLine(r);
    li.append(head, text, chips, fusion);
    ol.append(li);
    if (i === 0 && !state.chosen) li.dataset.first = "1";
  });
  const t = data.timings || {};
  setStatus(data.results.length + " passages in " + fmt(t.total, 2) + " ms" + (data.cached ? " (cached)" : ""));
}

async function search(query) {
  state.query = query;
  state.chosen = null;
  $("explain-pane").hidden = true;
  // highlight: the server marks the matched words only when asked (they cost it most of a search)
  const body = { query, k: Math.max(1, Math.min(100, parseInt($("k").value, 10) || 10)), highlight: true };
  const stages = chosenStages();
  if (stages) body.stages = stages;
  setStatus("searching…");
  try {
    renderResults(await api("/search", body));
  } catch (e) {
    $("results").textContent = "";
    setStatus(e.message, true);
  }
}

// ---------------------------------------------------------------- the explanation

function renderBm25() {
  const ex = state.explanation && state.explanation.bm25;
  if (!ex) return;
  const k1 = parseFloat($("k1").value), b = parseFloat($("b").value);
  $("k1-value").textContent = k1.toFixed(2);
  $("b-value").textContent = b.toFixed(2);
  const res = bm25Rescore(ex, k1, b);
  const tbody = $("bm25-table").querySelector("tbody");
  tbody.textContent = "";
  const top = Math.max(1e-12, ...res.terms.map((t) => t.contribution));
  for (const t of res.terms) {
    const tr = document.createElement("tr");
    tr.dataset.term = t.term;
    tr.dataset.contribution = String(t.contribution);
    const cells = [t.term, t.query_tf, t.tf, t.df, fmt(t.idf), fmt(t.length_norm), fmt(t.tf_component)];
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.append(td); }
    const td = document.createElement("td"); td.className = "contrib";
    const fill = document.createElement("span"); fill.className = "fill"; fill.style.width = (100 * t.contribution / top) + "%";
    const v = document.createElement("span"); v.textContent = fmt(t.contribution);
    v.style.position = "relative";
    td.append(fill, v); tr.append(td);
    tbody.append(tr);
  }
  const score = $("bm25-score");
  score.textContent = fmt(res.score);
  score.dataset.value = String(res.score);
}

function renderExplanation(ex, result) {
  $("explain-pane").hidden = false;
  $("explain-title").textContent = (ex.title || ex.doc_id) + " #" + ex.chunk_id;
  $("explain-text").textContent = ex.text;
  const fusion = $("fusion");
  fusion.textContent = "";
  const p = document.createElement("p");
  if (ex.fusion.terms.length) {
    const convex = ex.fusion.method === "convex";
    p.textContent = (convex ? "Convex fusion (scores min-max normalised per list): " : "Reciprocal rank fusion: ") + ex.fusion.terms.map((t) =>
      t.stage + " rank " + t.rank + " → " + (t.weight === 1 ? "" : t.weight + "·") +
      (convex ? "(" + fmt(t.score) + "−" + fmt(t.lo) + ")/(" + fmt(t.hi) + "−" + fmt(t.lo) + ")" : "1/(" + ex.fusion.rrf_k + "+" + t.rank + ")") + " = " + fmt(t.term, 5)
    ).join("; ") + "; sum " + fmt(ex.fusion.score, 5) + (ex.final_score !== null && Math.abs(ex.final_score - ex.fusion.score) > 1e-12 ? " (final score after re-ranking " + fmt(ex.final_score) + ")" : "");
  } else {
    p.textContent = "No first stage retrieved this passage for this query.";
  }
  p.id = "fusion-detail";
  fusion.append(p);
  state.explanation = { bm25: null };
  $("bm25").hidden = true; $("dense").hidden = true; $("late").hidden = true;
  for (const [name, s] of Object.entries(ex.stages)) {
    if (s.kind === "bm25" && s.present && !state.explanation.bm25) {
      state.explanation.bm25 = s;
      $("bm25").hidden = false;
      $("bm25-method").textContent = s.method + (s.method === "lucene" ? "" : ", delta " + s.delta);
      $("bm25-n").textContent = s.num_docs;
      $("bm25-avgdl").textContent = fmt(s.avgdl, 2);
      $("bm25-dl").textContent = s.doc_len;
      $("k1").value = s.k1; $("b").value = s.b;
      $("k1").dataset.default = s.k1; $("b").dataset.default = s.b;
      $("bm25-server").textContent = fmt(s.score);
      $("bm25-server").dataset.value = String(s.score);
    } else if (s.kind === "dense" && s.present) {
      $("dense").hidden = false;
      $("cosine").textContent = fmt(s.cosine);
      $("cosine").dataset.value = String(s.cosine);
      $("dense-dim").textContent = "(" + name + ", " + s.dim + " dimensions)";
      $("cosine-bar").style.width = Math.max(0, 100 * s.cosine) + "%";
    } else if (s.kind === "late" && s.present) {
      $("late").hidden = false;
      const tbody = $("maxsim-table").querySelector("tbody");
      tbody.textContent = "";
      for (const m of s.matches) {
        const tr = document.createElement("tr");
        for (const c of [m.query_text || ("q" + m.query_token), m.doc_text || ("d" + m.doc_token), fmt(m.similarity)]) {
          const td = document.createElement("td"); td.textContent = c; tr.append(td);
        }
        tbody.append(tr);
      }
      $("maxsim-score").textContent = fmt(s.score);
    }
  }
  renderBm25();
}

async function explain(result, li) {
  document.querySelectorAll(".result.chosen").forEach((e) => e.classList.remove("chosen"));
  li.classList.add("chosen");
  state.chosen = result.chunk_id;
  try {
    renderExplanation(await api("/explain", { query: state.query, chunk_id: result.chunk_id }), result);
    setStatus("explained " + result.doc_id + " #" + result.chunk_id);
  } catch (e) {
    setStatus(e.message, true);
  }
}

// ---------------------------------------------------------------- wiring

$("search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = $("q").value.trim();
  if (!q) return;
  const url = new URL(location.href);
  url.searchParams.set("q", q);
  history.replaceState(null, "", url);
  search(q);
});
$("k1").addEventListener("input", renderBm25);
$("b").addEventListener("input", renderBm25);
$("reset").addEventListener("click", () => {
  $("k1").value = $("k1").dataset.default; $("b").value = $("b").dataset.default; renderBm25();
});

(async function start() {
  try {
    state.info = await api("/info");
    stageBoxes(state.info);
  } catch (e) {
    setStatus(e.message, true);
    return;
  }
  const q = params.get("q");
  if (q) { $("q").value = q; search(q); }
  else setStatus(state.info.documents + " documents; stages " + (state.info.stages || []).join(", "));
})();
