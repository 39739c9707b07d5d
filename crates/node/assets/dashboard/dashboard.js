// The Switchyard dashboard. Live data comes over SignalR from the service's admin hub
// (/dashboard/hub): a snapshot every second, the connection list every two seconds for the
// filter set here, and live-trace events while a trace is watched.
"use strict";

(function () {
  const TOKEN_KEY = "switchyard.dashboard.token";
  const POINTS = 120; // two minutes of one-second points
  const TRACE_ROWS = 1000; // rows kept on the page (the download has every event)
  const TRACE_KEPT = 100000; // events kept for the download

  // The token arrives after the address's `#` (never sent to a server), in the sign-in form,
  // or, from links of earlier releases, in the query; it is kept for this tab only and taken
  // out of the address bar (and so out of the history and of screenshots).
  const fragment = new URLSearchParams(location.hash.slice(1));
  const query = new URLSearchParams(location.search);
  let token = fragment.get("access_token") || query.get("access_token")
    || sessionStorage.getItem(TOKEN_KEY) || "";
  if (fragment.has("access_token") || query.has("access_token")) {
    sessionStorage.setItem(TOKEN_KEY, token);
    history.replaceState(null, "", location.pathname);
  }

  const $ = (selector) => document.querySelector(selector);
  const state = {
    selectedHub: "",
    last: null, // the previous snapshot, for rates
    series: { time: [], msgIn: [], msgOut: [], bytesIn: [], bytesOut: [], cpu: [], memory: [] },
    traceHub: null,
    traceEvents: [],
  };

  // ---- formatting -------------------------------------------------------------------
  function bytes(n) {
    if (n == null) return "";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }
  function number(n) { return n == null ? "" : Number(n).toLocaleString("en-US"); }
  function rate(n) { return n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1); }
  function duration(seconds) {
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24;
    const m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
  }
  function time(ms) { return new Date(ms).toLocaleTimeString("en-GB", { hour12: false }); }
  function cell(row, text, className) {
    const td = row.insertCell();
    td.textContent = text == null ? "" : String(text);
    if (className) td.className = className;
    return td;
  }

  // ---- charts -----------------------------------------------------------------------
  function chart(target, series, axes) {
    const width = Math.max(320, target.clientWidth || 380);
    return new uPlot({
      width, height: 180,
      series: [{}].concat(series),
      axes: axes || [{}, { size: 60 }],
      scales: { x: { time: true } },
      legend: { live: false },
    }, [[]].concat(series.map(() => [])), target);
  }
  const charts = {
    messages: chart($("#chart-messages"), [
      { label: "in/s", stroke: "#2463eb", width: 2 },
      { label: "out/s", stroke: "#e07b00", width: 2 },
    ]),
    bytes: chart($("#chart-bytes"), [
      { label: "in B/s", stroke: "#2463eb", width: 2 },
      { label: "out B/s", stroke: "#e07b00", width: 2 },
    ], [{}, { size: 70, values: (u, v) => v.map(bytes) }]),
    node: chart($("#chart-node"), [
      { label: "CPU %", stroke: "#c2322f", width: 2, scale: "%" },
      { label: "memory MB", stroke: "#1f8f4e", width: 2, scale: "mb" },
    ], [{}, { scale: "%", size: 50 }, { scale: "mb", side: 1, size: 60, grid: { show: false } }]),
  };

  // Totals of the selected hub, or of every hub.
  function totals(snapshot) {
    const sum = { messagesIn: 0, messagesOut: 0, bytesIn: 0, bytesOut: 0 };
    for (const hub of snapshot.hubs) {
      if (state.selectedHub && hub.name !== state.selectedHub) continue;
      for (const key of Object.keys(sum)) sum[key] += hub.traffic[key] || 0;
    }
    return sum;
  }

  function pushPoint(snapshot) {
    const s = state.series;
    const now = totals(snapshot);
    let perSecond = { messagesIn: 0, messagesOut: 0, bytesIn: 0, bytesOut: 0 };
    if (state.last && state.lastScope === state.selectedHub) {
      const seconds = Math.max(0.001, (snapshot.time - state.last.time) / 1000);
      const before = totals(state.last);
      for (const key of Object.keys(perSecond)) {
        perSecond[key] = Math.max(0, now[key] - before[key]) / seconds;
      }
    } else if (state.last) {
      for (const key of Object.keys(s)) s[key] = []; // the scope changed: start over
    }
    state.last = snapshot;
    state.lastScope = state.selectedHub;
    s.time.push(snapshot.time / 1000);
    s.msgIn.push(perSecond.messagesIn);
    s.msgOut.push(perSecond.messagesOut);
    s.bytesIn.push(perSecond.bytesIn);
    s.bytesOut.push(perSecond.bytesOut);
    s.cpu.push(snapshot.node.cpuPercent);
    s.memory.push(snapshot.node.memoryBytes / 1048576);
    for (const key of Object.keys(s)) if (s[key].length > POINTS) s[key].shift();
    charts.messages.setData([s.time, s.msgIn, s.msgOut]);
    charts.bytes.setData([s.time, s.bytesIn, s.bytesOut]);
    charts.node.setData([s.time, s.cpu, s.memory]);
    return perSecond;
  }

  // ---- snapshot ---------------------------------------------------------------------
  const hubRates = new Map();
  function showSnapshot(snapshot) {
    const previous = state.last;
    const node = snapshot.node;
    $("#node-id").textContent = node.id;
    $("#node-uptime").textContent = duration(node.uptimeSeconds);
    $("#node-cpu").textContent = node.cpuPercent.toFixed(1) + " %";
    $("#node-memory").textContent = bytes(node.memoryBytes);
    $("#node-clients").textContent = number(node.clientConnections);
    $("#node-servers").textContent = number(node.serverConnections);
    $("#node-cluster").textContent = number(node.clusterNodes);

    // Per-hub rates from the previous snapshot.
    if (previous) {
      const seconds = Math.max(0.001, (snapshot.time - previous.time) / 1000);
      for (const hub of snapshot.hubs) {
        const before = previous.hubs.find((h) => h.name === hub.name);
        if (!before) continue;
        hubRates.set(hub.name, {
          in: Math.max(0, hub.traffic.messagesIn - before.traffic.messagesIn) / seconds,
          out: Math.max(0, hub.traffic.messagesOut - before.traffic.messagesOut) / seconds,
        });
      }
    }
    pushPoint(snapshot);

    const body = $("#hubs tbody");
    body.textContent = "";
    for (const hub of snapshot.hubs) {
      const row = body.insertRow();
      row.dataset.hub = hub.name;
      if (hub.name === state.selectedHub) row.className = "selected";
      row.onclick = () => selectHub(hub.name === state.selectedHub ? "" : hub.name);
      cell(row, hub.name, "name");
      const t = hub.transports, p = hub.protocols;
      cell(row, number(hub.connections), "num connections");
      cell(row, number(t.WebSockets || 0), "num websockets");
      cell(row, number(t.ServerSentEvents || 0), "num sse");
      cell(row, number(t.LongPolling || 0), "num longpolling");
      cell(row, number(p.json || 0), "num json");
      cell(row, number(p.messagepack || 0), "num messagepack");
      // Summed over nodes when a node had too many names to pass on (see docs/operations.md, "Dashboard and live trace").
      const about = hub.approximate ? "≈" : "";
      cell(row, about + number(hub.groups), "num groups");
      cell(row, about + number(hub.users), "num users");
      cell(row, number(hub.servers.length), "num servers");
      const r = hubRates.get(hub.name) || { in: 0, out: 0 };
      cell(row, rate(r.in), "num rate-in");
      cell(row, rate(r.out), "num rate-out");
      cell(row, hub.traceUntil ? "until " + time(hub.traceUntil) : "", "trace");
      row.dataset.messagesIn = hub.traffic.messagesIn;
      row.dataset.messagesOut = hub.traffic.messagesOut;
    }

    const nodes = $("#nodes tbody");
    nodes.textContent = "";
    $("#nodes-section").hidden = snapshot.nodes.length < 2;
    for (const n of snapshot.nodes) {
      const row = nodes.insertRow();
      cell(row, n.id);
      cell(row, duration(n.uptimeSeconds));
      cell(row, n.cpuPercent.toFixed(1) + " %", "num");
      cell(row, bytes(n.memoryBytes), "num");
      cell(row, number(n.clientConnections), "num");
      cell(row, number(n.serverConnections), "num");
    }

    const servers = $("#servers tbody");
    servers.textContent = "";
    for (const hub of snapshot.hubs) {
      if (state.selectedHub && hub.name !== state.selectedHub) continue;
      for (const server of hub.servers) {
        const row = servers.insertRow();
        cell(row, hub.name);
        cell(row, server.serverId, "server-id");
        cell(row, number(server.connections), "num");
        cell(row, number(server.clients), "num");
      }
    }

    // Hub choices for the filter and the trace.
    for (const id of ["#filter-hub", "#trace-hub"]) {
      const select = $(id);
      const known = new Set(Array.from(select.options).map((o) => o.value));
      for (const hub of snapshot.hubs) {
        if (!known.has(hub.name)) select.add(new Option(hub.name, hub.name));
      }
    }
    const traced = snapshot.hubs.find((h) => h.name === state.traceHub);
    if (state.traceHub && traced && traced.traceUntil) {
      $("#trace-state").textContent = `tracing ${state.traceHub} until ${time(traced.traceUntil)}`;
    }
  }

  function selectHub(name) {
    state.selectedHub = name;
    $("#chart-scope").textContent = name ? "hub " + name : "all hubs";
    $("#servers-scope").textContent = name ? "hub " + name : "";
    $("#filter-hub").value = name;
    if (name) $("#trace-hub").value = name;
    for (const row of document.querySelectorAll("#hubs tbody tr")) {
      row.className = row.dataset.hub === name ? "selected" : "";
    }
    sendFilter();
  }

  // ---- connections ------------------------------------------------------------------
  function filter() {
    return {
      hub: $("#filter-hub").value,
      search: $("#filter-search").value.trim(),
      transport: $("#filter-transport").value,
      protocol: $("#filter-protocol").value,
      limit: 200,
    };
  }

  function showConnections(list) {
    $("#connections-count").textContent =
      list.matched > list.rows.length ? `${list.rows.length} of ${number(list.matched)}` : number(list.matched);
    const body = $("#connections tbody");
    body.textContent = "";
    for (const c of list.rows) {
      const row = body.insertRow();
      row.dataset.connectionId = c.connectionId;
      cell(row, c.hub);
      cell(row, c.connectionId, "id");
      cell(row, c.userId || "");
      cell(row, c.transport || "");
      cell(row, c.protocol || "");
      cell(row, c.address || "");
      const agent = cell(row, c.userAgent || "", "agent");
      agent.title = c.userAgent || "";
      cell(row, new Date(c.connectedSince).toLocaleString("en-GB", { hour12: false }));
      cell(row, number(c.traffic.messagesIn), "num messages-in");
      cell(row, bytes(c.traffic.bytesIn), "num");
      cell(row, number(c.traffic.messagesOut), "num messages-out");
      cell(row, bytes(c.traffic.bytesOut), "num");
      cell(row, bytes(c.queuedBytes), "num");
      const button = document.createElement("button");
      button.className = "close";
      button.textContent = "Close";
      button.onclick = () => closeConnection(c.hub, c.connectionId);
      row.insertCell().appendChild(button);
    }
  }

  async function closeConnection(hub, id) {
    const reason = $("#close-reason").value;
    try {
      await connection.invoke("CloseConnection", hub, id, reason);
      $("#close-result").textContent = `closed ${id}`;
      sendFilter();
    } catch (error) {
      $("#close-result").textContent = `could not close ${id}: ${error.message || error}`;
    }
  }

  let filterTimer = null;
  function sendFilter() {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(async () => {
      if (connection.state !== signalR.HubConnectionState.Connected) return;
      try {
        showConnections(await connection.invoke("SetFilter", filter()));
      } catch (error) {
        $("#connections-count").textContent = "error: " + (error.message || error);
      }
    }, 150);
  }
  for (const id of ["#filter-search", "#filter-hub", "#filter-transport", "#filter-protocol"]) {
    $(id).addEventListener("input", sendFilter);
  }

  // ---- live trace -------------------------------------------------------------------
  function showTrace(hub, events) {
    const body = $("#trace tbody");
    for (const e of events) {
      state.traceEvents.push(Object.assign({ hub }, e));
      const row = body.insertRow(0);
      row.className = e.kind;
      cell(row, time(e.time));
      cell(row, e.kind, "kind");
      cell(row, e.connectionId || "");
      cell(row, e.direction || "");
      cell(row, e.to || "");
      cell(row, e.target || "", "method");
      cell(row, e.messageType || "");
      cell(row, e.size == null ? "" : number(e.size), "num");
      cell(row, e.reason || "", "reason");
      const detail = cell(row, e.preview || e.detail || "", "detail");
      detail.title = detail.textContent;
      cell(row, e.node || "", "node");
    }
    if (state.traceEvents.length > TRACE_KEPT) state.traceEvents.splice(0, state.traceEvents.length - TRACE_KEPT);
    while (body.rows.length > TRACE_ROWS) body.deleteRow(body.rows.length - 1);
    $("#trace-download").disabled = state.traceEvents.length === 0;
  }

  function traceStopped(text) {
    state.traceHub = null;
    $("#trace-state").textContent = text;
    $("#trace-start").disabled = false;
    $("#trace-stop").disabled = true;
  }

  $("#trace-start").onclick = async () => {
    const hub = $("#trace-hub").value;
    if (!hub) return;
    const minutes = Math.max(1, Number($("#trace-minutes").value) || 10);
    try {
      const until = await connection.invoke("StartTrace", hub, minutes * 60);
      state.traceHub = hub;
      $("#trace-state").textContent = `tracing ${hub} until ${time(until)}`;
      $("#trace-start").disabled = true;
      $("#trace-stop").disabled = false;
    } catch (error) {
      $("#trace-state").textContent = "could not start: " + (error.message || error);
    }
  };
  $("#trace-stop").onclick = async () => {
    if (state.traceHub) await connection.invoke("StopTrace", state.traceHub).catch(() => {});
  };
  $("#trace-download").onclick = () => {
    const lines = state.traceEvents.map((e) => JSON.stringify(e)).join("\n") + "\n";
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([lines], { type: "application/x-ndjson" }));
    link.download = `switchyard-trace-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  };

  // ---- the admin hub ----------------------------------------------------------------
  const connection = new signalR.HubConnectionBuilder()
    .withUrl("/dashboard/hub", {
      skipNegotiation: true,
      transport: signalR.HttpTransportType.WebSockets,
      accessTokenFactory: () => token,
    })
    .withAutomaticReconnect({ nextRetryDelayInMilliseconds: () => 2000 })
    .configureLogging(signalR.LogLevel.Warning)
    .build();

  connection.on("snapshot", showSnapshot);
  connection.on("connections", showConnections);
  connection.on("trace", showTrace);
  connection.on("traceLost", (hub, count) => showTrace(hub, [{ time: Date.now(), kind: "lost", count, detail: `${count} events lost (the page fell behind)` }]));
  connection.on("traceEnded", (hub) => traceStopped(`trace of ${hub} ended`));

  function linkState(text) {
    const badge = $("#link-state");
    badge.textContent = text;
    badge.className = "state " + text;
  }
  connection.onreconnecting(() => linkState("connecting"));
  connection.onreconnected(async () => {
    linkState("connected");
    sendFilter();
    if (state.traceHub) {
      await connection.invoke("WatchTrace", state.traceHub).catch(() => traceStopped("trace ended"));
    }
  });
  // A close with an error is the service's word (the token expired, say): ask for a token.
  connection.onclose((error) => {
    linkState("disconnected");
    if (error) signIn(error.message || String(error));
  });

  function signIn(why) {
    $("#refusal").textContent = why;
    const dialog = $("#sign-in");
    if (!dialog.open) dialog.showModal();
  }
  $("#sign-in-form").addEventListener("submit", () => {
    token = $("#sign-in-token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#sign-in-token").value = "";
    start();
  });

  window.switchyardDashboard = { connection, state }; // for tests and the curious

  function start() {
    linkState("connecting");
    connection.start().then(() => {
      linkState("connected");
      sendFilter();
    }, (error) => {
      linkState("disconnected");
      $("#link-state").title = String(error);
      signIn("The admin hub refused the token (expired, or not an operator token): paste a fresh one.");
    });
  }

  // Without a token the page asks for one first, unless the service lets this page in without
  // (development mode, on loopback).
  if (token || document.body.dataset.auth === "open") start();
  else signIn("The dashboard is for operators: open it with a token.");
})();
