// hpsearch dashboard: each page draws itself from the JSON API and refreshes in place while a
// study runs (no full page reload). Text from the store is always set as textContent.
"use strict";

const REFRESH_MS = Number(new URLSearchParams(location.search).get("refresh") ?? 5) * 1000;
const TABLE_COLUMNS = ["number", "state", "lr_rule", "per_device_batch_size", "world_size", "grad_accum_steps",
  "effective_batch_size", "base_lr", "lr", "val_accuracy", "val_loss", "runtime_s", "device_seconds",
  "samples_per_s", "comm_fraction", "peak_memory_bytes", "noise_scale", "epochs_completed", "status_reason"];
// Short headers (the full name is each header's title): with the study's own columns the table
// ran past the right edge of a 1400 px window.
const HEADERS = { per_device_batch_size: "b", world_size: "W", grad_accum_steps: "A", effective_batch_size: "B",
  number: "#", peak_memory_bytes: "peak memory", samples_per_s: "samples/s", device_seconds: "device-s",
  comm_fraction: "comm", epochs_completed: "epochs", status_reason: "reason", noise_scale: "noise scale",
  val_accuracy: "val acc", fused_group: "group" };
// Columns written in a unit of their own (the API and the CSV hold the raw value).
const FORMATS = { peak_memory_bytes: bytes, memory_limit_bytes: bytes, comm_fraction: percent,
  training_started: date };
// Columns the trial table reads for its marks without showing them: a halved trial's batch as run,
// a fused member's group size and what its runtime means.
const MARK_COLUMNS = ["ran_as", "fused_members", "runtime_basis"];
// Attrs a listing leaves out: the trial page draws the phases as their own timeline.
const NOT_LISTED = ["phases", "curves"];
const PLOT_CONFIG = { responsive: true, displaylogo: false };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    node.append(child instanceof Node ? child : document.createTextNode(child ?? ""));
  }
  return node;
}

async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// A number for people: three significant digits, thousands separated (2,050 samples/s, not
// 2.05e+3), an exponent only for the very small (an LR of 1e-5) and the very large.
const THOUSANDS = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 3 });
function fmt(value) {
  if (value === null || value === undefined || value === "") return "-";
  if (typeof value === "number") {
    const size = Math.abs(value);
    if (Number.isInteger(value) && size < 1e6) return value.toLocaleString("en-US");
    if (size >= 1e12 || (size < 1e-3 && value !== 0)) return value.toExponential(2);
    if (size >= 1000) return THOUSANDS.format(value);
    return value.toPrecision(3);
  }
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// A byte count in the largest binary unit it reaches, three significant digits
// (hpsearch.study.format_bytes).
function bytes(value) {
  if (value === null || value === undefined || value === "" || !Number.isFinite(value)) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  const text = unit === 0 || Math.abs(value) >= 1000 ? value.toFixed(0) : String(Number(value.toPrecision(3)));
  return `${text} ${units[unit]}`;
}

// One decimal for every share, so a column reads evenly ("42.0%" beside "27.3%", not "42%").
function percent(value) {
  if (value === 0) return "0%";
  return typeof value === "number" && Number.isFinite(value) ? `${(value * 100).toFixed(1)}%` : fmt(value);
}

// Seconds since the epoch as a local date and time.
function date(value) {
  if (typeof value !== "number" || value < 1e8) return fmt(value);
  return new Date(value * 1000).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "medium" });
}

function cell(column, value) { return (FORMATS[column] || fmt)(value); }

// How a trial the search halved ran (its ran_as attr): b and A as asked, then as run.
function ranAs(row) {
  const ran = row && row.ran_as;
  return ran && typeof ran === "object" ? ran : null;
}
function ranAsText(ran) {
  return `ran as b ${ran.per_device_batch_size} x A ${ran.grad_accum_steps}` +
    (ran.out_of_memory_at !== undefined && ran.out_of_memory_at !== null ? ` (b ${ran.out_of_memory_at} ran out of memory)` : "");
}

// A fused member's group as the table writes it (hpsearch.study.group_label): g<group>/<members at
// its start>, "-" for a trial of its own.
function groupLabel(group, members) {
  if (group === null || group === undefined) return "-";
  return `g${group}` + (members === null || members === undefined ? "" : `/${members}`);
}
const ESTIMATE_TITLE = "a solo estimate: what this fused member would take alone on its devices " +
  "(runtime_basis: solo_estimate; the group's wall time is fused_runtime_s)";

