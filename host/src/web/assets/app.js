// dsh web: the page. Everything a provider, a tool or a log says is shown as text (textContent),
// never as HTML. The page follows a session through /api/sessions/{id}/events; the browser's
// EventSource reconnects with Last-Event-ID, so a reload or a dropped connection loses nothing.
"use strict";

const $ = (id) => document.getElementById(id);
const ROW_HEIGHT = 22;
const RECENT_TURNS = 50;
const WINDOW_SPANS = 400;
let current = null; // { id, source, running, profile }
let retryTimer = null;
let toolTimer = null;
let draft = null;
let toolServers = {};
const runningTools = new Map();

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer.error || `${response.status} ${response.statusText}`);
  return answer;
}

const sessionPath = (suffix) => `/api/sessions/${encodeURIComponent(current.id)}${suffix}`;
const profilePath = (profile, suffix) => `/api/profiles/${encodeURIComponent(profile)}${suffix}`;

function showProblem(error) {
  $("problem").textContent = error ? String(error.message || error) : "";
  $("problem").hidden = !error;
}

function element(tag, className, text) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text !== undefined) made.textContent = text;
  return made;
}

// ---- Chat ---------------------------------------------------------------------------------

// Scrolls the conversation to its end once, before the next frame: a catch-up of many events
// lays the page out once, not once per entry.
let scrollPending = false;
function scrollToEnd() {
  if (scrollPending) return;
  scrollPending = true;
  requestAnimationFrame(() => {
    scrollPending = false;
    $("conversation").scrollTop = $("conversation").scrollHeight;
  });
}

// Adds `node` to the conversation, before the answer still streaming.
function place(node) {
  $("conversation").insertBefore(node, draft);
  scrollToEnd();
  return node;
}

function entry(kind, text) {
  return place(element("div", `entry ${kind}`, text));
}

function textOf(content) {
  return (content || []).filter((block) => block.type === "text").map((block) => block.text).join("");
}

// A retry's place in its chain, as every dsh screen shows it (dsh_session::timeline::retry_place).
function retryPlace(data) {
  if (data.maxRetries != null) return `${data.retry}/${data.maxRetries}`;
  if (data.headRetries != null && data.retry <= data.headRetries) return `${data.retry}/${data.headRetries}, then ∞`;
  return `${data.retry}/∞`;
}

// A delay as every dsh screen shows it (dsh_session::timeline::seconds).
function seconds(ms) {
  if (!Number.isFinite(ms)) return "∞";
  if (ms < 10000) return `${(Math.ceil(Math.max(ms, 0) / 100) / 10).toFixed(1)}s`;
  return `${Math.ceil(ms / 1000)}s`;
}

function liveLine(text) {
  $("live-line").textContent = text || "";
  $("live-line").hidden = !text;
}

function idleLine() {
  if (runningTools.size > 0) return showTools();
  liveLine(current && current.running && !draft ? "Waiting for the model…" : "");
}

function stopRetryLine() {
  clearInterval(retryTimer);
  retryTimer = null;
  idleLine();
}

function showRetry(event) {
  const data = event.data;
  const until = event.time + data.delayMs;
  const failure = data.failure || {};
  const details = element("details", "entry retry");
  const line = `Retrying model request (${retryPlace(data)}) · ${seconds(data.delayMs)}`;
  const more = [`${failure.code || "?"}: ${failure.message || ""}`, `delay ${seconds(data.delayMs)}`];
  const retryAfter = failure.providerRetryAfterMs != null ? failure.providerRetryAfterMs : failure.retryAfterMs;
  if (retryAfter != null) more.push(`Retry-After ${seconds(retryAfter)}`);
  if (failure.status != null) more.push(`HTTP ${failure.status}`);
  details.append(element("summary", "", line), element("div", "", more.join(" · ")));
  place(details);
  clearInterval(retryTimer);
  const tick = () => {
    const left = until - Date.now();
    if (left <= 0) return stopRetryLine();
    liveLine(`Retrying model request (${retryPlace(data)}) · ${seconds(left)}`);
  };
  tick();
  retryTimer = setInterval(tick, 100);
}

function showTools() {
  const now = Date.now();
  const lines = [...runningTools.values()].map((tool) => `${tool.name} · running ${seconds(now - tool.since)}`);
  liveLine(lines.join("\n"));
}

