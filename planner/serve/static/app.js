// plan-search's page: a form that asks POST /v1/search (the API plan-search --request answers), the
// front drawn as SVG, the selected plan's time and memory as bars (POST /v1/estimate for a front
// point), its launch configuration, a link and the plan-search command that ask the same question.
// Plain JavaScript, no library, nothing fetched but this server's own API.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const TIME_ROWS = [["compute", "compute_s"], ["memory-bound", "memory_bound_s"], ["recompute", "recompute_s"],
  ["TP comm", "tp_comm_s"], ["CP comm", "cp_comm_s"], ["PP comm", "pp_comm_s"], ["EP all-to-all", "ep_comm_s"],
  ["bubble", "bubble_s"], ["DP comm", "dp_comm_s"], ["optimizer", "optimizer_s"], ["overhead", "overhead_s"]];
const MEMORY_ROWS = [["weights", "weights_gib"], ["gradients", "gradients_gib"], ["optimizer states", "optimizer_gib"],
  ["activations", "activations_gib"], ["transient", "transient_gib"], ["ZeRO-3 buffer", "zero3_gather_buffer_gib"],
  ["allocator slack", "allocator_slack_gib"], ["outside allocator", "framework_overhead_gib"]];
// form control -> request field, for marking the field a refusal names
const FIELD_INPUT = {model: "model", model_config: "config", gpu: "gpus", tokens: "tokens", deadline_days: "deadline",
  budget_usd: "budget", framework: "framework", objective: "objective", max_gpus: "max-gpus",
  time_limit_s: "time-limit"};

const state = {result: null, points: [], selected: null, question: null, models: [], gpus: []};