function showError(main, error) {
  main.replaceChildren(el("p", { class: "error" }, String(error.message || error)));
}

// Runs fn now and then every REFRESH_MS. A failure of the first run reaches the page (an
// unknown trial, a store that went away); later ones only show in the header until they pass.
async function every(fn) {
  const stamp = () => { document.getElementById("refreshed").textContent = `updated ${new Date().toLocaleTimeString()}`; };
  await fn();
  stamp();
  if (REFRESH_MS > 0) {
    setInterval(async () => {
      try {
        await fn();
        stamp();
      } catch (error) {
        document.getElementById("refreshed").textContent = `update failed: ${error.message}`;
      }
    }, REFRESH_MS);
  }
}

// ---- the studies of the store -------------------------------------------------------------

async function studiesPage(main) {
  main.replaceChildren(el("h1", {}, "Studies"), el("div", { class: "table-wrap", id: "studies" }));
  await every(async () => {
    const studies = await api("/api/studies");
    const rows = studies.map((s) => el("tr", { onclick: () => { location.href = studyUrl(s.name); } },
      el("td", { class: "text" }, el("a", { href: studyUrl(s.name) }, s.name)),
      el("td", {}, fmt(s.n_trials)),
      el("td", { class: "text" }, Object.entries(s.states).map(([k, v]) => `${k.toLowerCase()} ${v}`).join("  ")),
      el("td", { class: "text" }, s.best_values
        ? s.objectives.map((m, i) => `${m} ${fmt(s.best_values[i])}`).join(", ") : "-"),
      el("td", { class: "text" }, s.last_activity ? s.last_activity.replace("T", " ").slice(0, 19) : "-")));
    const table = el("table", {},
      el("thead", {}, el("tr", {}, ["study", "trials", "states", "best", "last activity"].map(
        (h, i) => el("th", { class: i === 1 ? "" : "text" }, h)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { class: "text", colspan: 5 }, "no studies yet"))));
    document.getElementById("studies").replaceChildren(table);
  });
}

function studyUrl(name) { return `/studies/${encodeURIComponent(name)}`; }

// ---- one study: figures and the trial table -------------------------------------------------