// A tool as the page names it: its server's row, then its name.
function toolLabel(name) {
  return toolServers[name] ? `${toolServers[name]} · ${name}` : name;
}

function toolCalled(data, event) {
  const line = entry("tool", `tool ${toolLabel(data.name)} ${data.arguments || ""} · running`);
  runningTools.set(data.callId, { name: toolLabel(data.name), since: event.time, line });
  if (!toolTimer) toolTimer = setInterval(() => (runningTools.size ? showTools() : null), 200);
  showTools();
}

function toolAnswered(data, event) {
  const message = data.message || {};
  const call = message.toolCallId || (message.source && message.source.callId) || data.callId;
  const tool = runningTools.get(call);
  runningTools.delete(call);
  const code = data.error && data.error.code;
  const verdict = code === "TOOL_OUTCOME_UNKNOWN" ? "outcome unknown"
    : code === "TOOL_NOT_STARTED" ? "not started"
    : message.isError || (message.content || []).some((block) => block.isError) ? "error" : "result";
  const took = tool ? ` · ${seconds(event.time - tool.since)}` : "";
  const text = textOf(message.content) || textOf(((message.content || [])[0] || {}).content);
  const details = element("details", `entry tool ${verdict.replace(/ /g, "-")}`);
  details.append(element("summary", "", `tool ${tool ? tool.name : call} · ${verdict}${took}`),
    element("div", "", text.slice(0, 4000)));
  if (tool) tool.line.replaceWith(details);
  else place(details);
  if (runningTools.size === 0) {
    clearInterval(toolTimer);
    toolTimer = null;
    idleLine();
  }
}

function showDraft(text, whole) {
  if (!draft) {
    draft = element("div", "entry assistant draft", "");
    $("conversation").appendChild(draft);
  }
  draft.textContent = whole ? text : draft.textContent + text;
  scrollToEnd();
  if (!retryTimer && runningTools.size === 0) liveLine("");
}

function dropDraft() {
  if (draft) draft.remove();
  draft = null;
}

const renderers = {
  "user/message": (data) => data.source && data.source.kind === "user" && entry("user", textOf(data.content)),
  "assistant/message": (data) => {
    dropDraft();
    stopRetryLine();
    const message = data.message || {};
    const text = textOf(message.content);
    if (text) entry("assistant", text);
    const calls = (message.content || []).filter((block) => block.type === "tool-call");
    if (!text && calls.length === 0) entry("assistant empty", "(no text)");
  },
  "assistant/attempt": () => dropDraft(),
  "llm/retry": (data, event) => showRetry(event),
  "llm/retry-started": () => stopRetryLine(),
  "llm/retry-refused": (data) => entry("refused", `${data.row} refused the retry: ${data.reason}`),
  "tool/call": (data, event) => toolCalled(data, event),
  "tool/result": (data, event) => toolAnswered(data, event),
  "tool/task": (data) => entry("tool", `call ${data.callId} runs as task ${data.taskId}`),
  "tool/resolution": (data) => entry("tool", `the answer of call ${data.callId} was lost: ${data.rule} — ${data.reason}`),
  "route/switch": (data) => entry("hop", `failover: ${data.from || "?"} → ${data.to || "?"} (${data.code || ""})`),
  "session/end-seed": () => entry("mark", "the session was restored here and continued"),
  "turn/end": (data) => {
    dropDraft();
    stopRetryLine();
    const reason = data.reason || {};
    const error = reason.error ? ` ${reason.error.code || ""}: ${reason.error.message || ""}` : "";
    const by = reason.reason ? ` (${reason.reason.kind})` : "";
    entry(`end ${reason.kind === "error" ? "error" : ""}`, `turn ${data.turn} ${reason.kind}${by}${error}`);
  },
};

function render(line) {
  const event = JSON.parse(line);
  const renderer = renderers[event.type];
  if (renderer) renderer(event.data || {}, event);
  trajectoryChanged();
}

function setRunning(running) {
  current.running = running;
  $("session-state").textContent = running ? "running" : "idle";
  $("stop").disabled = !running;
  if (!running) {
    dropDraft();
    runningTools.clear();
    refreshSessions().catch(() => {});
  }
  if (!retryTimer) idleLine();
}

