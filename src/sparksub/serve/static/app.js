// The server's web page: plain JS against the server's JSON API, no build step.
// Groups (GET /groups), the live rate (GET /stats each second), EXPLAIN of a chosen subscription
// (GET /subscriptions/{name}/explain; an event query's automata also as SVG, format=svg) and a live tail of its notifications (SSE: /events?subscription=...).
"use strict";

const state = { token: "", source: null, history: [], timers: [], classes: new Map(), svgUrl: null };
const $ = (id) => document.getElementById(id);

function showError(text) { $("error").textContent = text || ""; }

async function api(path) {
  const response = await fetch(path, { headers: { Authorization: "Bearer " + state.token } });
  const body = await response.json();
  if (!response.ok) throw new Error(`${response.status}: ${body.error} (at ${body.where})`);
  return body;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}

async function loadGroups() {
  const { rows } = await api("/groups");
  const body = $("groups").querySelector("tbody");
  body.replaceChildren();
  rows.sort((a, b) => (a.class + a.group).localeCompare(b.class + b.group));
  for (const g of rows) {
    const tr = document.createElement("tr");
    cell(tr, g.class); cell(tr, g.group); cell(tr, g.template); cell(tr, String(g.subscriptions), "num");
    body.appendChild(tr);
  }
}

async function loadSubscriptions() {
  const { rows } = await api("/subscriptions");
  const select = $("subscription-select");
  const chosen = select.value;
  select.replaceChildren(new Option("(choose)", ""));
  state.classes = new Map(rows.map((s) => [s.name, s.class]));
  for (const s of rows) select.appendChild(new Option(`${s.name} (${s.class})`, s.name));
  if (rows.some((s) => s.name === chosen)) select.value = chosen;
}

function drawRate() {
  const svg = $("rate-chart");
  const width = 360, height = 60, n = 60;
  const data = state.history.slice(-n);
  const top = Math.max(1, ...data);
  svg.replaceChildren();
  data.forEach((v, i) => {
    const rect = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    const h = (v / top) * (height - 2);
    rect.setAttribute("x", String((i * width) / n));
    rect.setAttribute("y", String(height - h));
    rect.setAttribute("width", String(width / n - 1));
    rect.setAttribute("height", String(h));
    svg.appendChild(rect);
  });
}

async function loadRate() {
  const s = await api("/stats");
  $("rate").textContent = s.notifications_per_second.toFixed(1);
  $("total").textContent = String(s.notifications_total);
  $("connections").textContent = String(s.connections);
  state.history.push(s.notifications_per_second);
  drawRate();
}

function describe(note) {
  const skip = new Set(["subscription_id", "group_id", "client_seq"]);
  const parts = Object.entries(note).filter(([k, v]) => !skip.has(k) && v !== null).map(([k, v]) => `${k}=${v}`);
  return `#${note.client_seq} ${parts.join(" ")}`;
}

function follow(name) {
  if (state.source) state.source.close();
  const tail = $("tail");
  tail.replaceChildren();
  if (!name) { $("tail-state").textContent = ""; return; }
  const query = new URLSearchParams({ token: state.token, subscription: name });
  const source = new EventSource("/events?" + query.toString());
  state.source = source;
  source.addEventListener("hello", () => { $("tail-state").textContent = "(live)"; });
  source.addEventListener("notification", (event) => {
    const message = JSON.parse(event.data);
    const li = document.createElement("li");
    li.textContent = describe({ ...message.data, client_seq: message.client_seq });
    tail.prepend(li);
    while (tail.children.length > 200) tail.lastChild.remove();
  });
  source.addEventListener("gap", (event) => {
    const gap = JSON.parse(event.data);
    showError(`notifications ${gap.from}-${gap.to} passed the retention window`);
  });
  source.onerror = () => { $("tail-state").textContent = "(reconnecting)"; };
}

// An event query's automata as an image: the SVG goes into an <img> (through a blob URL), where a browser
// draws it without running anything it might hold.
async function showGraph(name) {
  const figure = $("explain-graph");
  if (state.svgUrl) { URL.revokeObjectURL(state.svgUrl); state.svgUrl = null; }
  $("explain-svg").removeAttribute("src");
  figure.hidden = true;
  if (state.classes.get(name) !== "EVENT") return;
  try {
    const answer = await api(`/subscriptions/${encodeURIComponent(name)}/explain?format=svg`);
    if ($("subscription-select").value !== name) return;   // another was chosen meanwhile
    state.svgUrl = URL.createObjectURL(new Blob([answer.explain], { type: "image/svg+xml" }));
    $("explain-svg").src = state.svgUrl;
    $("explain-graph-note").textContent = "the automata, laid out by Graphviz on the server";
  } catch (err) {   // e.g. 501: the server has no Graphviz -- the text above still explains
    $("explain-graph-note").textContent = `no drawing: ${err.message || err}`;
  }
  figure.hidden = false;
}

async function choose() {
  const name = $("subscription-select").value;
  follow(name);
  showGraph(name);
  if (!name) { $("explain").textContent = "choose a subscription"; return; }
  try {
    const answer = await api(`/subscriptions/${encodeURIComponent(name)}/explain`);
    $("explain").textContent = answer.explain;
    $("explain").className = "";
  } catch (err) { showError(String(err.message || err)); }
}

async function start(event) {
  if (event) event.preventDefault();
  state.token = $("token").value.trim();
  state.timers.forEach(clearInterval);
  state.timers = [];
  showError("");
  try {
    const me = await api("/me");
    localStorage.setItem("sparksub-token", state.token);
    $("whoami").textContent = `${me.client} (${me.role})`;
    await Promise.all([loadGroups(), loadSubscriptions(), loadRate()]);
  } catch (err) {
    $("whoami").textContent = "not connected";
    showError(String(err.message || err));
    return;
  }
  const every = (ms, fn) => state.timers.push(setInterval(() => fn().catch((e) => showError(String(e.message || e))), ms));
  every(1000, loadRate);
  every(5000, loadGroups);
  every(5000, loadSubscriptions);
}

$("login").addEventListener("submit", start);
$("subscription-select").addEventListener("change", choose);
const given = new URLSearchParams(location.search).get("token") || localStorage.getItem("sparksub-token");
if (given) { $("token").value = given; start(); }