async function studyPage(main, { name }) {
  const base = `/api/studies/${encodeURIComponent(name)}`;
  document.getElementById("crumbs").textContent = `/ ${name}`;
  const table = { offset: 0, limit: 50, sort: "number", q: "", state: "", total: 0 };
  let revision = null;
  const summaryBox = el("div", { class: "summary", id: "summary" });
  const figureBox = el("div", { class: "figures", id: "figures" });
  const tableBox = el("div", { class: "table-wrap", id: "trials" });
  const pager = el("span", { class: "muted", id: "pager" });
  const search = el("input", { type: "search", placeholder: "filter rows", id: "filter" });
  const stateSelect = el("select", { id: "state" }, ["", "COMPLETE", "PRUNED", "FAIL", "RUNNING", "PENDING"].map(
    (s) => el("option", { value: s }, s || "all states")));
  let debounce;
  search.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => { table.q = search.value; table.offset = 0; drawTable(); }, 250);
  });
  stateSelect.addEventListener("change", () => { table.state = stateSelect.value; table.offset = 0; drawTable(); });
  const controls = el("div", { class: "controls" }, search, stateSelect,
    el("button", { onclick: () => { table.offset = Math.max(0, table.offset - table.limit); drawTable(); } }, "previous"),
    el("button", { onclick: () => {
      if (table.offset + table.limit < table.total) { table.offset += table.limit; drawTable(); }
    } }, "next"),
    pager, el("a", { href: `${base}/trials.csv`, download: `${name}-trials.csv` }, "download CSV"));
  const space = el("pre", { class: "space", id: "space" });
  const legend = el("div", { class: "legend states", id: "states-legend" });
  const analysis = analysisSection(base);
  main.replaceChildren(el("h1", {}, name), summaryBox, figureBox, analysis.box, el("h2", {}, "Trials"), controls,
    tableBox, legend, el("details", {}, el("summary", {}, "space file"), space));

  let summary;
  async function drawTable() {
    const wanted = tableColumns(summary);
    if (fusedStudy(summary)) wanted.splice(wanted.indexOf("state") + 1, 0, "fused_group");
    const marks = ["ran_as", ...(fusedStudy(summary) ? ["fused_members", "runtime_basis"] : [])];
    wanted.push(...marks.filter((c) => summary.columns.includes(c)));
    const query = new URLSearchParams({ offset: table.offset, limit: table.limit, sort: table.sort,
      columns: wanted.join(",") });
    if (table.q) query.set("q", table.q);
    if (table.state) query.set("state", table.state);
    const page = await api(`${base}/trials?${query}`);
    table.total = page.total;
    const shownColumns = page.columns.filter((c) => !MARK_COLUMNS.includes(c));
    const header = el("tr", {}, shownColumns.map((c) => {
      const sorted = table.sort.replace("-", "") === c;
      const th = el("th", { class: `${numeric(c) ? "" : "text"} ${sorted ? (table.sort.startsWith("-") ? "sorted-desc" : "sorted-asc") : ""}`,
        title: c, "data-column": c }, HEADERS[c] || c);
      th.addEventListener("click", () => {
        table.sort = table.sort === c ? `-${c}` : c;
        table.offset = 0;
        drawTable();
      });
      return th;
    }));
    const reasons = Object.fromEntries((summary.reasons || []).map((x) => [x.reason, x]));
    const rows = page.rows.map((r) => {
      // A trial that never ran (skipped, or not started above a batch that ran out of memory)
      // reads apart from the trials that ran; a reason says what it means on hover.
      const reason = reasons[r.status_reason];
      const notRun = reason && reason.not_run ? " not-run" : "";
      return el("tr", { onclick: () => { location.href = `${studyUrl(name)}/trials/${r.number}`; } },
        shownColumns.map((c) => {
          const classes = [numeric(c) ? "" : "text"];
          if (c === "state") classes.push(`state-${r[c]}${notRun}`);
          if (c === "status_reason" && r[c]) classes.push(`reason-${r[c]}`);
          const attrs = { class: classes.join(" ") };
          if (c === "status_reason" && reason) attrs.title = reason.meaning;
          const ran = ranAs(r);
          if (ran && (c === "per_device_batch_size" || c === "grad_accum_steps")) {
            // Halved after running out of memory: what it was asked, then what it ran.
            attrs.class += " halved";
            attrs.title = ranAsText(ran);
            return el("td", attrs, `${cell(c, r[c])} \u2192 ${cell(c, ran[c])}`);
          }
          if (c === "fused_group") return el("td", attrs, groupLabel(r[c], r.fused_members));
          if (c === "runtime_s" && r.runtime_basis === "solo_estimate" && r[c] !== null) {
            // A fused member's runtime is what it would take alone, not the group's wall time.
            attrs.class += " estimate";
            attrs.title = ESTIMATE_TITLE;
            return el("td", attrs, `${cell(c, r[c])}~`);
          }
          return el("td", attrs, cell(c, r[c]));
        }));
    });
    tableBox.replaceChildren(el("table", {}, el("thead", {}, header), el("tbody", {}, rows)));
    pager.textContent = page.total
      ? `${page.offset + 1}-${Math.min(page.offset + page.limit, page.total)} of ${page.total}` : "no trials";
  }
  function numeric(column) { return summary.numeric_columns.includes(column); }

  async function drawFigures() {
    // Every box first, then the plots: plotly sizes a plot to its box when drawn, and a box
    // added later narrows the grid cells of those drawn before it (they would be clipped).
    for (const figure of summary.figures) {
      if (!document.getElementById(`figure-${figure}`)) {
        figureBox.append(el("div", { class: "figure", id: `figure-${figure}` }));
      }
    }
    for (const figure of summary.figures) {
      const box = document.getElementById(`figure-${figure}`);
      try {
        const fig = await api(`${base}/figures/${figure}`);
        await Plotly.react(box, fig.data, fig.layout, PLOT_CONFIG);
      } catch (error) {
        box.replaceChildren(el("p", { class: "note" }, `${figure}: ${error.message}`));
      }
    }
  }

  await every(async () => {
    summary = await api(base);
    const best = summary.best_trial;
    summaryBox.replaceChildren(
      el("div", {}, el("span", {}, "trials"), `${summary.n_trials} (${Object.entries(summary.states)
        .map(([k, v]) => `${k.toLowerCase()} ${v}`).join(", ")})`),
      el("div", {}, el("span", {}, "finished"), summary.target ? `${summary.finished} of ${summary.target}` : fmt(summary.finished)),
      el("div", {}, el("span", {}, "objectives"), summary.objectives.map((m, i) => `${summary.directions[i]} ${m}`).join(", ")),
      ...fusedSummary(summary.fused),
      el("div", {}, el("span", {}, "best"), best
        ? el("a", { href: `${studyUrl(name)}/trials/${best.number}` },
          `#${best.number}: ${Object.entries(best.values).map(([k, v]) => `${k} ${fmt(v)}`).join(", ")}`)
        : "none yet"));
    space.textContent = summary.space_text;
    legend.replaceChildren(...statesLegend(summary));
    if (summary.revision !== revision) {
      revision = summary.revision;
      await Promise.all([drawTable(), drawFigures(), analysis.draw(summary)]);
    }
  });
}

