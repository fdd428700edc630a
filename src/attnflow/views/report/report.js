"use strict";
// The attnflow report: reads the embedded JSON and draws tokens, legend and heatmap.
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
  if (data.kind === "generation") {
    data.M = unpack(data.M);
    data.rows = data.rows.map(unpack);
  } else {
    data.methods.forEach((m) => { m.rows = unpack(m.rows); });
  }
  const $ = (id) => document.getElementById(id);
  const isGen = data.kind === "generation";
  const L = data.n_layers;
  const RGB = "29, 78, 216";
  const names = isGen ? [data.method] : data.methods.map((m) => m.name);
  const state = {
    method: names.includes("rollout") ? "rollout" : names[0],
    layer: L - 1,
    target: isGen ? 0 : data.target,
  };
  const shown = isGen ? data.prompt_tokens : data.tokens; // the tokens that get coloured

  const display = (t) => (t === "" ? "\u2205" : t.replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5"));

  function makeTokens(container, tokens, kind) {
    return tokens.map((t, i) => {
      const span = document.createElement("span");
      span.className = "tok";
      span.textContent = display(t);
      span.dataset.index = String(i);
      span.dataset.kind = kind;
      span.tabIndex = 0;
      container.appendChild(span);
      return span;
    });
  }

  // rows for the current method and target: layers x shown tokens, or null when not computed.
  function currentRows() {
    if (isGen) {
      const m = data.M[state.target]; // prompt token x layer
      return Array.from({ length: L }, (_, l) => m.map((perLayer) => perLayer[l]));
    }
    const entry = data.methods.find((m) => m.name === state.method);
    const k = entry.targets.indexOf(state.target);
    return k < 0 ? null : entry.rows[k];
  }

  // Scores of earlier generated tokens for the chosen generated token (from "rows", when given).
  function generatedScores() {
    if (!isGen || !data.rows.length) return [];
    const row = data.rows[state.target][state.layer];
    const out = [];
    for (let k = 0; k < state.target && data.prompt_tokens.length + k < row.length; k++) {
      out.push(row[data.prompt_tokens.length + k]);
    }
    return out;
  }

  // The target often dominates its own row (e.g. [CLS] under rollout); leaving it out of the
  // scale lets the other tokens' differences show. Values shown stay the true ones.
  const skipped = (j) => !isGen && $("skip-target").checked && j === state.target;
  const colour = (v, max) => (max > 0 ? Math.max(0, v) / max : 0);

  function paint(span, value, max) {
    if (value === undefined) {
      span.style.background = "";
      span.style.color = "";
      delete span.dataset.score;
      return;
    }
    const a = Math.min(1, colour(value, max));
    span.style.background = `rgba(${RGB}, ${a.toFixed(3)})`;
    span.style.color = a > 0.55 ? "#fff" : "";
    span.dataset.score = String(value);
    span.title = `position ${span.dataset.index}: ${value.toPrecision(4)}`;
  }

  function renderHeatmap(rows) {
    const canvas = $("heatmap");
    const ctx = canvas.getContext("2d");
    const n = shown.length;
    const labelW = 64;
    const avail = Math.max(200, $("heatmap-wrap").clientWidth - 16 - labelW);
    const cw = Math.max(2, Math.min(28, Math.floor(avail / n))); // scrolls sideways past 2px cells
    const ch = L > 24 ? 10 : 16;
    const labels = cw >= 12; // token names under the columns only where they fit
    const labelH = labels ? 8 + 7 * Math.min(14, Math.max(...shown.map((t) => display(t).length))) : 0;
    canvas.width = labelW + cw * n;
    canvas.height = ch * L + 4 + labelH;
    canvas.dataset.cellWidth = String(cw);
    canvas.dataset.cellHeight = String(ch);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    if (!rows) return;
    let max = 0;
    rows.forEach((r) => r.forEach((v, j) => { if (v > max && !skipped(j)) max = v; }));
    ctx.font = `${Math.min(12, ch - 2)}px system-ui, sans-serif`;
    ctx.textBaseline = "middle";
    for (let l = 0; l < L; l++) {
      const y = 2 + (L - 1 - l) * ch; // top layer at the top, as in the figures
      ctx.fillStyle = l === state.layer ? "#b45309" : "#656d76";
      ctx.fillText(`layer ${l + 1}`, 4, y + ch / 2);
      for (let j = 0; j < n; j++) {
        ctx.fillStyle = `rgba(${RGB}, ${Math.min(1, colour(rows[l][j], max)).toFixed(3)})`;
        ctx.fillRect(labelW + j * cw, y, cw, ch);
      }
    }
    if (labels) {
      ctx.fillStyle = "#1f2328";
      ctx.textBaseline = "middle";
      for (let j = 0; j < n; j++) {
        ctx.save();
        ctx.translate(labelW + j * cw + cw / 2, ch * L + 8);
        ctx.rotate(Math.PI / 2);
        const t = display(shown[j]);
        ctx.fillText(t.length > 14 ? `${t.slice(0, 13)}…` : t, 0, 0);
        ctx.restore();
      }
    }
    ctx.strokeStyle = "#b45309";
    ctx.lineWidth = 2;
    ctx.strokeRect(labelW, 2 + (L - 1 - state.layer) * ch, cw * n, ch);
    canvas.onmousemove = (ev) => {
      const rect = canvas.getBoundingClientRect();
      const j = Math.floor((ev.clientX - rect.left - labelW) / cw);
      const l = L - 1 - Math.floor((ev.clientY - rect.top - 2) / ch);
      const tip = $("tip");
      if (j < 0 || j >= n || l < 0 || l >= L) { tip.hidden = true; return; }
      tip.hidden = false;
      tip.textContent = `layer ${l + 1} · ${display(shown[j])} (${j}): ${rows[l][j].toPrecision(4)}`;
      tip.style.left = `${ev.clientX + 12}px`;
      tip.style.top = `${ev.clientY + 12}px`;
    };
    canvas.onmouseleave = () => { $("tip").hidden = true; };
    canvas.onclick = (ev) => {
      const rect = canvas.getBoundingClientRect();
      const l = L - 1 - Math.floor((ev.clientY - rect.top - 2) / ch);
      if (l >= 0 && l < L) { state.layer = l; render(); }
    };
  }

  function render() {
    const rows = currentRows();
    const row = rows ? rows[state.layer] : null;
    const earlier = generatedScores();
    let max = 0;
    Array.from(row || []).concat(earlier).forEach((v, j) => { if (v > max && !skipped(j)) max = v; });
    tokenSpans.forEach((span, i) => {
      paint(span, row ? row[i] : undefined, max);
      span.classList.toggle("missing", !row);
      span.classList.toggle("target", !isGen && i === state.target);
    });
    genSpans.forEach((span, k) => {
      paint(span, k < earlier.length ? earlier[k] : undefined, max);
      span.classList.toggle("selected", k === state.target);
    });
    document.querySelectorAll("#methods button").forEach((b) => {
      b.setAttribute("aria-checked", String(b.dataset.method === state.method));
    });
    $("layer").value = String(state.layer + 1);
    $("layer-value").textContent = String(state.layer + 1);
    $("legend-max").textContent = max > 0 ? max.toPrecision(3) : "0";
    const who = isGen ? `generated token ${state.target} “${display(data.generated_tokens[state.target])}”`
      : `target: position ${state.target} “${display(data.tokens[state.target])}”`;
    $("target-label").textContent = who;
    const entry = isGen ? null : data.methods.find((m) => m.name === state.method);
    const note = !isGen && !rows
      ? `${state.method} has no scores for position ${state.target}: ${entry.note}. Pick a highlighted target or another method.`
      : (entry && entry.note) || "";
    $("note").hidden = !note;
    $("note").textContent = note;
    document.body.dataset.method = state.method;
    document.body.dataset.layer = String(state.layer);
    document.body.dataset.target = String(state.target);
    renderHeatmap(rows);
  }

  // Static parts.
  $("title").textContent = data.title;
  const meta = [];
  if (data.model) meta.push(`model: ${data.model}`);
  if (data.prediction !== undefined && data.prediction !== null) meta.push(`prediction: ${data.prediction}`);
  meta.push(isGen ? `method: ${data.method}` : `${data.tokens.length} tokens`);
  meta.push(`${L} layers`);
  $("meta").textContent = meta.join(" · ");
  $("legend-text").textContent = "colour = score at the chosen layer, scaled to the row's maximum";
  const oneTarget = !isGen && data.methods.every((m) => m.targets.length === 1);
  $("tokens-heading").textContent = isGen ? "prompt (coloured by what the chosen generated token draws on)"
    : oneTarget ? "input tokens (this result holds one target; make the report with attnflow.explain_maps or "
      + "`attnflow explain --html` to click any token as the target)"
      : "input tokens (click one to make it the target)";
  names.forEach((name) => {
    const b = document.createElement("button");
    b.type = "button";
    b.setAttribute("role", "radio");
    b.dataset.method = name;
    b.textContent = name;
    const entry = isGen ? null : data.methods.find((m) => m.name === name);
    if (entry && entry.note) { b.classList.add("partial"); b.title = entry.note; }
    b.disabled = isGen;
    b.addEventListener("click", () => { state.method = name; render(); });
    $("methods").appendChild(b);
  });
  if (isGen) $("skip-wrap").hidden = true;
  $("skip-target").addEventListener("change", () => render());
  const slider = $("layer");
  slider.max = String(L);
  $("layer-count").textContent = ` / ${L}`;
  slider.addEventListener("input", () => { state.layer = Number(slider.value) - 1; render(); });

  const tokenSpans = makeTokens($("tokens"), shown, "input");
  let genSpans = [];
  if (isGen) {
    $("generated-block").hidden = false;
    genSpans = makeTokens($("generated"), data.generated_tokens, "generated");
  }
  const choose = (ev) => {
    const span = ev.target.closest(".tok");
    if (!span) return;
    if (isGen && span.dataset.kind !== "generated") return; // prompt tokens are never targets here
    state.target = Number(span.dataset.index);
    render();
  };
  const byKey = (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); choose(ev); } };
  const clickable = isGen ? $("generated") : $("tokens");
  clickable.addEventListener("click", choose);
  clickable.addEventListener("keydown", byKey);
  window.addEventListener("resize", () => render());
  render();
  // Time from navigation start to the first full render: a usability bound the tests check.
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = "1";
})();