// ------------------------------------------------------------------ formatting
const int = (n) => Math.round(n).toLocaleString("en-US");
function days(x) { return x >= 1000 ? int(x) : x >= 10 ? x.toFixed(1) : x.toFixed(2); }
function money(x) {
  if (x >= 1e9) return "$" + (x / 1e9).toFixed(2) + "B";
  if (x >= 1e6) return "$" + (x / 1e6).toFixed(2) + "M";
  if (x >= 1e4) return "$" + (x / 1e3).toFixed(0) + "k";
  return "$" + int(x);
}
function pct(x) { return (100 * x).toFixed(1) + "%"; }
function planLine(p) {
  let rc = p.recompute === "full" && p.recompute_layers != null ? `full on ${p.recompute_layers} layers/stage` : p.recompute;
  let s = `tp${p.tp} pp${p.pp} dp${p.dp} cp${p.cp} vpp${p.vpp} mb${p.micro_batch} gb${p.global_batch} zero${p.zero} ` +
    `${rc} ${p.sequence_parallel ? "SP" : "no-SP"} ${p.precision}`;
  if (p.ep * p.etp > 1) s += ` ep${p.ep} etp${p.etp} ${p.moe_dispatcher}`;
  if (p.pp_schedule && p.pp_schedule !== "1f1b") s += ` ${p.pp_schedule}`;
  return s;
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}
function shellQuote(s) {
  s = String(s);
  return /^[A-Za-z0-9_./,:=+@%-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
}

// ------------------------------------------------------------------ the question
function source() { return document.querySelector("input[name=source]:checked").value; }

// The form as (the request body, the plan-search command's arguments, the link's parameters).
function question() {
  const body = {}, args = ["plan-search"], params = new URLSearchParams();
  let config = null;
  if (source() === "config") {
    const text = $("config").value.trim();
    if (!text) throw {field: "model_config", message: "model_config: paste or upload a config.json"};
    try { config = JSON.parse(text); } catch (e) {
      throw {field: "model_config", message: "model_config: not valid JSON (" + e.message + ")"};
    }
    const name = ($("config-name").value.trim() || "my-model").replace(/[^A-Za-z0-9_.-]+/g, "-");
    body.model = name + "/config.json";
    body.model_config = config;
  } else {
    body.model = $("model").value;
    params.set("model", body.model);
  }
  args.push("--model", body.model);
  const gpus = [...document.querySelectorAll("#gpus input:checked")].map((i) => i.value);
  if (!gpus.length) throw {field: "gpu", message: "gpu: choose at least one GPU type"};
  body.gpu = gpus;
  args.push("--gpu", gpus.join(","));
  params.set("gpu", gpus.join(","));
  const tokens = $("tokens").value.trim();
  if (tokens) { body.tokens = tokens; args.push("--tokens", tokens); params.set("tokens", tokens); }
  const num = (id, field, option) => {
    const v = $(id).value.trim();
    if (!v) return;
    const x = Number(v);
    if (!Number.isFinite(x)) throw {field, message: `${field}: ${v} is not a number`};
    body[field] = x;
    args.push(option, String(x));
    params.set(field, String(x));
  };
  num("deadline", "deadline_days", "--deadline-days");
  num("budget", "budget_usd", "--budget-usd");
  num("max-gpus", "max_gpus", "--max-gpus");
  const objective = $("objective").value;
  if (objective !== "balanced") { body.objective = objective; args.push("--objective", objective); params.set("objective", objective); }
  const limit = $("time-limit").value.trim();
  if (limit && Number(limit) !== 10) {
    body.time_limit_s = Number(limit);
    args.push("--time-limit", String(Number(limit)));
    params.set("time_limit_s", String(Number(limit)));
  }
  const fw = $("framework").value;
  params.set("framework", fw);
  if (fw) { body.framework = fw; args.push("--framework", fw, "--emit"); }
  return {body, command: args.map(shellQuote).join(" "), params, config};
}

// The form from a link's parameters (?model=...&gpu=...): true when there was a question in it.
function fromParams() {
  const q = new URLSearchParams(location.search);
  if (!q.has("model") && !q.has("gpu")) return false;
  if (q.has("model")) {
    const m = q.get("model");
    if (![...$("model").options].some((o) => o.value === m)) $("model").append(el("option", {value: m}, m));
    $("model").value = m;
  }
  if (q.has("gpu")) {
    const want = q.get("gpu").split(",");
    for (const box of document.querySelectorAll("#gpus input")) box.checked = want.includes(box.value);
  }
  const set = (id, key) => { if (q.has(key)) $(id).value = q.get(key); };
  set("tokens", "tokens"); set("deadline", "deadline_days"); set("budget", "budget_usd"); set("max-gpus", "max_gpus");
  set("objective", "objective"); set("time-limit", "time_limit_s"); set("framework", "framework");
  return true;
}

// ------------------------------------------------------------------ talking to the API
async function api(path, body) {
  const r = await fetch(path, {method: body ? "POST" : "GET", headers: {"Content-Type": "application/json"},
    body: body ? JSON.stringify(body) : undefined});
  const ctype = r.headers.get("Content-Type") || "";
  const doc = ctype.includes("json") ? await r.json() : await r.text();
  return {status: r.status, doc};
}

function showStatus(text, kind) {
  const s = $("status");
  s.textContent = text;
  s.className = kind || "";
}

function markField(field) {
  document.querySelectorAll(".bad").forEach((e) => e.classList.remove("bad"));
  const id = field && FIELD_INPUT[String(field).split(".")[0]];
  if (id && $(id)) $(id).classList.add("bad");
}

async function ask(ev) {
  if (ev) ev.preventDefault();
  let q;
  try { q = question(); } catch (e) { markField(e.field); showStatus(e.message, "error"); return; }
  markField(null);
  state.question = q;
  $("go").disabled = true;
  const t0 = performance.now();
  showStatus("searching...", "busy");
  history.replaceState(null, "", source() === "catalog" ? "?" + q.params.toString() : location.pathname);
  try {
    const {status, doc} = await api("/v1/search" + (q.body.framework ? "?emit=1" : ""), q.body);
    const secs = ((performance.now() - t0) / 1000).toFixed(1);
    $("message").hidden = status === 200;
    if (status === 200) {
      showStatus(`answered in ${secs} s: ${doc.front.length} front points of ${int(doc.stats.feasible)} feasible plans` +
        (doc.stats.proven_optimal ? ", proven optimal" : ", NOT proven optimal (time limit)"), "ok");
      render(doc, q);
    } else {
      $("results").hidden = true;
      markField(doc.field);
      const what = {409: "infeasible", 503: "busy", 422: "error", 400: "error", 413: "error"}[status] || `error ${status}`;
      showStatus(`${what} (HTTP ${status})`, "error");
      $("message-title").textContent = {409: "Nothing feasible", 503: "The server is busy",
        422: "Bad input", 400: "Bad input", 413: "Bad input"}[status] || `Error ${status}`;
      $("message-text").textContent = String(doc.message || doc);
    }
  } catch (e) {
    showStatus("no answer from the server: " + e.message, "error");
  } finally {
    $("go").disabled = false;
  }
}

// ------------------------------------------------------------------ results
function render(res, q) {
  state.result = res;
  const systems = res.inputs.systems;
  state.points = res.front.map((fp, i) => ({fp, i, own: true})).concat(
    (res.other_fronts || []).map((fp, i) => ({fp, i: res.front.length + i, own: false})));
  state.color = Object.fromEntries(systems.map((s, k) => [s, COLORS[k % COLORS.length]]));
  $("results").hidden = false;
  renderRecommended(res);
  drawCharts();
  select(res.recommended_index, res.recommended, res.launch || null);
  $("share").href = source() === "catalog" ? "?" + q.params.toString() : "#";
  $("share").textContent = source() === "catalog" ? location.origin + "/?" + q.params.toString()
    : "(a pasted config.json is not carried by a link: save it as " + q.body.model + ")";
  $("command").textContent = q.command + (q.config ? `\n# with the pasted text saved as ${q.body.model}` : "");
}

function renderRecommended(res) {
  const e = res.recommended, p = e.plan, run = e.run;
  const box = $("recommended");
  box.replaceChildren();
  const h = el("h2", {}, `Recommended: ${int(p.num_gpus)} × ${e.cluster}, ${days(run.days)} days, ${money(run.cost_usd)}`);
  box.append(h);
  box.dataset.numGpus = p.num_gpus;
  box.dataset.gpu = e.cluster;
  box.dataset.plan = JSON.stringify(p);
  box.append(el("p", {class: "reason"}, res.reason));
  box.append(el("p", {class: "plan"}, planLine(p)));
  box.append(el("p", {}, `step ${e.step_time_s.toFixed(3)} s, ${int(e.tokens_per_s)} tokens/s, MFU ${pct(e.mfu)}, ` +
    `peak memory ${e.memory.peak_gib.toFixed(1)} of ${e.memory.usable_gib.toFixed(1)} GiB usable; ` +
    `${int(run.gpu_hours)} GPU-hours, ${int(run.energy_kwh)} kWh; bottleneck ${e.bottleneck}`));
}

function ticksLog(lo, hi, base) {
  const out = [];
  if (base === 2) {
    for (let v = Math.pow(2, Math.floor(Math.log2(lo))); v <= hi * 1.0001; v *= 2) if (v >= lo) out.push(v);
    while (out.length > 7) for (let k = out.length - 2; k > 0; k -= 1) out.splice(k, 1);
    return out;
  }
  for (const ms of [[1, 2, 5], [1, 1.5, 2, 3, 5, 7]]) {  // finer mantissas when the range is short
    out.length = 0;
    for (let d = Math.pow(10, Math.floor(Math.log10(lo))); d <= hi * 10; d *= 10)
      for (const m of ms) if (m * d >= lo && m * d <= hi) out.push(m * d);
    if (out.length >= 3) break;
  }
  return out.length >= 2 ? out : [lo, hi];
}
function ticksLinear(lo, hi) {
  const span = hi - lo || Math.abs(hi) || 1;
  const step0 = Math.pow(10, Math.floor(Math.log10(span / 5)));
  const step = [1, 2, 5, 10].map((m) => m * step0).find((s) => span / s <= 6);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) out.push(v);
  return out;
}