// Whether the study has fused groups (hpsearch.study.FusedSummary): its table then shows each
// trial's group and marks the members' runtimes as solo estimates.
function fusedStudy(summary) { return Boolean(summary.fused && summary.fused.groups); }

// The summary's fused entry: how many trials trained fused in how many groups, and how many ran on
// their own with a reason (each reason and its count on hover); nothing for a study that never fused.
function fusedSummary(fused) {
  const off = Object.entries((fused && fused.off) || {});
  if (!fused || (!fused.groups && !off.length)) return [];
  const parts = [];
  if (fused.groups) parts.push(`${fused.members} trials in ${fused.groups} group${fused.groups === 1 ? "" : "s"}`);
  const alone = off.reduce((sum, [, n]) => sum + n, 0);
  if (alone) parts.push(`${alone} on their own`);
  return [el("div", { id: "fused-summary", title: off.map(([reason, n]) => `${n} on their own: ${reason}`).join("\n") },
    el("span", {}, "fused"), parts.join(", "))];
}

// The trial table's columns, those of TABLE_COLUMNS the study has with, right after the LR, the
// params it searched besides the core ones (summary.searched: hpsearch.study.searched_params; an
// optimizer left out left two rows of one batch and LR at accuracies 0.11 and 0.93 unexplained),
// then its objectives, then the measurements.
function tableColumns(summary) {
  const has = (c) => summary.columns.includes(c);
  const at = TABLE_COLUMNS.indexOf("lr") + 1;
  const searched = (summary.searched || []).filter((c) => has(c) && !TABLE_COLUMNS.includes(c));
  // The objectives right after the configuration, in the study's order: a regression study's
  // val_loss came last, behind every measurement.
  const objectives = summary.objectives.filter(has);
  const rest = TABLE_COLUMNS.slice(at).filter((c) => has(c) && !objectives.includes(c));
  return [...TABLE_COLUMNS.slice(0, at).filter(has), ...searched, ...objectives, ...rest];
}

// The trial table's legend: the states as they are colored, and each status reason of the study
// with what it means and how many trials it holds.
function statesLegend(summary) {
  const states = [["COMPLETE", "ran every epoch"], ["PRUNED", "stopped early"], ["FAIL", "failed"],
    ["RUNNING", "training"], ["PENDING", "waiting for its devices"]];
  const items = states.filter(([state]) => summary.states[state])
    .map(([state, words]) => el("span", {}, el("b", { class: `state-${state}` }, state), ` ${words}`));
  if ((summary.reasons || []).some((x) => x.not_run)) {
    items.push(el("span", {}, el("b", { class: "state-PRUNED not-run" }, "PRUNED"), " not run (skipped)"));
  }
  if (fusedStudy(summary)) {
    items.push(el("span", {}, el("b", {}, "gN/K"), " trained fused with the other trials of group N (K at its start)"),
      el("span", {}, el("b", { class: "estimate" }, "~"), " runtime of a fused member: a solo estimate"));
  }
  const reasons = (summary.reasons || []).map((x) => el("li", { class: `reason-${x.reason}` },
    el("b", { class: `reason-${x.reason}` }, x.reason), ` (${x.count}): ${x.meaning}`));
  return [el("div", { class: "legend" }, items), reasons.length ? el("ul", { class: "reasons", id: "reasons" }, reasons) : ""];
}