// Follows session `id`: its last RECENT_TURNS turns (`all`: every turn), then what it does live.
function follow(id, all) {
  if (current && current.source) current.source.close();
  clearInterval(retryTimer);
  retryTimer = null;
  dropDraft();
  runningTools.clear();
  $("conversation").replaceChildren();
  $("session-state").textContent = "";
  liveLine("");
  const started = performance.now();
  const since = all ? "" : `?turns=${RECENT_TURNS}`;
  const source = new EventSource(`/api/sessions/${encodeURIComponent(id)}/events${since}`);
  current = { id, source, running: false, profile: null };
  source.addEventListener("event", (message) => render(message.data));
  source.addEventListener("status", (message) => {
    if (!document.body.dataset.openedMs) document.body.dataset.openedMs = String(performance.now() - started);
    setRunning(JSON.parse(message.data).running);
  });
  source.addEventListener("text", (message) => {
    const { text, whole } = JSON.parse(message.data);
    if (text) showDraft(text, whole);
    else if (whole) dropDraft();
  });
  source.addEventListener("tools", (message) => { toolServers = JSON.parse(message.data); });
  source.addEventListener("note", (message) => entry("note", JSON.parse(message.data).text));
  source.addEventListener("attempt-end", (message) => {
    if (!JSON.parse(message.data).completed) dropDraft();
  });
  source.addEventListener("problem", (message) => showProblem(new Error(JSON.parse(message.data).error)));
  history.replaceState(null, "", `#${encodeURIComponent(id)}`);
  $("session-title").textContent = id;
  $("message").disabled = $("send").disabled = false;
  $("resume").hidden = false;
  for (const item of $("sessions").children) item.classList.toggle("selected", item.dataset.id === id);
  delete document.body.dataset.openedMs;
  api("GET", `/api/sessions/${encodeURIComponent(id)}`).then((summary) => {
    current.profile = summary.profile || null;
    $("session-profile").textContent = summary.profile ? `profile ${summary.profile}` : "";
    if (!all && summary.turns > RECENT_TURNS) showEarlierNote(id, summary.turns);
    if (visibleView() === "plugins") loadPlugins();
  }, () => {});
  resetTrajectory();
}

// Says how many earlier turns the chat leaves out, with a way to show them all.
function showEarlierNote(id, turns) {
  const note = element("div", "entry earlier", `The ${turns - RECENT_TURNS} turns before the last ${RECENT_TURNS} are not shown. `);
  const all = element("button", "", "Show every turn");
  all.type = "button";
  all.addEventListener("click", () => follow(id, true));
  note.append(all);
  $("conversation").prepend(note);
}

async function refreshSessions() {
  const { sessions } = await api("GET", "/api/sessions");
  const query = $("search").value.toLowerCase();
  const items = sessions
    .filter((s) => !query || s.id.toLowerCase().includes(query) || (s.firstPrompt || "").toLowerCase().includes(query))
    .map((s) => {
      const item = element("li");
      item.dataset.id = s.id;
      item.classList.toggle("selected", current && current.id === s.id);
      const title = element("span", "", `${s.profile || "-"} · ${s.turns} turn${s.turns === 1 ? "" : "s"} · ${s.lastEnd}`);
      item.append(title, element("span", "prompt", s.firstPrompt || s.id));
      item.addEventListener("click", () => follow(s.id));
      return item;
    });
  $("sessions").replaceChildren(...items);
}

async function send(event) {
  event.preventDefault();
  const text = $("message").value;
  if (!text.trim() || !current) return;
  try {
    await api("POST", sessionPath("/prompt"), { text });
    $("message").value = "";
    showProblem(null);
  } catch (error) {
    showProblem(error);
  }
}

async function newSession(event) {
  event.preventDefault();
  const body = { profile: $("new-profile").value, provider: $("new-provider").value, model: $("new-model").value };
  try {
    const { id } = await api("POST", "/api/sessions", body);
    await refreshSessions();
    follow(id);
    showProblem(null);
  } catch (error) {
    showProblem(error);
  }
}

// ---- Views --------------------------------------------------------------------------------

function visibleView() {
  return document.querySelector("#tabs .active").dataset.view;
}

function showView(view) {
  for (const tab of document.querySelectorAll("#tabs button")) tab.classList.toggle("active", tab.dataset.view === view);
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== `view-${view}`;
  if (view === "trajectory") loadTrajectory();
  if (view === "plugins") loadPlugins();
}