function drawCharts() {
  const box = $("charts");
  box.replaceChildren();
  box.append(chart("days", "days of training", (v) => v.toLocaleString("en-US"), true),
    chart("cost_usd", "dollars", money, false));
  const legend = $("legend");
  legend.replaceChildren();
  for (const [name, color] of Object.entries(state.color)) {
    const item = el("span", {class: "key"});
    const none = !state.points.some((p) => p.fp.gpu === name);
    item.append(el("i", {style: `background:${color}`}), document.createTextNode(name + (none ? " (no point)" : "")));
    legend.append(item);
  }
  const cut = state.result.stats.cut || [];
  $("cut").hidden = !cut.length;
  $("cut").textContent = cut.length ? "cut by the time limit: " + cut.join("; ") : "";
  const ring = el("span", {class: "key"});
  ring.append(el("i", {class: "ring"}), document.createTextNode("recommended"));
  legend.append(ring);
}

function chart(key, label, fmt, logY) {
  const W = 470, H = 300, L = 64, R = 14, T = 14, B = 44;
  const pts = state.points;
  const xs = pts.map((p) => p.fp.num_gpus), ys = pts.map((p) => p.fp[key]);
  const x0 = Math.min(...xs) / 1.25, x1 = Math.max(...xs) * 1.25;
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (logY) { y0 /= 1.3; y1 *= 1.3; } else { const pad = (y1 - y0) * 0.1 || y1 * 0.05; y0 = Math.max(0, y0 - pad); y1 += pad; }
  const X = (v) => L + (Math.log(v / x0) / Math.log(x1 / x0)) * (W - L - R);
  const Y = logY ? (v) => T + (1 - Math.log(v / y0) / Math.log(y1 / y0)) * (H - T - B)
    : (v) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `GPU count against ${label}`,
    "data-key": key});
  const axes = svg("g", {class: "axes"});
  for (const v of ticksLog(x0 * 1.25, x1 / 1.25, 2)) {
    axes.append(svg("line", {x1: X(v), x2: X(v), y1: T, y2: H - B, class: "grid"}));
    axes.append(svg("text", {x: X(v), y: H - B + 16, "text-anchor": "middle"}, int(v)));
  }
  for (const v of logY ? ticksLog(y0, y1, 10) : ticksLinear(y0, y1)) {
    axes.append(svg("line", {x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid"}));
    axes.append(svg("text", {x: L - 6, y: Y(v) + 4, "text-anchor": "end"}, fmt(v)));
  }
  axes.append(svg("rect", {x: L, y: T, width: W - L - R, height: H - T - B, class: "frame"}));
  axes.append(svg("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", class: "title"}, "GPUs"));
  axes.append(svg("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "title",
    transform: `rotate(-90 14 ${(T + H - B) / 2})`}, label + (logY ? " (log)" : "")));
  s.append(axes);
  const rec = state.result.recommended_index;
  for (const own of [false, true]) {
    for (const name of Object.keys(state.color)) {
      const series = pts.filter((p) => p.own === own && p.fp.gpu === name).sort((a, b) => a.fp.num_gpus - b.fp.num_gpus);
      if (!series.length) continue;
      const color = state.color[name];
      s.append(svg("polyline", {points: series.map((p) => `${X(p.fp.num_gpus)},${Y(p.fp[key])}`).join(" "),
        fill: "none", stroke: color, "stroke-width": own ? 1.6 : 1, "stroke-dasharray": own ? "" : "4 3",
        opacity: own ? 0.9 : 0.6}));
      for (const p of series) {
        const c = svg("circle", {cx: X(p.fp.num_gpus), cy: Y(p.fp[key]), r: 4.5, class: "pt",
          fill: own ? color : "#fff", stroke: color, "stroke-width": 1.5, "data-i": p.i});
        c.addEventListener("mouseenter", (ev) => tip(ev, p));
        c.addEventListener("mousemove", (ev) => moveTip(ev));
        c.addEventListener("mouseleave", () => { $("tip").hidden = true; });
        c.addEventListener("click", () => pick(p));
        s.append(c);
        if (own && p.i === rec) s.append(svg("circle", {cx: X(p.fp.num_gpus), cy: Y(p.fp[key]), r: 9, class: "rec"}));
      }
    }
  }
  return s;
}