// ---- the analysis: the answer for N devices and the fitted laws --------------------------------

function analysisSection(base) {
  const target = el("input", { type: "text", id: "target", size: 26, placeholder: "target, e.g. val_accuracy=0.95" });
  const devices = el("input", { type: "number", id: "devices", min: 1, step: 1, style: "width: 6em" });
  const minimize = el("select", { id: "minimize" }, ["time", "device-hours"].map((m) => el("option", { value: m }, m)));
  const answer = el("div", { class: "answer", id: "recommendation" }, el("p", { class: "muted" }, "loading..."));
  const notes = el("ul", { class: "notes", id: "analysis-notes" });
  const figures = el("div", { class: "figures", id: "analysis-figures" });
  const box = el("section", { id: "analysis" }, el("h2", {}, "Analysis: what to run on your devices"),
    el("div", { class: "controls" }, el("label", {}, "devices ", devices), el("label", {}, "minimise ", minimize),
      el("label", {}, "target ", target)), answer, figures, notes);
  let summary = null;

  async function draw(latest) {
    if (latest) summary = latest;
    if (!summary) return;
    // The example is the study's own objective at its best trial's value: a study of val_loss
    // is not asked for an accuracy.
    const objective = summary.objectives.find((m) => !["runtime_s", "device_seconds"].includes(m));
    const best = summary.best_trial && summary.best_trial.values[objective];
    if (objective && typeof best === "number") target.placeholder = `target, e.g. ${objective}=${fmt(best)}`;
    const query = new URLSearchParams({ minimize: minimize.value });
    if (devices.value) query.set("devices", devices.value);
    if (target.value.trim()) query.set("target", target.value.trim());
    try {
      const result = await api(`${base}/analysis?${query}`);
      if (result.analysis === null) throw new Error(result.analysis_error);
      if (!devices.value) devices.value = result.devices;
      showAnswer(result);
    } catch (error) {
      answer.replaceChildren(el("p", { class: "note" }, `no analysis yet: ${error.message}`));
      notes.replaceChildren();
    }
    const figureQuery = target.value.trim() ? `?${new URLSearchParams({ target: target.value.trim() })}` : "";
    // Every box first, then the plots (as the study's figures): a box added after a plot was
    // drawn narrows its grid cell, and the plot, drawn at the old width, was cut off on the right.
    for (const figure of summary.analysis_figures || []) {
      if (!document.getElementById(`figure-${figure}`)) {
        figures.append(el("div", { class: "figure", id: `figure-${figure}` }));
      }
    }
    for (const figure of summary.analysis_figures || []) {
      const figureBox = document.getElementById(`figure-${figure}`);
      try {
        const fig = await api(`${base}/figures/${figure}${figureQuery}`);
        await Plotly.react(figureBox, fig.data, fig.layout, PLOT_CONFIG);
      } catch (error) {
        figureBox.replaceChildren(el("p", { class: "note" }, `${figure}: ${error.message}`));
      }
    }
  }

  function showAnswer(result) {
    const a = result.analysis;
    const r = result.recommendation;
    const rows = [];
    if (r) {
      const range = (iv, f) => (iv ? ` [${f(iv[0])}, ${f(iv[1])}]` : "");
      const rule = r.rule && r.base_lr !== null ? `, ${r.rule} rule from base_lr ${fmt(r.base_lr)}` : "";
      rows.push(el("div", {}, el("span", {}, "run "), `b ${r.per_device_batch_size} x W ${r.world_size} x A ${r.grad_accum_steps} ` +
        `= B ${r.effective_batch_size}, lr ${fmt(r.lr)}${range(r.lr_interval, fmt)}${rule}`));
      // The LR above is the schedule's peak: how the trials ran it, as `hpsearch recommend` says.
      rows.push(el("div", { id: "answer-schedule" }, el("span", {}, "schedule "), r.schedule));
      rows.push(el("div", {}, el("span", {}, "predicted "), `${duration(r.time_s)}${range(r.time_interval, duration)} to ${r.target}, ` +
        `${fmt(r.device_hours)}${range(r.device_hours_interval, fmt)} device-hours (${r.basis})`));
      if (r.compile_s) {
        rows.push(el("div", { id: "answer-compile" }, el("span", {}, "plus "),
          `compiling the model once: up to ${duration(r.compile_s)} measured (torch.compile with a cold cache; not in the time above)`));
      }
      if (r.peak_memory_bytes !== null || r.per_device_batch_cap !== null) {
        // As `hpsearch recommend` prints it: the answer's peak per rank and the batch memory allows.
        const peak = r.peak_memory_bytes !== null
          ? `${bytes(r.peak_memory_bytes)} per rank ${r.step_time_s === null ? "measured" : "predicted"}` : "peak not measured";
        const cap = r.per_device_batch_cap !== null ? `, per-device batch at most ${r.per_device_batch_cap} on ${r.device_kind}` : "";
        rows.push(el("div", { id: "answer-memory" }, el("span", {}, "memory "), `${peak}${cap}`));
      }
      for (const line of r.extrapolated) rows.push(el("div", { class: "extrapolated" }, el("span", {}, "extrapolated "), line));
      if (r.confirmation) {
        // Whether the search ran this answer and it held, as `hpsearch recommend` says.
        rows.push(el("div", { id: "answer-confirmation", class: r.confirmation.confirmed ? "confirmed" : "unconfirmed" },
          el("span", {}, "confirmation "), r.confirmation.text));
      }
    } else {
      rows.push(el("p", { class: "note" }, `no recommendation: ${result.recommendation_error}`));
    }
    answer.replaceChildren(...rows);
    const rounds = (a.confirmations || []).map((c) => `confirmation round ${c.round} (${c.trials.map((n) => `#${n}`).join(", ") || "no trial yet"}): ` +
      `${c.configuration} on ${c.devices} device(s), predicted ${fmt(c.predicted_samples[1])} [${fmt(c.predicted_samples[0])}, ` +
      `${fmt(c.predicted_samples[2])}] samples to reach ${c.target}: ${c.verdict}${c.note ? ` (${c.note})` : ""}`);
    const lines = (r ? r.explanation : [`target: ${a.target.metric} ${a.target.direction === "maximize" ? ">=" : "<="} ${fmt(a.target.value)}`])
      .concat(a.rules.map((rule) => rule.summary), rounds);
    notes.replaceChildren(...lines.map((line) => el("li", {}, line)));
  }

  for (const input of [devices, minimize]) input.addEventListener("change", () => draw());
  let debounce;
  target.addEventListener("input", () => { clearTimeout(debounce); debounce = setTimeout(() => draw(), 600); });
  return { box, draw };
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  if (seconds < 120) return `${fmt(seconds)} s`;
  if (seconds < 7200) return `${fmt(seconds / 60)} min`;
  return `${fmt(seconds / 3600)} h`;
}