// ---- Trajectory ---------------------------------------------------------------------------

let trajectory = null; // { total, start, end, pages: Map(page -> {spans, turns}), loading: Set }
let trajectoryTimer = null;

function resetTrajectory() {
  trajectory = null;
  $("trajectory-spacer").replaceChildren();
  $("span-events").hidden = true;
  if (visibleView() === "trajectory") loadTrajectory();
}

function trajectoryChanged() {
  if (visibleView() !== "trajectory" || trajectoryTimer) return;
  trajectoryTimer = setTimeout(() => {
    trajectoryTimer = null;
    if (trajectory) trajectory.pages.clear();
    loadTrajectory();
  }, 500);
}

async function fetchPage(page) {
  const answer = await api("GET", sessionPath(`/trajectory?offset=${page * WINDOW_SPANS}&limit=${WINDOW_SPANS}`));
  if (!trajectory) trajectory = { pages: new Map(), loading: new Set() };
  Object.assign(trajectory, { total: answer.total, start: answer.start, end: answer.end });
  trajectory.pages.set(page, { spans: answer.spans, turns: answer.turns });
  if (answer.overview) drawOverview(answer.overview, (answer.end - answer.start) / answer.overview.length);
  return answer;
}

async function loadTrajectory() {
  if (!current) return;
  try {
    const started = performance.now();
    await fetchPage(0);
    $("trajectory-spacer").style.height = `${trajectory.total * ROW_HEIGHT}px`;
    const duration = seconds(trajectory.end - trajectory.start);
    $("trajectory-summary").textContent = `${trajectory.total} rows · ${duration} from the first event to the last`;
    drawSpans();
    document.body.dataset.trajectoryMs = String(performance.now() - started);
  } catch (error) {
    showProblem(error);
  }
}

// Each slice of the session's time as a bar: how much of it went to model attempts, retry waits
// and tools (several tools at once may fill more than the slice).
function drawOverview(slices, sliceMs) {
  const canvas = $("overview");
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  const most = Math.max(sliceMs, ...slices.map((slice) => slice[0] + slice[1] + slice[2]), 1);
  const width = canvas.width / slices.length;
  const colours = ["#4a78d8", "#e0a000", "#3c9a5f"];
  slices.forEach((slice, index) => {
    let bottom = canvas.height;
    slice.forEach((ms, column) => {
      const height = (ms / most) * canvas.height;
      context.fillStyle = colours[column];
      context.fillRect(index * width, bottom - height, Math.max(width - 1, 1), height);
      bottom -= height;
    });
  });
}

function spanAt(index) {
  const page = trajectory.pages.get(Math.floor(index / WINDOW_SPANS));
  if (!page) return null;
  const span = page.spans[index % WINDOW_SPANS];
  return span ? { span, axis: page.turns[String(span.turn)] } : null;
}

function drawSpans() {
  if (!trajectory) return;
  const box = $("trajectory-rows");
  const first = Math.max(0, Math.floor(box.scrollTop / ROW_HEIGHT) - 5);
  const last = Math.min(trajectory.total, first + Math.ceil(box.clientHeight / ROW_HEIGHT) + 10);
  const rows = [];
  for (let index = first; index < last; index += 1) {
    const found = spanAt(index);
    if (!found) {
      requestPage(Math.floor(index / WINDOW_SPANS));
      continue;
    }
    rows.push(spanRow(found.span, found.axis, index));
  }
  $("trajectory-spacer").replaceChildren(...rows);
}

function requestPage(page) {
  if (trajectory.loading.has(page)) return;
  trajectory.loading.add(page);
  fetchPage(page).then(drawSpans, showProblem).finally(() => trajectory && trajectory.loading.delete(page));
}

