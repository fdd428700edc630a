"use strict";
// The attnflow report: reads the embedded JSON (one attnflow result: text, generation or image) and
// draws the sources coloured by what the chosen target draws on, the method switch, the layer
// slider and the layers x sources heatmap.
// All text goes through textContent, never innerHTML, so tokens such as "<script>" stay text.
(function () {
  // Large arrays arrive packed as float16 in base64 (see data.py); unpack them into nested views.
  function half(h) {
    const e = (h >> 10) & 31, f = h & 1023, s = h >> 15 ? -1 : 1;
    if (e === 0) return s * f * 2 ** -24;
    if (e === 31) return f ? NaN : s * Infinity;
    return s * (1 + f / 1024) * 2 ** (e - 15);
  }
  function unpack(v) {
    if (!v || Array.isArray(v)) return v;
    const text = atob(v.base64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const h = new Uint16Array(bytes.buffer);
    const flat = new Float32Array(h.length);
    for (let i = 0; i < h.length; i++) flat[i] = half(h[i]);
    const nest = (offset, dims) => {
      if (dims.length === 1) return flat.subarray(offset, offset + dims[0]);
      const step = dims.slice(1).reduce((a, b) => a * b, 1);
      return Array.from({ length: dims[0] }, (_, i) => nest(offset + i * step, dims.slice(1)));
    };
    return nest(0, v.shape);
  }
  const data = JSON.parse(document.getElementById("attnflow-data").textContent);
  data.methods.forEach((m) => { m.rows = unpack(m.rows); });

  // Long inputs: targets other than the opening one sit in compressed chunks (see data.py), each in
  // its own <script type="application/octet-stream"> block of this file, decoded on first use.
  const LOG8_OCTAVES = 20;
  const decodedChunks = new Map(); // chunk id -> {target: [row per computed layer]}
  const loading = new Map(); // chunk id -> promise
  async function inflate(id) {
    const text = document.getElementById(`attnflow-chunk-${id}`).textContent;
    const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  function decodeChunk(bytes, encoding, targets, layers, width) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const out = {};
    const rows = targets.length * layers;
    const codes = 4 * rows; // log8: the row maxima come first
    targets.forEach((t, i) => {
      const code = new Uint8Array(width); // log8: running sum (mod 256) of the per-layer differences
      out[t] = Array.from({ length: layers }, (_, k) => {
        const r = i * layers + k;
        const row = new Float32Array(width);
        if (encoding === "f16") {
          for (let j = 0; j < width; j++) row[j] = half(view.getUint16(2 * (r * width + j), true));
        } else {
          const top = view.getFloat32(4 * r, true);
          for (let j = 0; j < width; j++) {
            code[j] = (k === 0 ? 0 : code[j]) + bytes[codes + r * width + j];
            const c = code[j];
            row[j] = c ? top * 2 ** ((c - 1) * (LOG8_OCTAVES / 254) - LOG8_OCTAVES) : 0;
          }
        }
        return row;
      });
    });
    return out;
  }
  // The computed rows of ``target`` under ``entry`` (one per computed layer), null when that target
  // was not computed, or "loading" while its chunk is decoded (render() runs again when it is).
  function rowsOf(entry, target) {
    const e = entry.embedded.indexOf(target);
    if (e >= 0) return entry.rows[e];
    const chunk = entry.lazy && entry.lazy.chunks.find((c) => c.targets.includes(target));
    if (!chunk) return null;
    if (decodedChunks.has(chunk.id)) return decodedChunks.get(chunk.id)[target];
    if (!loading.has(chunk.id)) {
      document.body.dataset.loading = "1";
      loading.set(chunk.id, inflate(chunk.id).then((bytes) => {
        decodedChunks.set(chunk.id, decodeChunk(bytes, entry.lazy.encoding, chunk.targets, entry.layers.length,
          data.sources.length));
        loading.delete(chunk.id);
        if (!loading.size) delete document.body.dataset.loading;
        render();
      }));
    }
    return "loading";
  }
  const $ = (id) => document.getElementById(id);
  const kind = data.kind;
  const isGen = kind === "generation";
  const isSeq = kind === "seq2seq"; // encoder-decoder: source tokens, the decoder's start token, targets
  const decoded = isGen || isSeq; // targets are tokens the model produced, shown in their own row
  const isImage = kind === "image";
  const textTargets = data.targets_are_sources; // text: clicking a source token makes it the target
  const L = data.n_layers;
  const m = data.input_length; // sources[0:m] are the input (a generation's prompt)
  const RGB = "29, 78, 216";
  const names = data.methods.map((e) => e.name);
  const state = {
    method: names.includes(data.method) ? data.method : names[0],
    layer: L - 1,
    target: data.target,
  };
  const shown = data.sources.slice(0, m); // the input sources that get coloured
  // Sources the decoder reads before the first target (the start token of a seq2seq result; none for a
  // generation): target k's own column is m + lead + k.
  // (A generation saved with its prompt columns only has fewer sources than that: no lead then.)
  const lead = decoded ? Math.max(0, data.sources.length - data.targets.length - m) : 0;

  const display = (t) => (t === "" ? "\u2205" : t.replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5"));
  const entryOf = (name) => data.methods.find((e) => e.name === name);

  function makeTokens(container, tokens, tokenKind) {
    return tokens.map((t, i) => {
      const span = document.createElement("span");
      span.className = "tok";
      span.textContent = display(t);
      span.dataset.index = String(i);
      span.dataset.kind = tokenKind;
      span.tabIndex = 0;
      container.appendChild(span);
      return span;
    });
  }

  // Rows of the current method and target: one per layer (null where the layer was not computed),
  // or null when the target was not computed at all.
  function currentRows() {
    const entry = entryOf(state.method);
    if (!entry.targets.includes(state.target)) return null;
    const rows = rowsOf(entry, state.target);
    if (rows === "loading" || rows === null) return rows;
    return Array.from({ length: L }, (_, l) => {
      const k = entry.layers.indexOf(l);
      return k < 0 ? null : rows[k];
    });
  }

  // A generated (target) token's scores on what the decoder read before it: the lead tokens, then
  // the earlier targets (sources after the input).
  function generatedScores(row) {
    if (!decoded || !row) return [];
    const out = [];
    for (let k = 0; k < lead + state.target && m + k < row.length; k++) out.push(row[m + k]);
    return out;
  }

  // Sink-aware scale (on by default): the target dominates its own row (e.g. [CLS] under rollout),
  // special tokens and an attention sink (a decoder's first token) take most of the mass whatever the
  // input says; leaving them out of the scale lets the other tokens' differences show. They are drawn
  // saturated; the values shown stay the true ones. Which token is a row's sink is decided in Python
  // (attnflow/views/scale.py) and shipped per method and target.
  const special = new Set(data.special || []);
  function sinkOf() {
    const entry = entryOf(state.method);
    const i = entry.targets.indexOf(state.target);
    return i < 0 || !entry.sinks ? { at: null, share: null } : { at: entry.sinks[i], share: entry.sink_shares[i] };
  }
  const targetSource = () => {
    const p = data.target_positions[state.target];
    return isImage || p === null || p === undefined ? -1 : p;
  };
  const skipped = (j) => !isImage && $("skip-target").checked
    && (j === targetSource() || special.has(j) || j === sinkOf().at);
  function legendText() {
    const base = "colour = score at the chosen layer, scaled to the row's maximum";
    if (isImage || !$("skip-target").checked) return base;
    const name = (j) => `“${display(data.sources[j])}”`;
    const parts = [];
    const t = targetSource();
    if (t >= 0) parts.push(`the target ${name(t)}`);
    const specials = [...special].filter((j) => j !== t && j < m);
    if (specials.length) parts.push(`special tokens ${specials.slice(0, 4).map(name).join(" ")}`);
    const s = sinkOf();
    if (s.at !== null && s.at !== undefined) {
      parts.push(`the dominant token ${name(s.at)} (holds ${Number(s.share).toFixed(2)} of the top layer's row)`);
    }
    return parts.length ? `${base} outside ${parts.join(", ")}: those are drawn saturated` : base;
  }
  // Scores below zero (an ablation that raises the logit: evidence against the prediction) are drawn
  // in red on the same scale of |score|, so they never look like no effect.
  const RGB_AGAINST = "185, 28, 28";
  const colour = (v, max) => (max > 0 ? Math.abs(v) / max : 0);
  const fill = (v, max) => `rgba(${v < 0 ? RGB_AGAINST : RGB}, ${Math.min(1, colour(v, max)).toFixed(3)})`;

  function paint(el, value, max, label) {
    if (value === undefined || value === null) {
      el.style.background = "";
      el.style.color = "";
      delete el.dataset.score;
      return;
    }
    const a = Math.min(1, colour(value, max));
    el.style.background = fill(value, max);
    el.style.color = a > 0.55 ? "#fff" : "";
    el.dataset.score = String(value);
    el.title = `${label}: ${value.toPrecision(4)}`;
  }

  function renderHeatmap(rows) {
    const canvas = $("heatmap");
    const ctx = canvas.getContext("2d");
    const n = shown.length;
    const labelW = 64;
    // Only the layers the method computed: a method without a layers axis (ablated flow) is one row.
    const entry = entryOf(state.method);
    const drawn = rows ? rows.map((r, l) => (r ? l : -1)).filter((l) => l >= 0) : [];
    const D = Math.max(1, drawn.length);
    const avail = Math.max(200, $("heatmap-wrap").clientWidth - 16 - labelW);
    const cw = Math.max(2, Math.min(28, Math.floor(avail / n))); // scrolls sideways past 2px cells
    const ch = D > 24 ? 10 : 16;
    const labels = cw >= 12; // token names under the columns only where they fit
    const labelH = labels ? 8 + 7 * Math.min(14, Math.max(...shown.map((t) => display(t).length))) : 0;
    canvas.width = labelW + cw * n;
    canvas.height = ch * D + 4 + labelH;
    canvas.dataset.cellWidth = String(cw);
    canvas.dataset.cellHeight = String(ch);
    canvas.dataset.rows = String(drawn.length);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    if (!rows) return;
    let max = 0;
    drawn.forEach((l) => { for (let j = 0; j < n; j++) if (Math.abs(rows[l][j]) > max && !skipped(j)) max = Math.abs(rows[l][j]); });
    ctx.font = `${Math.min(12, ch - 2)}px system-ui, sans-serif`;
    ctx.textBaseline = "middle";
    const label = (l) => (entry.axis === false ? "all layers" : `layer ${l + 1}`);
    drawn.forEach((l, k) => {
      const y = 2 + (D - 1 - k) * ch; // top layer at the top, as in the figures
      ctx.fillStyle = l === state.layer ? "#b45309" : "#656d76";
      ctx.fillText(label(l), 4, y + ch / 2);
      for (let j = 0; j < n; j++) {
        ctx.fillStyle = fill(rows[l][j], max);
        ctx.fillRect(labelW + j * cw, y, cw, ch);
      }
    });
    if (labels) {
      ctx.fillStyle = "#1f2328";
      ctx.textBaseline = "middle";
      for (let j = 0; j < n; j++) {
        ctx.save();
        ctx.translate(labelW + j * cw + cw / 2, ch * D + 8);
        ctx.rotate(Math.PI / 2);
        const t = display(shown[j]);
        ctx.fillText(t.length > 14 ? `${t.slice(0, 13)}…` : t, 0, 0);
        ctx.restore();
      }
    }
    const current = drawn.indexOf(state.layer);
    if (current >= 0) {
      ctx.strokeStyle = "#b45309";
      ctx.lineWidth = 2;
      ctx.strokeRect(labelW, 2 + (D - 1 - current) * ch, cw * n, ch);
    }
    const layerAt = (ev) => {
      const rect = canvas.getBoundingClientRect();
      const k = D - 1 - Math.floor((ev.clientY - rect.top - 2) / ch);
      return k >= 0 && k < drawn.length ? drawn[k] : -1;
    };
    canvas.onmousemove = (ev) => {
      const rect = canvas.getBoundingClientRect();
      const j = Math.floor((ev.clientX - rect.left - labelW) / cw);
      const l = layerAt(ev);
      const tip = $("tip");
      if (j < 0 || j >= n || l < 0) { tip.hidden = true; return; }
      tip.hidden = false;
      tip.textContent = `${label(l)} · ${display(shown[j])} (${j}): ${rows[l][j].toPrecision(4)}`;
      tip.style.left = `${ev.clientX + 12}px`;
      tip.style.top = `${ev.clientY + 12}px`;
    };
    canvas.onmouseleave = () => { $("tip").hidden = true; };
    canvas.onclick = (ev) => {
      const l = layerAt(ev);
      if (l >= 0) { state.layer = l; render(); }
    };
  }

  function render() {
    const fetched = currentRows();
    const pending = fetched === "loading";
    const rows = pending ? null : fetched;
    // a method without a layers axis has one row, whatever layer the slider is on
    const single = entryOf(state.method).axis === false && rows ? rows.find((r) => r) : null;
    const row = rows ? rows[state.layer] || single || null : null;
    const earlier = generatedScores(row);
    let max = 0;
    Array.from(row ? row.slice(0, m) : []).concat(earlier).forEach((v, j) => {
      if (Math.abs(v) > max && !skipped(j)) max = Math.abs(v);
    });
    sourceEls.forEach((el, i) => {
      paint(el, row ? row[i] : undefined, max, isImage ? data.sources[i] : `position ${i}`);
      el.classList.toggle("missing", !row);
      el.classList.toggle("target", textTargets && i === data.target_positions[state.target]);
    });
    leadEls.forEach((span, k) => paint(span, earlier[k], max, "decoder start"));
    targetEls.forEach((span, k) => {
      paint(span, lead + k < earlier.length ? earlier[lead + k] : undefined, max, `${isSeq ? "target" : "generated"} token ${k}`);
      span.classList.toggle("selected", k === state.target);
    });
    document.querySelectorAll("#methods button").forEach((b) => {
      b.setAttribute("aria-checked", String(b.dataset.method === state.method));
    });
    $("layer").value = String(state.layer + 1);
    $("layer-value").textContent = String(state.layer + 1);
    $("legend-max").textContent = max > 0 ? max.toPrecision(3) : "0";
    $("legend-text").textContent = legendText();
    const label = display(data.targets[state.target]);
    let sourceShare = "";
    if (isSeq && row) {
      let sum = 0;
      for (let j = 0; j < m; j++) sum += row[j];
      sourceShare = ` · source share ${sum.toFixed(2)}`;
    }
    const who = isSeq ? `target token ${state.target} “${label}”${sourceShare}`
      : isGen ? `generated token ${state.target} “${label}”`
      : isImage ? `target: ${label}` : `target: position ${data.target_positions[state.target]} “${label}”`;
    $("target-label").textContent = who;
    const entry = entryOf(state.method);
    let note = entry.note || "";
    const reduced = rows && entry.lazy && entry.lazy.encoding === "log8" && !entry.embedded.includes(state.target);
    const what = isGen ? "generated token" : isSeq ? "target token" : "position";
    if (pending) {
      note = `loading the ${state.method} scores of ${what} ${state.target}\u2026`;
    } else if (!rows) {
      note = `${state.method} has no scores for ${what} ${state.target}: `
        + `${entry.note}. Pick a highlighted target or another method.`;
    } else if (!row) {
      note = `${state.method} was not computed at layer ${state.layer + 1}; pick another layer.`;
    } else if (reduced) {
      note = `${note ? note + ". " : ""}This long input's scores for targets other than the one the report `
        + "opened on are stored to within 3% (8 bits on a log scale) to keep the file small; "
        + "the saved result (result.save) has them exactly.";
    }
    $("note").hidden = !note;
    $("note").textContent = note;
    const rho = row ? positionRho(row) : NaN;
    const noted = Number.isFinite(rho) && Math.abs(rho) >= POSITION_NOTE;
    $("position-note").hidden = !noted;
    $("position-note").textContent = noted ? `${state.method}, layer ${state.layer + 1}: ${POSITION_TEXT} `
      + `(Spearman ${rho >= 0 ? "+" : "\u2212"}${Math.abs(rho).toFixed(2)} with token position)` : "";
    document.body.dataset.positionRho = Number.isFinite(rho) ? rho.toFixed(6) : "";
    document.body.dataset.method = state.method;
    document.body.dataset.layer = String(state.layer);
    document.body.dataset.target = String(state.target);
    if (!isImage) renderHeatmap(rows);
    markFaithfulness();
  }

  // The position note (attnflow/views/position.py): the row's ranking of the input sources the target
  // can see (less the target and special tokens) against their position; |Spearman| >= 0.9 gets a note.
  const POSITION_NOTE = 0.9;
  const POSITION_TEXT = "this ranking mostly reflects position";
  function ranks(values) { // average ranks for ties, as scipy's rankdata
    const order = values.map((v, i) => i).sort((a, b) => values[a] - values[b]);
    const out = new Array(values.length);
    for (let i = 0; i < order.length;) {
      let j = i;
      while (j + 1 < order.length && values[order[j + 1]] === values[order[i]]) j++;
      for (let k = i; k <= j; k++) out[order[k]] = (i + j) / 2 + 1;
      i = j + 1;
    }
    return out;
  }
  function spearman(x, y) {
    const rx = ranks(x), ry = ranks(y), n = x.length, c = (n + 1) / 2;
    let sxy = 0, sxx = 0, syy = 0;
    for (let i = 0; i < n; i++) { sxy += (rx[i] - c) * (ry[i] - c); sxx += (rx[i] - c) ** 2; syy += (ry[i] - c) ** 2; }
    return sxx > 0 && syy > 0 ? sxy / Math.sqrt(sxx * syy) : NaN;
  }
  function positionRho(row) {
    if (isImage || isSeq) return NaN;
    const me = data.target_positions[state.target];
    const visible = me !== null && me !== undefined && (isGen || data.causal) ? Math.min(m, me + 1) : m;
    const keep = [];
    for (let j = 0; j < visible; j++) if (j !== me && !special.has(j)) keep.push(j);
    if (keep.length < 3 || keep.some((j) => !Number.isFinite(row[j]))) return NaN;
    return spearman(keep.map((j) => row[j]), keep);
  }

  // The faithfulness table (attnflow faithfulness): per layer (top first), each method's Spearman
  // with leave-one-out, AOPC comprehensiveness and sufficiency; the chosen method and layer are marked.
  function renderFaithfulness() {
    const f = data.faithfulness;
    if (!f) return;
    $("faith-block").hidden = false;
    const levels = f.fractions.map((x) => Math.round(100 * x)).join("/");
    const what = f.meta && f.meta.head === "decoder" ? "next token" : "class";
    $("faith-text").textContent = `Against the model's own prediction (the ${what} “${display(f.label)}”, `
      + `p = ${Number(f.probability).toFixed(2)}): rho = Spearman correlation with the leave-one-out drop of its `
      + `logit (higher is better); compr. / suff. = AOPC comprehensiveness (higher is better) and sufficiency `
      + `(lower is better) when the top ${levels} % of the tokens are deleted / kept.`;
    const table = $("faith");
    const methods = Object.keys(f.methods);
    const head = table.createTHead().insertRow();
    ["layer"].concat(...methods.map((name) => [`${name} rho`, `${name} compr.`, `${name} suff.`])).forEach((h) => {
      const th = document.createElement("th");
      th.textContent = h;
      head.appendChild(th);
    });
    const body = table.createTBody();
    const layers = f.methods[methods[0]].spearman.length;
    const cell = (v) => (v === null || v === undefined ? "–" : (v >= 0 ? "+" : "") + v.toFixed(2));
    for (let l = layers - 1; l >= 0; l--) {
      const tr = body.insertRow();
      tr.dataset.layer = String(l);
      tr.insertCell().textContent = String(l + 1);
      methods.forEach((name) => {
        ["spearman", "comprehensiveness", "sufficiency"].forEach((key) => {
          const td = tr.insertCell();
          td.textContent = cell(f.methods[name][key][l]);
          td.dataset.method = name;
        });
      });
    }
    renderFaithfulnessSummary(f);
  }
  // At the top layer, against position: rho with its bootstrap interval, the partial rho given position,
  // rho with position (and the note), the two position priors, and the method that agrees best here.
  function renderFaithfulnessSummary(f) {
    if (!f.priors) return;
    const cell = (v) => (v === null || v === undefined ? "\u2013" : (v >= 0 ? "+" : "") + v.toFixed(2));
    const table = $("faith-summary");
    const head = table.createTHead().insertRow();
    ["method", "rho", "95 % interval", "partial rho | position", "rho with position", "note"].forEach((h) => {
      const th = document.createElement("th");
      th.textContent = h;
      head.appendChild(th);
    });
    const body = table.createTBody();
    const best = f.best ? f.best.method : null;
    const add = (name, rho, interval, partial, where, note, prior) => {
      const tr = body.insertRow();
      tr.dataset.method = name;
      if (prior) tr.classList.add("prior");
      if (name === best) tr.classList.add("best");
      const iv = interval && interval[0] !== null && interval[1] !== null ? `[${cell(interval[0])}, ${cell(interval[1])}]` : "";
      [name, cell(rho), iv, cell(partial), cell(where), note].forEach((v) => { tr.insertCell().textContent = v; });
    };
    Object.entries(f.methods).forEach(([name, v]) => {
      const top = (a) => (a && a.length ? a[a.length - 1] : null);
      const where = top(v.position);
      add(name, top(v.spearman), v.interval, top(v.partial), where,
        where !== null && Math.abs(where) >= POSITION_NOTE ? POSITION_TEXT : "", false);
    });
    Object.entries(f.priors).forEach(([name, v], k) => add(name, v.spearman, v.interval, null, k === 0 ? 1 : -1,
      "a position prior, for scale", true));
    if (best) {
      const prior = Object.keys(f.priors).includes(best);
      $("faith-best").textContent = `Agrees best with leave-one-out on this input: ${best} (rho ${cell(f.best.spearman)})`
        + (prior ? ": no method ranks the tokens better than their position does." : ".");
    }
  }
  function markFaithfulness() {
    if (!data.faithfulness) return;
    document.querySelectorAll("#faith tbody tr").forEach((tr) => {
      tr.classList.toggle("current", Number(tr.dataset.layer) === state.layer);
    });
    document.querySelectorAll("#faith td[data-method]").forEach((td) => {
      td.classList.toggle("current", td.dataset.method === state.method);
    });
  }

  // Static parts.
  $("title").textContent = data.title;
  const meta = [];
  if (data.model) meta.push(`model: ${data.model}`);
  if (data.prediction !== undefined && data.prediction !== null) meta.push(`prediction: ${data.prediction}`);
  meta.push(isImage ? `${data.grid[0]}×${data.grid[1]} patches`
    : `${m} ${isGen ? "prompt " : isSeq ? "source " : ""}tokens`);
  meta.push(`${L} ${isSeq ? "decoder " : ""}layers`);
  const settings = Object.entries(data.params || {}).filter(([, v]) => v !== null && v !== false)
    .map(([k, v]) => `${k}: ${v}`);
  if (settings.length) meta.push(settings.join(", "));
  $("meta").textContent = meta.join(" · ");
  const oneTarget = textTargets && data.methods.every((e) => e.targets.length === 1);
  $("tokens-heading").textContent = isGen ? "prompt (coloured by what the chosen generated token draws on)"
    : isSeq ? "source (coloured by what the chosen target token draws on)"
    : oneTarget ? "input tokens (this result holds one target; make the report with attnflow.explain_maps or "
      + "`attnflow explain --html` to click any token as the target)"
      : "input tokens (click one to make it the target)";
  names.forEach((name) => {
    const b = document.createElement("button");
    b.type = "button";
    b.setAttribute("role", "radio");
    b.dataset.method = name;
    b.textContent = name;
    const entry = entryOf(name);
    if (entry.note) { b.classList.add("partial"); b.title = entry.note; }
    b.disabled = names.length === 1;
    b.addEventListener("click", () => { state.method = name; render(); });
    $("methods").appendChild(b);
  });
  if (isImage) $("skip-wrap").hidden = true;
  renderFaithfulness();
  $("skip-target").addEventListener("change", () => render());
  const slider = $("layer");
  slider.max = String(L);
  $("layer-count").textContent = ` / ${L}`;
  slider.addEventListener("input", () => { state.layer = Number(slider.value) - 1; render(); });

  let sourceEls = [];
  let leadEls = [];
  let targetEls = [];
  if (isImage) {
    // The patches as a grid of cells laid over the image (the page's own data: URI, allowed by the CSP).
    $("tokens-block").hidden = true;
    $("heatmap-block").hidden = true;
    $("image-block").hidden = false;
    const grid = $("patches");
    grid.style.gridTemplateColumns = `repeat(${data.grid[1]}, 1fr)`;
    grid.style.gridTemplateRows = `repeat(${data.grid[0]}, 1fr)`;
    // Only the embedded PNG: anything else would be a fetch (which the page's policy refuses anyway).
    if (/^data:image\/png;base64,[A-Za-z0-9+/=]+$/.test(data.image)) $("image").setAttribute("src", data.image);
    sourceEls = data.sources.map((label, i) => {
      const cell = document.createElement("div");
      cell.className = "patch";
      cell.dataset.index = String(i);
      cell.dataset.kind = "patch";
      grid.appendChild(cell);
      return cell;
    });
  } else {
    sourceEls = makeTokens($("tokens"), shown, "input");
  }
  if (decoded) {
    $("generated-block").hidden = false;
    if (isSeq) $("generated-heading").textContent = "target tokens (click one to see what it draws on; the "
      + "first token is the decoder's start token, read but never predicted)";
    leadEls = makeTokens($("generated"), data.sources.slice(m, m + lead), "start");
    leadEls.forEach((span) => { span.classList.add("lead"); span.tabIndex = -1; });
    targetEls = makeTokens($("generated"), data.targets, "generated");
  }
  const choose = (ev) => {
    const span = ev.target.closest(".tok");
    if (!span) return;
    if (decoded && span.dataset.kind !== "generated") return; // prompt/source tokens are never targets here
    state.target = Number(span.dataset.index);
    render();
  };
  const byKey = (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); choose(ev); } };
  if (!isImage) {
    const clickable = decoded ? $("generated") : $("tokens");
    clickable.addEventListener("click", choose);
    clickable.addEventListener("keydown", byKey);
  }
  window.addEventListener("resize", () => render());
  render();
  // Time from navigation start to the first full render: a usability bound the tests check.
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = "1";
})();