// ---- one trial -------------------------------------------------------------------------------

async function trialPage(main, { name, number }) {
  const base = `/api/studies/${encodeURIComponent(name)}/trials/${number}`;
  document.getElementById("crumbs").replaceChildren("/ ", el("a", { href: studyUrl(name) }, name), ` / trial #${number}`);
  const curves = el("div", { class: "figure", id: "curves" });
  const head = el("div");
  const time = el("section", { id: "phases" });
  const fusedBox = el("section", { id: "fused" });
  const tables = el("div");
  main.replaceChildren(head, fusedBox, time, curves, tables);
  let finished = false;
  await every(async () => {
    if (finished) return;
    const t = await api(base);
    finished = !["RUNNING", "PENDING", "WAITING"].includes(t.state);
    head.replaceChildren(el("h1", {}, `trial #${t.number} `, el("span", { class: `state-${t.state}` }, t.state)),
      t.status_reason ? el("div", { class: `reason reason-${t.status_reason}`, id: "reason" },
        `${t.status_reason}: ${t.status_detail || t.status_meaning || ""}`) : "",
      t.memory ? el("p", { class: "memory", id: "memory" }, el("span", { class: "muted" }, "memory "), t.memory) : "");
    fusedBox.replaceChildren(...fusedPanel(t.fused, name, t.number));
    time.replaceChildren(el("h2", {}, "Where the time went"), ...phasesPanel(t.phases, t.state));
    tables.replaceChildren(
      ...(t.model_path ? [el("h2", {}, "Saved model"),
        el("p", { class: "text", id: "model-path" }, t.model_path,
          el("span", { class: "note" }, " (final weights, a torch state dict for the workload's model)"))] : []),
      el("h2", {}, "Parameters"), kv(t.params, {}, ranAs(t.user_attrs)),
      el("h2", {}, "Values"), kv(t.values || {}),
      el("h2", {}, "Measurements and attributes"), kv(t.user_attrs, FORMATS),
      el("h2", {}, "Times"), kv({ started: t.datetime_start, completed: t.datetime_complete }));
    const c = t.curves || {};
    if (c.samples_seen && c.samples_seen.length) {
      // The series the trial recorded: accuracy on the left axis, losses on the right one, or on
      // the left when there is no accuracy (a regression workload records val_loss only).
      const hasAccuracy = (c.val_accuracy || []).some((v) => v !== null);
      const lossAxis = hasAccuracy ? "y2" : "y";
      const traces = [["val_accuracy", "y"], ["val_loss", lossAxis], ["train_loss", lossAxis]]
        .filter(([name]) => (c[name] || []).some((v) => v !== null))
        .map(([name, yaxis]) => ({ x: c.samples_seen, y: c[name], name, mode: "lines+markers", yaxis }));
      const layout = {
        title: { text: "learning curves" }, xaxis: { title: { text: "samples seen" } },
        yaxis: { title: { text: hasAccuracy ? "val accuracy" : "loss" } }, legend: { orientation: "h" },
      };
      if (hasAccuracy) layout.yaxis2 = { title: { text: "loss" }, overlaying: "y", side: "right" };
      await Plotly.react(curves, traces, layout, PLOT_CONFIG);
    } else {
      curves.replaceChildren(el("p", { class: "note" }, "no epoch reported"));
    }
  });
}