function tipText(p) {
  const fp = p.fp;
  return [`${int(fp.num_gpus)} × ${fp.gpu}${p.own ? "" : " (beaten by another type)"}`,
    `${days(fp.days)} days, ${money(fp.cost_usd)}, ${int(fp.energy_kwh)} kWh`,
    planLine(fp.plan), `MFU ${pct(fp.mfu)}, ${fp.memory_gib.toFixed(1)} GiB/GPU, step ${fp.step_time_s.toFixed(2)} s`,
    `scaling efficiency ${pct(fp.scaling_efficiency)}; bottleneck ${fp.bottleneck}`].join("\n");
}
function tip(ev, p) {
  const t = $("tip");
  t.textContent = tipText(p);
  t.hidden = false;
  moveTip(ev);
}
function moveTip(ev) {
  const t = $("tip");
  const x = Math.min(ev.pageX + 14, window.scrollX + document.documentElement.clientWidth - t.offsetWidth - 8);
  t.style.left = x + "px";
  t.style.top = (ev.pageY + 14) + "px";
}

// A front point clicked: its estimate (and launch configuration) from POST /v1/estimate.
async function pick(p) {
  const q = state.question, res = state.result;
  if (p.own && p.i === res.recommended_index) { select(p.i, res.recommended, res.launch || null); return; }
  const body = {model: q.body.model, gpu: p.fp.gpu, plan: p.fp.plan, tokens: res.inputs.tokens,
    memory_headroom: res.request.memory_headroom, sets: res.request.sets};
  // the run's terms the search priced the point with (those the request carries)
  for (const k of ["checkpoint_interval_h", "failure_rate", "restart_minutes", "async_checkpoint"])
    if (res.request[k] != null) body[k] = res.request[k];
  if (q.body.model_config) body.model_config = q.body.model_config;
  if (res.request.framework) body.framework = res.request.framework;
  showStatus("pricing the selected plan...", "busy");
  const {status, doc} = await api("/v1/estimate" + (body.framework ? "?emit=1" : ""), body);
  if (status === 200 || status === 409) {
    showStatus(`selected ${int(p.fp.num_gpus)} × ${p.fp.gpu}`, "ok");
    select(p.i, doc, doc.launch || null);
  } else {
    showStatus(`error: ${doc.message || doc}`, "error");
  }
}

