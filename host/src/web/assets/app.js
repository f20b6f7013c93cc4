// dsh web: the page. Everything a provider, a tool or a log says is shown as text (textContent),
// never as HTML. The page follows a session through /api/sessions/{id}/events; the browser's
// EventSource reconnects with Last-Event-ID, so a reload or a dropped connection loses nothing.
"use strict";

const $ = (id) => document.getElementById(id);
let current = null;   // { id, source, running }
let retryTimer = null;

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

function showProblem(error) {
  $("problem").textContent = error ? String(error.message || error) : "";
  $("problem").hidden = !error;
}

function entry(kind, text) {
  const element = document.createElement("div");
  element.className = `entry ${kind}`;
  element.textContent = text;
  $("conversation").appendChild(element);
  element.scrollIntoView({ block: "end" });
  return element;
}

function textOf(content) {
  return (content || []).filter((block) => block.type === "text").map((block) => block.text).join("");
}

function retryCount(data) {
  return `${data.retry}/${data.maxRetries == null ? "∞" : data.maxRetries}`;
}

function seconds(ms) {
  return ms >= 10000 ? `${Math.ceil(ms / 1000)}s` : `${(Math.max(ms, 0) / 1000).toFixed(1)}s`;
}

function liveLine(text) {
  $("live-line").textContent = text || "";
  $("live-line").hidden = !text;
}

function stopRetryLine() {
  clearInterval(retryTimer);
  retryTimer = null;
  liveLine(current && current.running ? "waiting for the model…" : "");
}

function showRetry(event) {
  const data = event.data;
  const until = event.time + data.delayMs;
  const failure = data.failure || {};
  const details = document.createElement("details");
  details.className = "entry retry";
  const summary = document.createElement("summary");
  summary.textContent = `Retrying model request (${retryCount(data)}) · ${seconds(data.delayMs)}`;
  const more = document.createElement("div");
  more.textContent = `${failure.code || "?"}: ${failure.message || ""} · delay ${seconds(data.delayMs)}` +
    (failure.retryAfterMs != null ? ` · Retry-After ${seconds(failure.retryAfterMs)}` : "");
  details.append(summary, more);
  $("conversation").appendChild(details);
  clearInterval(retryTimer);
  const tick = () => {
    const left = until - Date.now();
    if (left <= 0) return stopRetryLine();
    liveLine(`Retrying model request (${retryCount(data)}) · ${seconds(left)}`);
  };
  tick();
  retryTimer = setInterval(tick, 100);
}

const renderers = {
  "user/message": (data) => data.source && data.source.kind === "user" && entry("user", textOf(data.content)),
  "assistant/message": (data) => {
    stopRetryLine();
    const text = textOf(data.message && data.message.content);
    if (text) entry("assistant", text);
  },
  "llm/retry": (data, event) => showRetry(event),
  "llm/retry-started": () => stopRetryLine(),
  "tool/call": (data) => entry("tool", `tool ${data.name} ${data.arguments || ""} · running`),
  "tool/result": (data) => {
    const message = data.message || {};
    const failed = message.isError || (message.source && message.source.error);
    entry("tool", `${failed ? "tool error" : "tool result"}: ${textOf(message.content).slice(0, 2000)}`);
  },
  "route/switch": (data) => entry("hop", `failover: ${data.from || "?"} → ${data.to || "?"} (${data.code || ""})`),
  "turn/end": (data) => {
    stopRetryLine();
    const reason = data.reason || {};
    const error = reason.error ? ` ${reason.error.code || ""}: ${reason.error.message || ""}` : "";
    entry(`end ${reason.kind === "error" ? "error" : ""}`, `turn ${data.turn} ${reason.kind}${error}`);
  },
};

function render(line) {
  const event = JSON.parse(line);
  const renderer = renderers[event.type];
  if (renderer) renderer(event.data || {}, event);
}

function setRunning(running) {
  current.running = running;
  $("session-state").textContent = running ? "running" : "idle";
  $("stop").disabled = !running;
  if (running && !retryTimer) liveLine("waiting for the model…");
  if (!running) stopRetryLine();
}

function follow(id) {
  if (current && current.source) current.source.close();
  clearInterval(retryTimer);
  $("conversation").replaceChildren();
  liveLine("");
  current = { id, source: new EventSource(`/api/sessions/${encodeURIComponent(id)}/events`), running: false };
  current.source.addEventListener("event", (message) => render(message.data));
  current.source.addEventListener("status", (message) => setRunning(JSON.parse(message.data).running));
  current.source.addEventListener("problem", (message) => showProblem(new Error(JSON.parse(message.data).error)));
  $("session-title").textContent = id;
  $("message").disabled = $("send").disabled = false;
  $("resume").hidden = false;
  for (const item of $("sessions").children) item.classList.toggle("selected", item.dataset.id === id);
}

async function refreshSessions() {
  const { sessions } = await api("GET", "/api/sessions");
  const query = $("search").value.toLowerCase();
  const items = sessions
    .filter((s) => !query || s.id.toLowerCase().includes(query) || (s.firstPrompt || "").toLowerCase().includes(query))
    .map((s) => {
      const item = document.createElement("li");
      item.dataset.id = s.id;
      item.classList.toggle("selected", current && current.id === s.id);
      const title = document.createElement("span");
      title.textContent = `${s.profile || "-"} · ${s.turns} turn${s.turns === 1 ? "" : "s"} · ${s.lastEnd}`;
      const prompt = document.createElement("span");
      prompt.className = "prompt";
      prompt.textContent = s.firstPrompt || s.id;
      item.append(title, prompt);
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
    await api("POST", `/api/sessions/${encodeURIComponent(current.id)}/prompt`, { text });
    $("message").value = "";
    showProblem(null);
  } catch (error) {
    showProblem(error);
  }
}

$("composer").addEventListener("submit", send);
$("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) send(event);
});
$("stop").addEventListener("click", () =>
  api("POST", `/api/sessions/${encodeURIComponent(current.id)}/cancel`).catch(showProblem));
$("resume").addEventListener("click", () =>
  api("POST", `/api/sessions/${encodeURIComponent(current.id)}/resume`).then(() => showProblem(null), showProblem));
$("new-session").addEventListener("click", async () => {
  try {
    const { id } = await api("POST", "/api/sessions", {});
    await refreshSessions();
    follow(id);
  } catch (error) {
    showProblem(error);
  }
});
$("search").addEventListener("input", () => refreshSessions().catch(showProblem));
refreshSessions().catch(showProblem);
setInterval(() => refreshSessions().catch(() => {}), 5000);