// A trial's part in fusing (hpsearch.study.FusedTrial.to_dict), as `hpsearch status STUDY --trial N`
// says it: its group and the group's members (links to their pages), what its runtime means and the
// step times, fused and alone; for a trial that ran on its own, why. Nothing for a trial that says
// nothing of fusing.
function fusedPanel(f, name, number) {
  if (!f) return [];
  const rows = [];
  const member = f.fused_group !== null && f.fused_group !== undefined;
  if (member) {
    rows.push(["group", `${f.group_label} (fused_group ${f.fused_group}, ${fmt(f.fused_members)} members at its start), ` +
      "trained as one model"]);
    rows.push(["members", f.members.flatMap((n, i) => [i ? ", " : "",
      n === number ? `#${n}` : el("a", { href: `${studyUrl(name)}/trials/${n}` }, `#${n}`)])]);
  } else if (f.fuse) {
    rows.push(["fuse", f.fuse]);
  }
  if (f.runtime_basis === "solo_estimate") {
    rows.push(["runtime_s", `${seconds(f.runtime_s)}: a solo estimate, what it would take alone on its devices ` +
      "(runtime_basis: solo_estimate)"]);
  }
  if (f.fused_runtime_s !== null && f.fused_runtime_s !== undefined) {
    rows.push(["fused_runtime_s", `${seconds(f.fused_runtime_s)}: the group's wall time`]);
  }
  if ((f.fused_step_s ?? null) !== null || (f.solo_step_s ?? null) !== null) {
    rows.push(["one step", `${stepTime(f.fused_step_s)} for the group fused (fused_step_s), ` +
      `${stepTime(f.solo_step_s)} for one member alone (solo_step_s)`]);
  }
  if (!rows.length) return [];
  return [el("h2", {}, member ? "Trained fused" : "Fusing"),
    el("table", { class: "kv", id: "fused-table" }, el("tbody", {}, rows.map(([k, v]) =>
      el("tr", { id: `fused-${k.replace(/[^a-z_]+/g, "-")}` }, el("td", {}, k), el("td", { class: "text" }, v)))))];
}

// A step's seconds in milliseconds under a second (12 ms), as the CLI writes them.
function stepTime(value) {
  if (value === null || value === undefined) return "-";
  return value < 1 ? `${Number((value * 1e3).toPrecision(3))} ms` : `${Number(value.toPrecision(3))} s`;
}

// Seconds as the CLI's phase table shows them (hpsearch.study.format_seconds).
function seconds(value) {
  if (value === null || value === undefined) return "-";
  const size = Math.abs(value);
  return `${value.toFixed(size < 10 ? 3 : size < 1000 ? 1 : 0)} s`;
}