function select(i, est, launch) {
  state.selected = i;
  document.querySelectorAll("circle.pt").forEach((c) => c.classList.toggle("sel", Number(c.dataset.i) === i));
  const p = est.plan, run = est.run;
  $("selected-title").textContent = `Selected plan: ${int(p.num_gpus)} × ${est.cluster}` +
    (i === state.result.recommended_index ? " (recommended)" : "") +
    (run ? `, ${days(run.days)} days, ${money(run.cost_usd)}` : "");
  $("selected-plan").textContent = planLine(p);
  bars($("time-bars"), TIME_ROWS.map(([k, f]) => [k, est.time[f]]), est.step_time_s, "s",
    (v) => v.toFixed(3), "step", est.step_time_s);
  const m = est.memory;
  bars($("memory-bars"), MEMORY_ROWS.map(([k, f]) => [k, m[f]]), m.capacity_gib, "GiB", (v) => v.toFixed(2),
    "peak", m.peak_gib, m.usable_gib);
  $("launch").textContent = launch ? `# ${launch.framework} ${launch.version}\n${launch.text.trimEnd()}` +
    (launch.notes.length ? "\n" + launch.notes.map((n) => "# note: " + n).join("\n") : "")
    : "choose a framework to get the launch configuration of a plan";
}

// One bar per part that is there (rows under half a thousandth of the scale say nothing), scaled to
// `scale`; a total row; `mark`, when given, a line at that value (the usable memory).
function bars(box, rows, scale, unit, fmt, totalName, total, mark) {
  box.replaceChildren();
  const shown = rows.filter(([, v]) => v >= 5e-4 * scale);
  const table = el("table", {class: "bar-table"});
  for (const [name, v] of shown.concat([[totalName, total]])) {
    const tr = el("tr", name === totalName ? {class: "total"} : {});
    tr.append(el("td", {class: "label"}, name));
    const td = el("td", {class: "barcell"});
    const bar = el("div", {class: "bar", style: `width:${Math.min(100, 100 * v / scale).toFixed(2)}%`});
    td.append(bar);
    if (mark != null) td.append(el("div", {class: "mark", style: `left:${(100 * mark / scale).toFixed(2)}%`,
      title: `usable ${fmt(mark)} ${unit}`}));
    tr.append(td);
    tr.append(el("td", {class: "num"}, `${fmt(v)} ${unit}`));
    tr.append(el("td", {class: "num"}, pct(v / (totalName === "peak" ? total : scale))));
    table.append(tr);
  }
  box.append(table);
  if (mark != null) box.append(el("p", {class: "hint"}, `line: usable ${fmt(mark)} of ${fmt(scale)} ${unit}`));
}