function spanRow(span, axis, index) {
  const row = element("div", `span-row lane-${span.lane} kind-${span.kind}`);
  row.dataset.kind = span.kind;
  row.style.top = `${index * ROW_HEIGHT}px`;
  const end = span.end == null ? Math.max(trajectory.end, Date.now()) : span.end;
  const label = element("span", "span-label", `${span.step ? "  " : ""}${span.label}`);
  label.title = [span.label, span.detail, span.outcome].filter(Boolean).join("\n");
  const lane = element("span", "span-lane");
  const [from, to] = [axis ? axis[0] : trajectory.start, axis && axis[1] != null ? axis[1] : end];
  const scale = (time) => `${Math.min(100, Math.max(0, ((time - from) / Math.max(to - from, 1)) * 100))}%`;
  if (span.firstToken != null) lane.append(bar("bar ttft", span.start, span.firstToken, scale), bar("bar", span.firstToken, end, scale));
  else lane.append(bar(span.end === span.start ? "point" : "bar", span.start, end, scale));
  const timing = element("span", "span-time", spanTiming(span, end));
  row.append(label, lane, timing);
  row.addEventListener("click", () => openEvents(span));
  return row;
}

function bar(className, start, end, scale) {
  const made = element("span", className);
  made.style.left = scale(start);
  made.style.width = `calc(${scale(end)} - ${scale(start)})`;
  return made;
}

function spanTiming(span, end) {
  const parts = [];
  if (span.firstToken != null) {
    parts.push(`TTFT ${seconds(span.firstToken - span.start)}`, `decoding ${seconds(end - span.firstToken)}`);
  } else if (span.end !== span.start) {
    parts.push(seconds(end - span.start));
  }
  if (span.kind === "wait" && span.retryAfterMs != null) parts.push(`Retry-After ${seconds(span.retryAfterMs)}`);
  if (span.outcome) parts.push(span.outcome);
  if (span.end == null) parts.push("running");
  return parts.join(" · ");
}

async function openEvents(span) {
  const [from, to] = [span.seqs[0], Math.min(span.seqs[1], span.seqs[0] + 1999)];
  try {
    const { events } = await api("GET", sessionPath(`/log?from=${from}&to=${to}`));
    const panel = $("span-events");
    panel.textContent = `${span.label} — events ${from}…${to}\n\n` + events.map((e) => JSON.stringify(e, null, 1)).join("\n");
    panel.hidden = false;
  } catch (error) {
    showProblem(error);
  }
}

// ---- Plugins and routes -------------------------------------------------------------------

let explained = null;

// The profile the plugins page shows: the one chosen there, else the session's, else the one
// new sessions run with.
function pluginsProfile() {
  const select = $("plugins-profile");
  if (!select.dataset.chosen && current && current.profile) return current.profile;
  return (select.dataset.chosen && select.value) || $("new-profile").value;
}

async function loadPlugins() {
  const profile = pluginsProfile();
  if (!profile) return;
  $("plugins-profile").value = profile;
  const load = async (path, draw) => draw(await api("GET", profilePath(profile, path)));
  const loads = [load("/waterfall", drawWaterfall), load("/rows", drawProfileRows), load("/plugins", drawPackages),
    load("/explain", (answer) => { explained = answer; drawExplain(); })];
  const failed = (await Promise.allSettled(loads)).find((outcome) => outcome.status === "rejected");
  showProblem(failed ? failed.reason : null);
}

function drawWaterfall(listeners) {
  $("waterfall").replaceChildren(...listeners.map((l) => element("li", "", `${l.row} (${l.package})`)));
}

function drawProfileRows({ rows }) {
  const body = $("rows").tBodies[0];
  body.replaceChildren(...rows.map((row) => {
    const line = element("tr");
    line.dataset.row = row.id;
    const enabled = !row.disabled;
    const toggle = element("button", "", enabled ? "Disable" : "Enable");
    toggle.type = "button";
    toggle.addEventListener("click", () => changeProfile("POST", `/rows/${encodeURIComponent(row.id)}`, { enabled: !enabled }));
    line.append(element("td", "", row.id), element("td", "", row.name || ""), element("td", "", enabled ? "on" : "off"), element("td"));
    line.lastChild.append(toggle);
    return line;
  }));
}

function drawPackages({ packages }) {
  $("packages").replaceChildren(...packages.map((p) => {
    const item = element("li", "", `${p.name} ${p.version || ""} · ${p.source}${p.error ? ` · ${p.error}` : ""} `);
    if (p.removable) {
      const remove = element("button", "", "Remove");
      remove.type = "button";
      remove.addEventListener("click", () => changeProfile("DELETE", `/plugins/${encodeURIComponent(p.name)}`));
      item.append(remove);
    }
    return item;
  }));
}

