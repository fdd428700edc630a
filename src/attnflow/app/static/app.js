"use strict";
// The attnflow explorer page: controls, a job's streamed tokens and progress, the top prompt tokens
// of a generated token, and the result's own HTML report (the views' page) in a same-origin frame.
// Every text from the server or the user is set with textContent, never as markup; the server's
// Content-Security-Policy lets this page run this file only and talk to its own origin only.
(function () {
  const $ = (id) => document.getElementById(id);
  const PATH = "__path__"; // the model list's "type a folder" entry
  let options = null;
  let models = [];
  let job = null; // {id, kind, source, result, preview, selected}

  const display = (t) => (t === "" ? "\u2205" : t.replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5"));

  function say(text, kind) {
    $("message").textContent = text || "";
    $("message").hidden = !text;
    $("message").dataset.kind = kind || "error";
  }

  async function api(path, init) {
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new Error("cannot reach the attnflow server (is it still running?)");
    }
    let body = null;
    try { body = await response.json(); } catch (err) { body = null; }
    if (!response.ok) throw new Error(body && body.error ? body.error : `the server answered ${response.status}`);
    return body;
  }
  const post = (path, body) => api(path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}),
  });

  function option(select, value, label) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = label;
    select.appendChild(o);
    return o;
  }

  // ------------------------------------------------------------------------------ the controls

  function entry() { return models.find((m) => m.key === $("model").value) || null; }

  function fillModels(chosen) {
    const select = $("model");
    select.replaceChildren();
    models.forEach((m) => option(select, m.key, m.label));
    if (options.allow_paths) option(select, PATH, "a local folder\u2026");
    if (chosen) select.value = chosen;
    showKind();
  }

  function showKind() {
    const e = entry();
    const kind = e ? e.kind : null;
    $("path-row").hidden = $("model").value !== PATH;
    $("model-about").textContent = e ? e.about : "";
    document.querySelectorAll(".kind").forEach((el) => {
      el.hidden = !kind || !el.dataset.kind.split(" ").includes(kind);
    });
    $("run").textContent = kind === "decoder" ? "Generate" : "Explain";
    $("run").disabled = !kind || document.body.dataset.state === "running";
    const box = $("methods");
    box.replaceChildren();
    if (kind && options.methods[kind]) {
      options.methods[kind].forEach((name) => {
        const label = document.createElement("label");
        label.className = "check";
        const input = document.createElement("input");
        input.type = "checkbox";
        input.value = name;
        input.dataset.method = name;
        const usable = !options.classifier_methods.includes(name) || e.classifier;
        input.disabled = !usable;
        input.checked = usable && (!options.checked || options.checked[kind].includes(name));
        if (!usable) label.title = `${name} explains a classifier's predicted class; this model is not a classifier`;
        label.append(input, document.createTextNode(` ${name}`));
        box.appendChild(label);
      });
    }
  }

  async function addFolder() {
    say("");
    try {
      const body = await post("api/models", { path: $("model-path").value });
      models = body.models;
      fillModels(body.model.key);
    } catch (err) {
      say(err.message);
    }
  }

  function readImage() {
    const file = $("image").files[0];
    if (!file) return Promise.resolve({ image: null });
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve({ image: reader.result, name: file.name });
      reader.onerror = () => reject(new Error("the image file could not be read"));
      reader.readAsDataURL(file);
    });
  }

  async function request(e) {
    const body = {
      model: e.key, weighting: $("weighting").value, head_fusion: $("head-fusion").value,
      residual: Number($("residual").value),
    };
    if (e.kind === "decoder") {
      Object.assign(body, {
        prompt: $("prompt").value, max_new_tokens: Number($("new-tokens").value), sample: $("sample").checked,
        temperature: Number($("temperature").value), top_k: Number($("top-k").value),
        top_p: Number($("top-p").value), seed: Number($("seed").value), causal_norm: $("causal-norm").value,
      });
    } else {
      body.methods = Array.from($("methods").querySelectorAll("input:checked")).map((i) => i.value);
      if (e.kind === "text") Object.assign(body, { text: $("text").value, flow_all: $("flow-all").checked });
      else Object.assign(body, await readImage());
    }
    return body;
  }

  async function run(ev) {
    ev.preventDefault();
    const e = entry();
    if (!e || document.body.dataset.state === "running") return;
    say("");
    try {
      const body = await request(e);
      const started = await post("api/jobs", body);
      follow(started.id, e.kind, e.kind === "decoder" ? body.prompt : null);
    } catch (err) {
      say(err.message);
    }
  }

  // ----------------------------------------------------------------------------- following a job

  function setState(state) {
    document.body.dataset.state = state;
    $("run").disabled = state === "running" || !entry();
    $("busy").hidden = state !== "running";
  }

  function clearResult() {
    $("report").hidden = true;
    $("report").removeAttribute("src");
    delete document.body.dataset.report;
    $("downloads").hidden = true;
    $("bars-block").hidden = true;
    $("bars").replaceChildren();
    $("live-block").hidden = true;
    $("live").querySelectorAll(".tok").forEach((t) => t.remove());
    $("progress").removeAttribute("value");
    $("progress-text").textContent = "";
  }

  function follow(id, kind, prompt) {
    if (job && job.source) job.source.close();
    clearResult();
    job = { id, kind, source: null, result: null, preview: null, selected: null };
    document.body.dataset.job = id;
    setState("running");
    $("status").textContent = "starting";
    if (kind === "decoder") {
      $("live-block").hidden = false;
      $("live-prompt").textContent = prompt;
    }
    const mine = job;
    const source = new EventSource(`api/jobs/${encodeURIComponent(id)}/events`);
    job.source = source;
    const on = (name, handler) => source.addEventListener(name, (ev) => {
      if (job === mine) handler(JSON.parse(ev.data));
    });
    on("status", (d) => { $("status").textContent = d.status; });
    on("token", (d) => addToken(d.index, d.token));
    on("progress", showProgress);
    on("preview", (d) => { if (!mine.preview) showPreview(mine, d); }); // once, also after a reconnect
    on("done", (d) => { source.close(); finish(mine, d); });
    on("failed", (d) => { source.close(); setState("error"); say(d.error); });
    on("cancelled", () => {
      source.close();
      setState("cancelled");
      say(mine.preview ? "cancelled: the report shows flow for the explained target only" : "cancelled", "info");
    });
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED && document.body.dataset.state === "running") {
        setState("error");
        say("lost the connection to the attnflow server");
      }
    };
  }

  function addToken(index, token) {
    if ($("live").querySelector(`.tok[data-index='${index}']`)) return; // resent after a reconnect
    const span = document.createElement("span");
    span.className = "tok";
    span.dataset.kind = "generated";
    span.dataset.index = String(index);
    span.dataset.token = token;
    span.textContent = display(token);
    span.title = `generated token ${index}`;
    $("live").appendChild(span);
  }

  function showProgress(p) {
    const bar = $("progress");
    bar.max = Math.max(1, p.total);
    bar.value = p.done;
    const eta = p.eta_s === null || p.eta_s === undefined ? "" : ` \u00b7 about ${Math.ceil(p.eta_s)} s left`;
    $("progress-text").textContent = `${p.what}: ${p.done} / ${p.total} ${p.unit}${eta}`;
  }

  async function cancel() {
    if (!job) return;
    $("status").textContent = "cancelling";
    try { await post(`api/jobs/${encodeURIComponent(job.id)}/cancel`); } catch (err) { say(err.message); }
  }

  // A first look while flow for the other targets runs: the report with flow for the explained
  // target alone (the server sends it once it has stood a second without the whole result).
  function showPreview(mine, summary) {
    mine.preview = summary;
    showReport(mine, "?preview=1", "preview");
  }

  function showReport(mine, query, kind) {
    const base = `api/jobs/${encodeURIComponent(mine.id)}`;
    const sep = query ? "&" : "?";
    $("download-json").href = `${base}/result.json${query}${sep}download=1`;
    $("download-html").href = `${base}/report.html${query}${sep}download=1`;
    $("downloads").hidden = false;
    const carried = shownView(); // what the reader chose in the first look, carried into the whole report
    delete document.body.dataset.report;
    const frame = $("report");
    frame.hidden = false;
    frame.onload = () => watchReport(mine, kind, carried);
    frame.src = `${base}/report.html${query}`;
  }

  function shownView() {
    const doc = $("report").hidden ? null : $("report").contentDocument;
    if (!doc || !doc.body || doc.body.dataset.ready !== "1") return null;
    const d = doc.body.dataset;
    return { target: d.target, method: d.method, layer: d.layer };
  }

  function restoreView(doc, view) {
    const button = doc.querySelector(`#methods button[data-method='${CSS.escape(view.method)}']`);
    if (button && !button.disabled && doc.body.dataset.method !== view.method) button.click();
    const tok = doc.querySelector(`.tok[data-kind='input'][data-index='${CSS.escape(view.target)}']`);
    if (tok && doc.body.dataset.target !== view.target) tok.click();
    const slider = doc.getElementById("layer");
    if (slider && doc.body.dataset.layer !== view.layer) {
      slider.value = String(Number(view.layer) + 1);
      slider.dispatchEvent(new Event("input"));
    }
  }

  function finish(mine, summary) {
    mine.result = summary;
    setState("done");
    showReport(mine, "", "ready");
    if (mine.kind === "decoder") {
      $("live").querySelectorAll(".tok").forEach((t) => { t.tabIndex = 0; t.classList.add("clickable"); });
      if (summary.targets.length) select(0, true);
    }
  }

  // The report is the views' own page in a same-origin frame: follow its chosen target (a click on
  // a generated token there updates the bars here) and size the frame to its content.
  function watchReport(mine, kind, carried) {
    const doc = $("report").contentDocument;
    if (!doc || !doc.body || job !== mine) return;
    if (carried && mine.kind === "text" && doc.body.dataset.ready === "1") restoreView(doc, carried);
    const fit = () => { $("report").style.height = `${doc.documentElement.scrollHeight + 4}px`; };
    new ResizeObserver(fit).observe(doc.body);
    fit();
    if (mine.kind === "decoder") {
      new MutationObserver(() => {
        const t = Number(doc.body.dataset.target);
        if (job === mine && t !== mine.selected) select(t, false);
      }).observe(doc.body, { attributes: true, attributeFilter: ["data-target"] });
      syncReport(mine);
    }
    if (doc.body.dataset.ready === "1") document.body.dataset.report = kind;
  }

  function syncReport(mine) {
    const doc = $("report").contentDocument;
    if (!doc || !doc.body || doc.body.dataset.ready !== "1" || mine.selected === null) return;
    if (Number(doc.body.dataset.target) === mine.selected) return;
    const tok = doc.querySelector(`.tok[data-kind='generated'][data-index='${mine.selected}']`);
    if (tok) tok.click();
  }

  // ------------------------------------------------------------------- a generated token's bars

  function filters() {
    return Array.from($("filters").querySelectorAll("input:checked")).map((i) => i.value);
  }

  async function select(index, syncFrame) {
    const mine = job;
    if (!mine || !mine.result) return;
    mine.selected = index;
    $("live").querySelectorAll(".tok").forEach((t) => t.classList.toggle("selected", Number(t.dataset.index) === index));
    if (syncFrame) syncReport(mine);
    const query = new URLSearchParams({ target: String(index), k: $("top-k-shown").value, filters: filters().join(",") });
    const ticket = (mine.ticket = (mine.ticket || 0) + 1); // only the latest request's answer is shown
    try {
      const data = await api(`api/jobs/${encodeURIComponent(mine.id)}/top?${query}`);
      if (job === mine && mine.ticket === ticket) renderBars(data);
    } catch (err) {
      say(err.message);
    }
  }

  function renderBars(data) {
    $("bars-block").hidden = false;
    $("bars-target").textContent = `generated token ${data.target} \u201c${display(data.token)}\u201d`;
    const list = $("bars");
    list.replaceChildren();
    const max = Math.max(0, ...data.top.map((t) => t[2]));
    data.top.forEach(([position, token, score]) => {
      const li = document.createElement("li");
      li.className = "bar";
      li.dataset.position = String(position);
      li.dataset.token = token;
      li.dataset.score = String(score);
      const label = document.createElement("span");
      label.className = "bar-label";
      label.textContent = display(token);
      label.title = `prompt position ${position}`;
      const track = document.createElement("span");
      track.className = "bar-track";
      const fill = document.createElement("span");
      fill.className = "bar-fill";
      fill.style.width = `${max > 0 ? (100 * Math.max(0, score)) / max : 0}%`;
      track.appendChild(fill);
      const value = document.createElement("span");
      value.className = "bar-value";
      value.textContent = score.toPrecision(4);
      li.append(label, track, value);
      list.appendChild(li);
    });
    document.body.dataset.barsFilters = data.filters.join(",");
    document.body.dataset.bars = String(data.target);
  }

  function chooseLive(ev) {
    const tok = ev.target.closest(".tok");
    if (!tok || !job || !job.result || job.kind !== "decoder") return;
    select(Number(tok.dataset.index), true);
  }

  // ------------------------------------------------------------------------------------ start

  async function init() {
    try {
      const [opts, list] = await Promise.all([api("api/options"), api("api/models")]);
      options = { ...opts, allow_paths: list.allow_paths };
      models = list.models;
    } catch (err) {
      say(err.message);
      return;
    }
    options.weightings.forEach((w) => option($("weighting"), w.name, w.label));
    $("weighting").disabled = options.weightings.length === 1;
    options.head_fusions.forEach((h) => option($("head-fusion"), h, h));
    Object.assign($("residual"), { min: options.residual.min, max: options.residual.max,
                                   value: options.residual.default });
    options.causal_norms.forEach((c) => option($("causal-norm"), c, c));
    // flow is computed for every token up to this length anyway; the box asks for it above
    $("flow-all-label").textContent = `flow for every token above ${options.limits.flow_all_tokens} tokens too (slow)`;
    options.filters.forEach((f) => {
      const label = document.createElement("label");
      label.className = "check";
      const input = document.createElement("input");
      input.type = "checkbox";
      input.value = f.name;
      input.dataset.filter = f.name;
      input.addEventListener("change", () => { if (job && job.selected !== null) select(job.selected, false); });
      label.append(input, document.createTextNode(` ${f.label}`));
      $("filters").appendChild(label);
    });
    $("top-k-shown").addEventListener("change", () => { if (job && job.selected !== null) select(job.selected, false); });
    $("model").addEventListener("change", showKind);
    $("add-model").addEventListener("click", addFolder);
    $("sample").addEventListener("change", () => { $("sampling").hidden = !$("sample").checked; });
    $("form").addEventListener("submit", run);
    $("cancel").addEventListener("click", cancel);
    $("live").addEventListener("click", chooseLive);
    $("live").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); chooseLive(ev); }
    });
    fillModels(models.length ? models[0].key : null);
    setState("idle");
  }

  init();
})();