// The trial's phases (hpsearch.study.PhaseTimeline.to_dict): a bar of the spans between them to
// scale, each of the kind the phase it ends at names (start-up, waiting for devices, training,
// the rest: hpsearch.study.PHASE_SPANS, sent as p.spans, so the names are the CLI's), the phases
// with their seconds since asked and since the phase before, and one line.
function phasesPanel(p, state) {
  if (!p) {
    const why = ["RUNNING", "PENDING", "WAITING"].includes(state) ? "it records them when it ends" : "none recorded";
    return [el("p", { class: "note", id: "phases-none" }, `no phases (${why})`)];
  }
  const phases = p.phases;
  const kinds = Object.fromEntries(p.spans.map((s) => [s.kind, s]));
  // Each span's share of the gaps' sum (the time from asked to told where the phases come in
  // order), so the spans fill the bar exactly, and none is shrunk by the flex layout.
  const total = Math.max(phases.slice(1).reduce((sum, phase, i) => sum + Math.max(0, phase.at_s - phases[i].at_s), 0), 1e-9);
  const spans = phases.slice(1).map((phase, i) => {
    const from = phases[i];
    const width = Math.max(0, phase.at_s - from.at_s) / total * 100;
    return el("div", { class: `span span-${phase.span}`, style: `width: ${width}%`,
      title: `${from.phase} -> ${phase.phase}: ${seconds(phase.at_s - from.at_s)} (${kinds[phase.span].label})` });
  });
  const legend = p.spans.map((s) => el("span", { title: s.meaning }, el("i", { class: `span-${s.kind}` }), s.label));
  const rows = phases.map((phase) => el("tr", {}, el("td", { class: "text" }, phase.phase), el("td", {}, seconds(phase.at_s)),
    el("td", {}, seconds(phase.gap_s)), el("td", { class: "text" }, phase.span ? kinds[phase.span].label : "")));
  return [
    el("div", { class: "timeline", id: "phase-bar" }, spans),
    el("div", { class: "legend" }, legend),
    el("p", { class: "text", id: "phase-summary" }, p.summary),
    el("table", { class: "kv", id: "phase-table" },
      el("thead", {}, el("tr", {}, el("th", { class: "text" }, "phase"), el("th", {}, "since asked"), el("th", {}, "gap"),
        el("th", { class: "text" }, "gap spent on"))),
      el("tbody", {}, rows)),
    ...(p.missing.length ? [el("p", { class: "note" }, `not reached: ${p.missing.join(", ")}`)] : []),
  ];
}

// A table of names and values: in their unit where FORMATS has one (times as dates, bytes in
// MiB/GiB), the phases and curves left out (drawn above), a halved trial's b and A with what it ran.
function kv(object, formats = {}, ran = null) {
  const shown = (k, v) => {
    if (ran && (k === "per_device_batch_size" || k === "grad_accum_steps")) return `${fmt(v)} (${ranAsText(ran)})`;
    if (k === "ran_as" && v && typeof v === "object") return ranAsText(v);
    return formats[k] && v !== null && v !== undefined ? formats[k](v) : fmt(v);
  };
  const rows = Object.entries(object).filter(([k]) => !NOT_LISTED.includes(k))
    .map(([k, v]) => el("tr", { id: `kv-${k}` }, el("td", {}, k), el("td", { class: "text" }, shown(k, v))));
  return el("table", { class: "kv" }, el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", {}, "-"))));
}

// ---- start -----------------------------------------------------------------------------------

// A login URL (?token=...): the server answered it with a cookie that every later request
// carries, so the token leaves the address bar (history, bookmarks, a copied link).
function forgetToken() {
  const here = new URL(location.href);
  if (!here.searchParams.has("token")) return;
  here.searchParams.delete("token");
  history.replaceState(history.state, "", here);
}

window.addEventListener("DOMContentLoaded", () => {
  forgetToken();
  const main = document.getElementById("main");
  const page = document.body.dataset.page;
  const args = JSON.parse(document.body.dataset.args || "{}");
  const pages = { studies: studiesPage, study: studyPage, trial: trialPage };
  pages[page](main, args).catch((error) => showError(main, error));
});
