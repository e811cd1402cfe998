// seqlab report dashboard (SPDX-License-Identifier: MIT; Copyright the seqlab authors). No dependencies,
// no network: it reads the JSON block #report-data that seqlab.tracking.dashboard embeds and draws into #app.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const RUNS = DATA.runs;
  const BY_ID = Object.fromEntries(RUNS.map((r) => [r.id, r]));
  const LOWER = new Set(DATA.lower_is_better);
  const NAMES = {bleu: "BLEU", chrf: "chrF", rouge1: "ROUGE-1", rouge2: "ROUGE-2", rougeL: "ROUGE-L",
    rougeLsum: "ROUGE-Lsum", hyp_logprob_per_seq: "log-prob/seq", hyp_logprob_per_token: "log-prob/token",
    ref_logprob_per_seq: "ref log-prob/seq", ref_logprob_per_token: "ref log-prob/token",
    ref_perplexity: "ref ppl", distinct2: "distinct-2", sample_distinct2: "sample distinct-2",
    self_bleu: "self-BLEU", length_ratio: "length ratio", decode_tokens_per_s: "tokens/s",
    hyp_len_words: "hyp words", ref_len_words: "ref words", hyp_len_tokens: "hyp tokens",
    short_share: "% short", empty_share: "% empty"};
  const CURVE_NAMES = {"val/loss": "validation loss", "train/loss": "training loss", "train/lr": "learning rate",
    "val/greedy_bleu": "quick greedy BLEU"};
  const state = {sort: {key: null, desc: true}, filter: "", group: "", extra: [], metrics: [...DATA.shown_metrics],
    picked: [], chartMetric: DATA.metrics[0] || "", chartX: "", curveKey: "val/loss", bands: true,
    hiddenCurves: new Set()};

  // -- helpers ------------------------------------------------------------------------------------
  const el = (tag, attrs = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  };
  const svg = (tag, attrs = {}) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  };
  const short = (key) => key.split(".").pop();
  const label = (m) => NAMES[m] || (DATA.metric_names || {})[m] || m;
  const fmt = (v, digits = 2) => (typeof v === "number" ? (Number.isInteger(v) || Math.abs(v) >= 1000 ? v.toFixed(0)
    : v.toFixed(digits))
    : v === null || v === undefined ? "" : String(v));
  const value = (run, key) => (key === "name" ? run.name : key === "status" ? run.status
    : key in run.metrics ? run.metrics[key] : run.config[key]);
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const sd = (xs) => (xs.length < 2 ? 0 : Math.sqrt(xs.reduce((a, x) => a + (x - mean(xs)) ** 2, 0) / (xs.length - 1)));
  // a setting's name in labels: its last part, unless two varying keys share it (seed, decoding.seed)
  const DISPLAY = Object.fromEntries(DATA.varying.map((k) => [k, DATA.varying.filter((j) => short(j) === short(k)).length > 1 ? k : short(k)]));
  const settingsLabel = (run) => DATA.varying
    .filter((k) => k !== "run" && run.config[k] !== null && run.config[k] !== undefined && run.config[k] !== "")
    .map((k) => `${DISPLAY[k]}=${typeof run.config[k] === "number" ? +run.config[k].toPrecision(6) : run.config[k]}`).join(" · ");

  // "beam" matches names and settings as text; "num_beams=5" or "decoding.method=beam" matches a key exactly
  function matches(run, filter) {
    return filter.trim().split(/\s+/).filter(Boolean).every((term) => {
      const eq = term.indexOf("=");
      if (eq > 0) {
        const [k, v] = [term.slice(0, eq), term.slice(eq + 1)];
        return Object.entries(run.config).some(([key, val]) => (key === k || short(key) === k) && String(val) === v);
      }
      const text = `${run.name} ${run.label} ${run.status} ${settingsLabel(run)}`.toLowerCase();
      return text.includes(term.toLowerCase());
    });
  }

  function sorted(runs) {
    const {key, desc} = state.sort;
    if (!key) return runs;  // the order the runs were written in
    return [...runs].sort((a, b) => {
      const [x, y] = [value(a, key), value(b, key)];
      if (x === undefined || x === null) return 1;
      if (y === undefined || y === null) return -1;
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return desc ? -c : c;
    });
  }

  // -- the runs table -----------------------------------------------------------------------------
  function metricCell(run, m) {
    const v = run.metrics[m];
    if (v === undefined) return el("td", {class: "num"});
    const ci = run.intervals[m];
    return el("td", {class: "num", "data-value": v}, fmt(v), ci ? el("span", {class: "ci"}, ` [${fmt(ci[0])}, ${fmt(ci[1])}]`) : "");
  }

  function runRow(run) {
    const picked = state.picked.includes(run.id);
    const box = el("input", {type: "checkbox", class: "pick", "data-id": run.id, checked: picked, onchange: () => pick(run.id)});
    return el("tr", {class: `${run.status === "ok" ? "" : "failed"} ${picked ? "picked" : ""}`, "data-id": run.id},
      el("td", {}, box), el("td", {class: "name", title: run.error || run.name}, run.name),
      state.metrics.map((m) => metricCell(run, m)),
      el("td", {class: "settings", title: settingsLabel(run)}, settingsLabel(run)),
      state.extra.map((k) => el("td", {}, fmt(run.config[k]))),
      el("td", {}, run.status === "ok" ? "ok" : `${run.status}: ${run.error}`));
  }

  function groupRow(key, value, members) {
    const cells = state.metrics.map((m) => {
      const xs = members.map((r) => r.metrics[m]).filter((x) => typeof x === "number");
      return el("td", {class: "num", "data-value": xs.length ? mean(xs) : ""},
        xs.length ? `${fmt(mean(xs))} ± ${fmt(sd(xs))}` : "");
    });
    return el("tr", {class: "group", "data-group": String(value)}, el("td"),
      el("td", {}, `${short(key)}=${fmt(value)} (${members.length} runs)`), cells,
      el("td", {class: "settings"}, "mean ± sd"), state.extra.map(() => el("td")), el("td"));
  }

  function table() {
    const visible = sorted(RUNS.filter((r) => matches(r, state.filter)));
    const heads = [["", null], ["run", "name"], ...state.metrics.map((m) => [label(m), m]), ["settings", null],
      ...state.extra.map((k) => [short(k), k]), ["status", "status"]];
    const head = el("tr", {}, heads.map(([text, key]) => el("th", {
      "data-key": key || "", class: key ? "sortable" : "", title: key || "",
      onclick: key ? () => { state.sort = {key, desc: state.sort.key === key ? !state.sort.desc : true}; render(); } : null,
    }, text, key && state.sort.key === key ? (state.sort.desc ? " ▼" : " ▲") : "")));
    const rows = [];
    if (state.group) {
      const groups = new Map();
      for (const r of visible) {
        const v = r.config[state.group];
        if (!groups.has(String(v))) groups.set(String(v), []);
        groups.get(String(v)).push(r);
      }
      for (const [v, members] of groups) rows.push(groupRow(state.group, v, members), ...members.map(runRow));
    } else rows.push(...visible.map(runRow));
    return el("div", {class: "scroll"}, el("table", {id: "runs"}, el("thead", {}, head), el("tbody", {}, rows)));
  }

  function controls() {
    const keys = DATA.config_keys;
    const option = (k, selected) => el("option", {value: k, selected: k === selected}, k || "none");
    const filter = el("input", {id: "filter", type: "search", placeholder: "filter: text or key=value", value: state.filter,
      oninput: (e) => { state.filter = e.target.value; render(e.target.id); }});
    const group = el("select", {id: "group-by", onchange: (e) => { state.group = e.target.value; render(); }},
      ["", ...keys].map((k) => option(k, state.group)));
    const add = el("select", {id: "add-column", onchange: (e) => {
      const k = e.target.value;
      if (DATA.metrics.includes(k)) { if (!state.metrics.includes(k)) state.metrics.push(k); }
      else if (k && !state.extra.includes(k)) state.extra.push(k);
      render();
    }}, el("option", {value: ""}, "+ column"),
    el("optgroup", {label: "metrics"}, DATA.metrics.filter((m) => !state.metrics.includes(m)).map((m) => el("option", {value: m}, label(m)))),
    el("optgroup", {label: "settings"}, keys.filter((k) => !state.extra.includes(k)).map((k) => option(k, ""))));
    const added = state.extra.length || state.metrics.length !== DATA.shown_metrics.length;
    const clear = el("button", {onclick: () => { state.extra = []; state.metrics = [...DATA.shown_metrics]; render(); }}, "reset columns");
    return el("div", {class: "controls"}, filter, " group by ", group, " ", add, added ? clear : "");
  }

  function pick(id) {
    state.picked = state.picked.includes(id) ? state.picked.filter((x) => x !== id) : [...state.picked, id].slice(-2);
    render();
  }

  // -- two runs side by side ---------------------------------------------------------------------
  function pairFor(a, b) {
    for (const p of DATA.pairs) {
      if (!p.runs.includes(a) || !p.runs.includes(b)) continue;
      const tests = p.tests.filter((t) => (t.a === a && t.b === b) || (t.a === b && t.b === a));
      const key = p.examples[`${a}|${b}`] ? `${a}|${b}` : `${b}|${a}`;
      return {set: p, tests, examples: p.examples[key] || [], flipped: key !== `${a}|${b}`};
    }
    return null;
  }

  function compare() {
    const box = el("div", {id: "compare"});
    if (state.picked.length < 2) {
      box.append(el("p", {class: "note"}, "Pick two runs in the table to see their paired tests, the examples where " +
        "their outputs differ most, and their log-prob and length figures."));
      return box;
    }
    const [a, b] = state.picked.map((id) => BY_ID[id]);
    box.append(el("h2", {}, `${a.name} vs ${b.name}`));
    const pair = pairFor(a.id, b.id);
    if (!pair) box.append(el("p", {class: "note"}, "These runs were not scored on the same test set: no paired test."));
    else if (!pair.tests.length) {
      box.append(el("p", {class: "note"}, `${pair.set.runs.length} runs share this test set, so each was tested ` +
        `against the baseline (${BY_ID[pair.set.baseline].name}) only: pick the baseline and one run.`));
    } else {
      const sign = pair.flipped ? -1 : 1;
      const rows = pair.tests.map((t) => {
        const significant = t.p_bootstrap < 0.05 && (t.p_ar === null || t.p_ar < 0.05);
        return el("tr", {class: significant ? "significant" : ""}, el("td", {}, label(t.metric)),
          el("td", {class: "num"}, fmt(a.metrics[t.metric])), el("td", {class: "num"}, fmt(b.metrics[t.metric])),
          el("td", {class: "num delta"}, (sign * t.delta >= 0 ? "+" : "") + fmt(sign * t.delta)),
          el("td", {class: "num"}, fmt(t.p_bootstrap, 3)), el("td", {class: "num"}, t.p_ar === null ? "–" : fmt(t.p_ar, 3)),
          el("td", {}, significant ? "yes" : "no"));
      });
      const mode = pair.set.mode === "all" ? "every pair of runs on this test set was tested"
        : `each run was tested against the baseline ${BY_ID[pair.set.baseline].name}`;
      box.append(el("table", {class: "tests"}, el("tr", {}, ["metric", a.name, b.name, "Δ (second − first)",
        "p (paired bootstrap)", "p (approximate randomization)", "p < 0.05"].map((h) => el("th", {}, h))), rows),
      el("p", {class: "note"}, `Paired tests computed when the report was written (${mode}; ` +
        `${pair.set.n_bootstrap.toLocaleString("en")} bootstrap resamples, ` +
        `${pair.set.n_ar.toLocaleString("en")} randomization trials); ROUGE-L has no approximate randomization test.`));
    }
    const figures = DATA.figure_metrics.filter((m) => m in a.metrics || m in b.metrics);
    if (figures.length) {
      box.append(el("h3", {}, "Log-probs and lengths"), el("table", {class: "figures"},
        el("tr", {}, ["", a.name, b.name].map((h) => el("th", {}, h))),
        figures.map((m) => el("tr", {}, el("td", {}, label(m)), el("td", {class: "num"}, fmt(a.metrics[m])),
          el("td", {class: "num"}, fmt(b.metrics[m]))))));
    }
    if (pair && pair.examples.length) {
      const [first, second] = pair.flipped ? ["b", "a"] : ["a", "b"];
      box.append(el("h3", {}, "Where their outputs differ most (sentence chrF)"), el("table", {class: "examples"},
        el("tr", {}, ["source", "reference", a.name, b.name].map((h) => el("th", {}, h))),
        pair.examples.map((x) => el("tr", {}, el("td", {}, x.source), el("td", {}, x.reference),
          el("td", {}, x[first], el("span", {class: "ci"}, ` (${fmt(x[`chrf_${first}`], 1)})`)),
          el("td", {}, x[second], el("span", {class: "ci"}, ` (${fmt(x[`chrf_${second}`], 1)})`))))));
    }
    return box;
  }

  // -- charts: one metric per axis, intervals as whiskers, only with 3+ points ----------------------
  function axisTicks(lo, hi, n = 5) {
    if (lo === hi) { lo -= 1; hi += 1; }
    const step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    const nice = [1, 2, 5, 10].map((f) => f * step).find((s) => (hi - lo) / s <= n) || step * 10;
    const ticks = [];
    for (let t = Math.ceil(lo / nice) * nice; t <= hi + 1e-12; t += nice) ticks.push(+t.toPrecision(12));
    return ticks;
  }

  // series: [{name, points: [{x, y, lo, hi, label}], band: [{x, lo, hi}]}]; xs numeric, or categories
  function chart(series, xLabel, yLabel, categories = null) {
    const W = 640, H = 300, L = 60, R = 150, T = 12, B = categories ? 90 : 40;
    const pts = series.flatMap((s) => [...s.points, ...(s.band || [])]);
    const ys = pts.flatMap((p) => [p.y, p.lo, p.hi]).filter((v) => typeof v === "number" && isFinite(v));
    const xs = pts.map((p) => p.x);
    let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    const pad = (y1 - y0) * 0.05 || 1; y0 -= pad; y1 += pad;
    const [x0, x1] = categories ? [-0.5, categories.length - 0.5] : [Math.min(...xs), Math.max(...xs)];
    const sx = (x) => L + ((x - x0) / ((x1 - x0) || 1)) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart"});
    for (const t of axisTicks(y0, y1)) {
      root.append(svg("line", {x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid"}));
      const tx = svg("text", {x: L - 6, y: sy(t) + 4, "text-anchor": "end"}); tx.textContent = fmt(t); root.append(tx);
    }
    const xt = categories ? categories.map((c, i) => [i, c]) : axisTicks(x0, x1).map((t) => [t, fmt(t)]);
    for (const [t, text] of xt) {
      const node = svg("text", categories ? {x: sx(t), y: H - B + 12, transform: `rotate(40 ${sx(t)} ${H - B + 12})`}
        : {x: sx(t), y: H - B + 16, "text-anchor": "middle"});
      node.textContent = text.length > 28 ? text.slice(0, 27) + "…" : text; root.append(node);
    }
    const yl = svg("text", {x: 14, y: T + (H - T - B) / 2, transform: `rotate(-90 14 ${T + (H - T - B) / 2})`, "text-anchor": "middle"});
    yl.textContent = yLabel; root.append(yl);
    const xl = svg("text", {x: L + (W - L - R) / 2, y: H - 4, "text-anchor": "middle"}); xl.textContent = xLabel; root.append(xl);
    series.forEach((s, i) => {
      const color = `hsl(${(i * 67) % 360} 65% 42%)`;
      if (s.band && s.band.length > 1) {
        const top = s.band.map((p) => `${sx(p.x)},${sy(p.hi)}`), bottom = s.band.slice().reverse().map((p) => `${sx(p.x)},${sy(p.lo)}`);
        root.append(svg("polygon", {points: [...top, ...bottom].join(" "), fill: color, opacity: 0.18}));
      }
      const ordered = [...s.points].sort((p, q) => p.x - q.x);
      if (!categories && ordered.length > 1) {  // the line joins the mean at each x (seeds share an x)
        const xs = [...new Set(ordered.map((p) => p.x))];
        const line = xs.map((x) => `${sx(x)},${sy(mean(ordered.filter((p) => p.x === x).map((p) => p.y)))}`);
        root.append(svg("polyline", {points: line.join(" "), fill: "none", stroke: color, "stroke-width": 1.6}));
      }
      for (const p of ordered) {
        if (typeof p.lo === "number") root.append(svg("line", {x1: sx(p.x), x2: sx(p.x), y1: sy(p.lo), y2: sy(p.hi), stroke: color}));
        if (ordered.length <= 60) {
          const dot = svg("circle", {cx: sx(p.x), cy: sy(p.y), r: 3, fill: color});
          const tip = svg("title"); tip.textContent = `${p.label || s.name}: ${fmt(p.y)}`; dot.append(tip); root.append(dot);
        }
      }
      const key = svg("text", {x: W - R + 10, y: T + 14 + 14 * i, fill: color}); key.textContent = s.name.slice(0, 24); root.append(key);
    });
    return root;
  }

  function settingChart() {
    const ok = RUNS.filter((r) => r.status === "ok" && matches(r, state.filter));
    const methodOf = (r) => String(r.config["decoding.method"] ?? r.config.decoding ?? r.config.run ?? "runs");
    const swept = (k) => {  // some method takes 2+ values of k, over 3+ runs
      const values = new Map();
      for (const r of ok) if (typeof r.config[k] === "number") values.set(methodOf(r), [...(values.get(methodOf(r)) || []), r.config[k]]);
      return [...values.values()].some((xs) => xs.length >= 3 && new Set(xs).size > 1);
    };
    const numeric = DATA.varying.filter((k) => k !== "seed" && short(k) !== "seed" && swept(k));
    const box = el("div", {class: "chartbox", id: "setting-chart"});
    if (!numeric.length || !state.chartMetric) return box;
    const x = numeric.includes(state.chartX) ? state.chartX : numeric[0];
    const by = new Map();
    for (const r of ok) {
      if (typeof r.config[x] !== "number" || !(state.chartMetric in r.metrics)) continue;
      const name = methodOf(r);
      if (!by.has(name)) by.set(name, []);
      const ci = r.intervals[state.chartMetric];
      by.get(name).push({x: r.config[x], y: r.metrics[state.chartMetric], lo: ci && ci[0], hi: ci && ci[1], label: r.name});
    }
    // a method whose points all share one value of the setting does not vary it: not a series
    const series = [...by].map(([name, points]) => ({name, points})).filter((s) => new Set(s.points.map((p) => p.x)).size > 1);
    const count = series.reduce((n, s) => n + s.points.length, 0);
    box.append(el("h2", {}, `${label(state.chartMetric)} against a setting, per method`), el("div", {class: "controls"},
      "metric ", metricSelect("chart-metric"), " setting ",
      el("select", {id: "chart-x", onchange: (e) => { state.chartX = e.target.value; render(); }},
        numeric.map((k) => el("option", {value: k, selected: k === x}, k)))));
    box.append(count >= 3 ? chart(series, x, label(state.chartMetric)) : el("p", {class: "note"}, "fewer than 3 points"));
    return box;
  }

  function metricSelect(id) {
    return el("select", {id, onchange: (e) => { state.chartMetric = e.target.value; render(); }},
      DATA.metrics.map((m) => el("option", {value: m, selected: m === state.chartMetric}, label(m))));
  }

  function perRunChart() {
    const m = state.chartMetric;
    const ok = sorted(RUNS.filter((r) => r.status === "ok" && m in r.metrics && matches(r, state.filter)));
    const box = el("div", {class: "chartbox", id: "run-chart"});
    if (ok.length < 3) return box;
    const shown = ok.slice(0, 40);
    const points = shown.map((r, i) => ({x: i, y: r.metrics[m], lo: (r.intervals[m] || [])[0], hi: (r.intervals[m] || [])[1], label: r.name}));
    box.append(el("h2", {}, `${label(m)} per run (in table order${ok.length > 40 ? ", first 40" : ""})`),
      el("div", {class: "controls"}, "metric ", metricSelect("run-metric")),
      chart([{name: label(m), points}], "run", label(m), shown.map((r) => r.name)));
    return box;
  }

  const trainingName = (r) => r.name.split("/")[0];  // "<run>-seed<N>/<decoding>": a curve is its training's
  // a band's name: its variant and how many seeds it holds ("baseline (3 seeds)"); a lone run's own name
  const groupName = (members, unit) => (members.length > 1
    ? `${members[0].config.run || trainingName(members[0])} (${members.length}${unit})` : trainingName(members[0]));

  function curveChart() {
    const keys = Object.keys(CURVE_NAMES).filter((k) => RUNS.some((r) => (r.curves[k] || []).length));
    const box = el("div", {class: "chartbox", id: "curve-chart"});
    if (!keys.length) return box;
    const key = keys.includes(state.curveKey) ? state.curveKey : keys[0];
    const seen = new Map();  // one curve per training run (a run decoded several ways has one training)
    for (const r of RUNS) if ((r.curves[key] || []).length && !seen.has(r.link || r.id)) seen.set(r.link || r.id, r);
    const runs = [...seen.values()];
    const groupOf = (r) => (state.bands && r.training ? r.training : r.id);
    const groups = new Map();
    for (const r of runs) { if (!groups.has(groupOf(r))) groups.set(groupOf(r), []); groups.get(groupOf(r)).push(r); }
    const series = [];
    for (const [g, members] of groups) {
      if (state.hiddenCurves.has(g)) continue;
      const name = groupName(members, " seeds");
      // the steps every seed validated at (a run stopped and resumed also validated where it stopped)
      const byStep = members.map((r) => new Map(r.curves[key]));
      const steps = members[0].curves[key].map((p) => p[0]).filter((s) => byStep.every((m) => m.has(s)));
      if (members.length > 1 && steps.length) {
        const at = (i) => byStep.map((m) => m.get(steps[i]));
        series.push({name, points: steps.map((s, i) => ({x: s, y: mean(at(i))})),
          band: steps.map((s, i) => ({x: s, lo: Math.min(...at(i)), hi: Math.max(...at(i))}))});
      } else members.forEach((r) => series.push({name: trainingName(r), points: r.curves[key].map(([s, v]) => ({x: s, y: v}))}));
    }
    const toggles = [...groups].map(([g, members]) => el("label", {class: "toggle"}, el("input", {type: "checkbox", checked: !state.hiddenCurves.has(g),
      onchange: () => { state.hiddenCurves.has(g) ? state.hiddenCurves.delete(g) : state.hiddenCurves.add(g); render(); }}),
    groupName(members, "")));
    box.append(el("h2", {}, "Training curves"), el("div", {class: "controls"}, el("select", {id: "curve-key",
      onchange: (e) => { state.curveKey = e.target.value; render(); }}, keys.map((k) => el("option", {value: k, selected: k === key}, CURVE_NAMES[k]))),
    el("label", {}, el("input", {type: "checkbox", id: "bands", checked: state.bands, onchange: () => { state.bands = !state.bands; render(); }}),
      " seeds of a variant as a band (mean, min to max)")), el("div", {class: "toggles"}, toggles));
    const count = series.reduce((n, s) => n + s.points.length, 0);
    box.append(count >= 3 && series.length ? chart(series, "step", CURVE_NAMES[key]) : el("p", {class: "note"}, "no curve selected"));
    return box;
  }

  // -- the page ---------------------------------------------------------------------------------
  function render(focus) {
    const app = document.getElementById("app");
    app.replaceChildren(controls(), table(), compare(), settingChart(), perRunChart(), curveChart());
    if (focus) { const node = document.getElementById(focus); node.focus(); node.setSelectionRange(node.value.length, node.value.length); }
  }
  window.seqlabReport = {state, render, data: DATA};
  render();
})();