// ------------------------------------------------------------------ start
async function start() {
  const [v, models, gpus] = await Promise.all([api("/v1/version"), api("/v1/catalog/models"), api("/v1/catalog/gpus")]);
  $("version").textContent = `${v.doc.name} ${v.doc.version}`;
  for (const m of models.doc) {
    const b = m.moe ? `${m.params_b.toFixed(0)}B, ${m.active_params_b.toFixed(0)}B active` : `${m.params_b.toFixed(1)}B`;
    $("model").append(el("option", {value: m.name}, `${m.name} (${b})`));
  }
  $("model").value = models.doc.some((m) => m.name === "gpt3-175b") ? "gpt3-175b" : models.doc[0].name;
  for (const g of gpus.doc) {
    const label = el("label", {class: "gpu"});
    const box = el("input", {type: "checkbox", value: g.name});
    if (g.name === "a100-80gb") box.checked = true;
    label.append(box, document.createTextNode(` ${g.name} `),
      el("small", {}, `${g.memory_gib} GiB, $${g.price_per_gpu_hour_usd.toFixed(2)}/h`));
    $("gpus").append(label);
  }
  for (const r of document.querySelectorAll("input[name=source]")) r.addEventListener("change", () => {
    $("catalog-model").hidden = source() !== "catalog";
    $("config-model").hidden = source() !== "config";
  });
  $("config-file").addEventListener("change", async () => {
    const f = $("config-file").files[0];
    if (!f) return;
    $("config").value = await f.text();
    try {
      const doc = JSON.parse($("config").value);
      const name = String(doc._name_or_path || "").split("/").pop();
      if (name) $("config-name").value = name;
    } catch (e) { /* the search names the problem */ }
  });
  for (const b of document.querySelectorAll("button.copy")) b.addEventListener("click", async () => {
    const text = $(b.dataset.copy).textContent;
    try { await navigator.clipboard.writeText(text); b.textContent = "copied"; }
    catch (e) { const r = document.createRange(); r.selectNodeContents($(b.dataset.copy));
      getSelection().removeAllRanges(); getSelection().addRange(r); b.textContent = "selected"; }
    setTimeout(() => { b.textContent = "copy"; }, 1500);
  });
  $("ask").addEventListener("submit", ask);
  document.body.dataset.ready = "1";
  if (fromParams()) ask();
}

start().catch((e) => showStatus("the page could not load the catalogs: " + e.message, "error"));
