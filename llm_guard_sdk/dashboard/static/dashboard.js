// llm-guard dashboard: reads the guard's SSE feed and renders it.
// Every value goes into the DOM through textContent or DOM APIs, never as markup: session
// request ids and tenant names come from clients.
"use strict";

(function () {
  const SERIES_COLORS = ["#58a6ff", "#bc8cff", "#39c5cf", "#ff7b72", "#e3b341", "#7ee787"];
  const LINE_COLORS = { warn: "#d29922", evict: "#f0883e", shed: "#f85149" };
  const WINDOW_SECONDS = 300;      // the chart's span
  const MAX_POINTS = 1200;          // points kept in the page
  const STALL_MS = 45000;           // no event for this long: reconnect (pings come every 15 s)

  const state = { points: [], thresholds: null, snapshots: 0, sourceOrder: [] };
  let source = null;
  let retryMs = 1000;
  let lastEvent = 0;
  let reconnectTimer = null;

  const $ = (id) => document.getElementById(id);

  function setText(id, value) {
    const element = $(id);
    if (element) element.textContent = value;
  }

  function formatBytes(bytes) {
    if (bytes === null || bytes === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let value = Number(bytes);
    let unit = 0;
    while (Math.abs(value) >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return (unit === 0 ? String(Math.round(value)) : value.toFixed(1)) + " " + units[unit];
  }

  function formatSeconds(seconds) {
    const s = Math.max(0, Math.floor(Number(seconds) || 0));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  }

  function formatCount(value) {
    return value === null || value === undefined ? "off" : Number(value).toLocaleString("en");
  }

  function setConnection(name) {
    const element = $("connection");
    element.dataset.state = name;
    element.textContent = name;
  }

  // --- chart -------------------------------------------------------------------------

  function seriesNames() {
    for (const point of state.points) {
      for (const name of Object.keys(point.p || {})) {
        if (!state.sourceOrder.includes(name)) state.sourceOrder.push(name);
      }
    }
    return state.sourceOrder;
  }

  function drawChart() {
    const canvas = $("chart");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 600;
    const height = canvas.clientHeight || 300;
    if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
    if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const left = 44, right = 64, top = 10, bottom = 22;
    const plotW = width - left - right, plotH = height - top - bottom;
    const points = state.points;
    const lastT = points.length ? points[points.length - 1].t : 0;
    const firstT = points.length ? points[0].t : 0;
    // The span grows with the history, from one minute up to WINDOW_SECONDS.
    const span = Math.min(WINDOW_SECONDS, Math.max(60, lastT - firstT));
    const startT = lastT - span;
    let maxP = 1;
    for (const point of points) {
      for (const value of Object.values(point.p || {})) maxP = Math.max(maxP, value);
    }
    maxP = Math.min(Math.ceil(maxP * 10) / 10, 2);
    const x = (t) => left + ((t - startT) / span) * plotW;
    const y = (p) => top + plotH - (Math.min(p, maxP) / maxP) * plotH;

    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    ctx.strokeStyle = "#2a3540";
    ctx.fillStyle = "#8b96a1";
    for (let p = 0; p <= maxP + 1e-9; p += 0.25) {
      ctx.beginPath(); ctx.moveTo(left, y(p)); ctx.lineTo(left + plotW, y(p)); ctx.stroke();
      ctx.fillText(Math.round(p * 100) + "%", 4, y(p) + 4);
    }
    const step = span <= 60 ? 10 : span <= 150 ? 30 : 60;
    for (let s = 0; s <= span; s += step) {
      const label = s === 0 ? "now" : s < 60 || s % 60 ? "-" + s + "s" : "-" + s / 60 + "m";
      ctx.fillText(label, x(lastT - s) - 10, height - 6);
    }
    if (state.thresholds) {
      ctx.setLineDash([6, 4]);
      for (const name of ["warn", "evict", "shed"]) {
        const value = state.thresholds[name];
        ctx.strokeStyle = LINE_COLORS[name];
        ctx.fillStyle = LINE_COLORS[name];
        ctx.beginPath(); ctx.moveTo(left, y(value)); ctx.lineTo(left + plotW, y(value)); ctx.stroke();
        ctx.fillText(name + " " + Math.round(value * 100) + "%", left + plotW + 4, y(value) + 4);
      }
      ctx.setLineDash([]);
    }
    let drawn = 0;
    const names = seriesNames();
    names.forEach((name, index) => {
      ctx.strokeStyle = SERIES_COLORS[index % SERIES_COLORS.length];
      ctx.lineWidth = 2;
      ctx.beginPath();
      let started = false;
      for (const point of points) {
        const value = point.p ? point.p[name] : undefined;
        if (value === undefined || point.t < startT) { started = false; continue; }
        if (started) ctx.lineTo(x(point.t), y(value)); else ctx.moveTo(x(point.t), y(value));
        started = true;
        drawn += 1;
      }
      ctx.stroke();
    });
    canvas.dataset.points = String(drawn);
    canvas.dataset.series = String(names.length);
  }

  function renderLegend(sources) {
    const legend = $("legend");
    const items = [];
    const names = seriesNames();
    for (const entry of sources) {
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      const index = names.indexOf(entry.name);
      swatch.className = "swatch " + (index >= 0 ? "series-" + (index % SERIES_COLORS.length) : "");
      item.appendChild(swatch);
      let text = entry.name + ": " + formatBytes(entry.used_bytes);
      text += entry.limit_bytes ? " of " + formatBytes(entry.limit_bytes) : " (no limit)";
      if (entry.pressure !== null) text += " (" + (entry.pressure * 100).toFixed(1) + "%)";
      if (entry.advisory) text += ", advisory";
      if (entry.stale) text += ", stale";
      item.appendChild(document.createTextNode(text));
      items.push(item);
    }
    legend.replaceChildren(...items);
  }

  // --- snapshot ------------------------------------------------------------------------

  function renderLevel(snapshot) {
    const badge = $("level");
    const level = String(snapshot.level);
    badge.textContent = level;
    badge.dataset.level = level;
    badge.className = "badge level-" + level.replace(/[^a-z]/g, "");
    let text = "worst " + (snapshot.pressure * 100).toFixed(1) + "%";
    if (snapshot.source) text += " (" + snapshot.source + ")";
    if (snapshot.limit_bytes) {
      text += " of " + formatBytes(snapshot.limit_bytes) + " limit";
      if (snapshot.limit_source) text += " from " + snapshot.limit_source;
    }
    setText("pressure", text);
    setText("worker", "worker pid " + snapshot.pid);
  }

  function renderCounters(counters, sessions) {
    for (const name of ["evictions", "sheds", "aborts", "timeouts", "leaks", "internal_errors",
      "opened"]) {
      setText("count-" + name, formatCount(counters[name]));
    }
    const evictions = $("count-evictions");
    evictions.title = Object.entries(counters.evictions_by_reason || {})
      .map(([reason, count]) => reason + ": " + count).join(", ");
    $("count-sheds").title = Object.entries(counters.sheds_by_reason || {})
      .map(([reason, count]) => reason + ": " + count).join(", ");
    setText("sessions-total", formatCount(sessions.total));
    setText("sessions-active", formatCount(sessions.active));
    setText("sessions-idle", formatCount(sessions.idle));
    setText("sessions-streams", formatCount(sessions.streams_open));
    setText("sessions-held", formatBytes(sessions.held_bytes));
  }

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function renderSessions(sessions) {
    const rows = [];
    for (const row of sessions.rows) {
      const tr = document.createElement("tr");
      tr.dataset.session = row.id;
      tr.append(
        cell(row.id, "id"),
        cell(row.request_id, "request"),
        cell(row.tenant, "tenant"),
        cell(row.kind),
        cell(row.state, "state-" + String(row.state).replace(/[^a-z]/g, "")),
        cell(formatSeconds(row.age), "num"),
        cell(formatSeconds(row.idle), "num"),
        cell(formatBytes(row.held), "num"),
        cell(formatBytes(row.kv), "num"),
      );
      rows.push(tr);
    }
    if (!rows.length) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = cell("no sessions");
      td.colSpan = 9;
      tr.appendChild(td);
      rows.push(tr);
    }
    $("session-rows").replaceChildren(...rows);
    const shown = sessions.rows.length;
    setText("sessions-caption", shown < sessions.total
      ? "(the " + shown + " holding the most of " + formatCount(sessions.total) + ")"
      : "(" + formatCount(sessions.total) + ")");
  }

  function onHistory(event) {
    const history = JSON.parse(event.data);
    state.points = history.points.slice(-MAX_POINTS);
    state.thresholds = history.thresholds;
    drawChart();
  }

  function onSnapshot(event) {
    const snapshot = JSON.parse(event.data);
    state.thresholds = snapshot.thresholds;
    const point = snapshot.point;
    const last = state.points[state.points.length - 1];
    if (point && (!last || point.t > last.t)) {
      state.points.push(point);
      if (state.points.length > MAX_POINTS) state.points.splice(0, state.points.length - MAX_POINTS);
    }
    renderLevel(snapshot);
    renderCounters(snapshot.counters, snapshot.sessions);
    renderSessions(snapshot.sessions);
    drawChart();
    renderLegend(snapshot.sources);
    state.snapshots += 1;
    document.body.dataset.snapshots = String(state.snapshots);
  }

  // --- connection ----------------------------------------------------------------------

  function handled(listener) {
    return (event) => {
      lastEvent = Date.now();
      retryMs = 1000;
      setConnection("live");
      try { listener(event); } catch (error) { console.error("dashboard: bad event", error); }
    };
  }

  function scheduleReconnect() {
    if (source) { source.close(); source = null; }
    setConnection("reconnecting");
    if (reconnectTimer !== null) return;
    reconnectTimer = window.setTimeout(() => { reconnectTimer = null; connect(); }, retryMs);
    retryMs = Math.min(retryMs * 2, 30000);
  }

  function connect() {
    lastEvent = Date.now();
    source = new EventSource("dashboard/feed");
    source.addEventListener("history", handled(onHistory));
    source.addEventListener("snapshot", handled(onSnapshot));
    source.addEventListener("ping", handled(() => {}));
    source.addEventListener("error", () => {
      // The browser retries by itself while the state is CONNECTING; a refused or broken
      // response closes it for good, so reconnect from here with a growing delay.
      if (!source || source.readyState === EventSource.CLOSED) scheduleReconnect();
      else setConnection("reconnecting");
    });
  }

  window.setInterval(() => {
    if (Date.now() - lastEvent > STALL_MS) scheduleReconnect();
  }, 5000);
  window.addEventListener("resize", drawChart);
  connect();
})();