function drawExplain() {
  if (!explained) return;
  const codes = [...new Set(explained.routes.flatMap((route) => Object.keys(route.codes || {})))];
  const select = $("explain-code");
  const chosen = select.value || codes[0];
  select.replaceChildren(...codes.map((code) => Object.assign(element("option", "", code), { value: code })));
  select.value = chosen;
  $("explain").tBodies[0].replaceChildren(...explained.routes.map((route) => {
    const handling = (route.codes || {})[chosen] || {};
    const delays = handling.delaysMs ? handling.delaysMs.map(seconds).join(", ") + (handling.unbounded ? ", then ∞" : "") : "";
    const line = element("tr");
    line.append(element("td", "", route.provider), element("td", "", handling.row || "no listener"),
      element("td", "", handling.action || "gives up"), element("td", "", delays));
    return line;
  }));
}

async function changeProfile(method, path, body) {
  try {
    await api(method, profilePath(pluginsProfile(), path), body);
    await loadPlugins();
  } catch (error) {
    showProblem(error);
  }
}

async function replay(event) {
  event.preventDefault();
  if (!current) return;
  try {
    const body = { profile: $("replay-profile").value, layer: $("replay-layer").value };
    const { candidate, results } = await api("POST", sessionPath("/replay"), body);
    drawReplay(candidate, results);
    showProblem(null);
  } catch (error) {
    showProblem(error);
  }
}

function drawReplay(candidate, results) {
  const head = element("tr");
  for (const title of ["turn", "recorded", "the session's configuration", candidate]) head.append(element("th", "", title));
  $("replay").tHead.replaceChildren(head);
  const cell = (result) => {
    if (!result) return "";
    const waits = (result.waitsMs || []).map(seconds).join(", ");
    return `${result.outcome} · ${result.attempts} attempts${waits ? ` · waits ${waits}` : ""}`;
  };
  const turns = results.filter((line) => line.turn != null);
  $("replay").tBodies[0].replaceChildren(...turns.map((turn) => {
    const line = element("tr");
    const [own, other] = turn.candidates || [];
    line.append(element("td", "", String(turn.turn)), element("td", "", cell(turn.recorded)),
      element("td", "", cell(own)), element("td", "", cell(other)));
    return line;
  }));
}

async function loadProfiles() {
  const answer = await api("GET", "/api/profiles");
  const { profiles } = answer;
  const names = profiles.map((profile) => profile.name);
  for (const select of [$("new-profile"), $("plugins-profile"), $("replay-profile")]) {
    const keep = select.id === "replay-profile" ? [select.options[0]] : [];
    const chosen = select.value;
    select.replaceChildren(...keep, ...names.map((name) => Object.assign(element("option", "", name), { value: name })));
    if (chosen) select.value = chosen;
  }
  if (!$("new-profile").dataset.chosen) $("new-profile").value = answer.default;
}

// ---- Wiring -------------------------------------------------------------------------------

$("composer").addEventListener("submit", send);
$("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) send(event);
});
$("stop").addEventListener("click", () => api("POST", sessionPath("/cancel")).catch(showProblem));
$("resume").addEventListener("click", () => api("POST", sessionPath("/resume")).then(() => showProblem(null), showProblem));
$("new-session-form").addEventListener("submit", newSession);
$("new-profile").addEventListener("change", () => { $("new-profile").dataset.chosen = "1"; });
$("search").addEventListener("input", () => refreshSessions().catch(showProblem));
for (const tab of document.querySelectorAll("#tabs button")) tab.addEventListener("click", () => showView(tab.dataset.view));
$("trajectory-rows").addEventListener("scroll", drawSpans);
$("plugins-profile").addEventListener("change", () => {
  $("plugins-profile").dataset.chosen = "1";
  loadPlugins();
});
$("explain-code").addEventListener("change", drawExplain);
$("add-package").addEventListener("submit", (event) => {
  event.preventDefault();
  changeProfile("POST", "/plugins", { package: $("package-name").value.trim() });
});
$("replay-form").addEventListener("submit", replay);
loadProfiles().catch(showProblem);
refreshSessions().catch(showProblem);
const followHash = () => {
  const id = decodeURIComponent(location.hash.slice(1));
  if (id && (!current || current.id !== id)) follow(id);
};
window.addEventListener("hashchange", followHash);
followHash();
setInterval(() => refreshSessions().catch(() => {}), 5000);
