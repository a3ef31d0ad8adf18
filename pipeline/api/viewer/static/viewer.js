// polar-rollout trajectory viewer: tasks -> sessions -> traces, read from /viewer/api/*.
// Everything from a trajectory is untrusted model or tool output: it only ever reaches the page
// as text nodes (textContent, createTextNode), never as markup.
"use strict";

// The heat scale of trainable tokens: absolute, by the probability the policy gave the token
// (logprob bounds are log(p)), so colours mean the same in every trace.
const HEAT = [[Math.log(0.9), "h0", "p ≥ 0.9"], [Math.log(0.5), "h1", "≥ 0.5"], [Math.log(0.1), "h2", "≥ 0.1"],
              [Math.log(0.01), "h3", "≥ 0.01"], [Math.log(1e-4), "h4", "≥ 1e-4"], [-Infinity, "h5", "< 1e-4"]];
const STAGES = ["QUEUE", "INIT", "READY", "RUN", "POSTRUN", "EVAL_RUNTIME", "EVALUATE", "CALLBACK"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = String(v);
    else if (k === "title") node.title = String(v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const present = (nodes) => nodes.flat().filter((n) => n !== null && n !== undefined && n !== false);
const show = (...nodes) => document.getElementById("view").replaceChildren(...present(nodes));
const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "–");
const hash = (...parts) => "#" + parts.map(encodeURIComponent).join("/");
const badge = (status) => el("span", {class: `badge ${status}`, text: status});
const fact = (name, value) => el("span", {}, el("b", {text: name}),
                                 value === null || value === undefined ? "–" : value);
const table = (id, heads, rows) => el("table", {id}, el("tr", {}, heads.map((h) => el("th", {text: h}))), rows);

class Unauthorized extends Error {}

async function api(path) {
  const resp = await fetch(path, {credentials: "same-origin", headers: {Accept: "application/json"}});
  if (resp.status === 401) throw new Unauthorized();
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error((body.error && body.error.message) || `${resp.status} ${resp.statusText}`);
  return body;
}

function crumbs(...items) {
  document.getElementById("crumbs").replaceChildren(...items.flatMap((item, i) => (i ? [" / ", item] : [item])));
}

// --- login ----------------------------------------------------------------------------------

function showLogin(message) {
  document.getElementById("login").hidden = false;
  document.getElementById("logout").hidden = true;
  show();
  crumbs();
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("token").focus();
  document.body.dataset.ready = "login";
}

async function login(event) {
  event.preventDefault();
  const input = document.getElementById("token");
  const resp = await fetch("/viewer/session", {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({token: input.value})});
  input.value = "";
  if (!resp.ok) { showLogin(resp.status === 401 ? "Wrong token." : `Login failed (${resp.status}).`); return; }
  document.getElementById("login").hidden = true;
  route();
}

async function logout() {
  await fetch("/viewer/session", {method: "DELETE", credentials: "same-origin"});
  showLogin("Logged out.");
}

// --- pages ----------------------------------------------------------------------------------

async function tasksPage() {
  const {tasks} = await api("/viewer/api/tasks");
  crumbs("tasks");
  const rows = tasks.map((t) => el("tr", {},
    el("td", {}, el("a", {href: hash("task", t.task_id), class: "task-link", text: t.task_id})),
    el("td", {}, badge(t.status)), el("td", {text: `${t.finished_sessions}/${t.total_sessions}`}),
    el("td", {text: t.group_id || ""}), el("td", {text: when(t.created_at)})));
  show(el("h2", {text: "Recent tasks"}), tasks.length
    ? table("tasks", ["task", "status", "sessions", "group", "created"], rows)
    : el("p", {class: "hint", text: "No tasks yet."}));
}

async function taskPage(taskId) {
  const t = await api(`/viewer/api/task/${encodeURIComponent(taskId)}`);
  crumbs(el("a", {href: "#", text: "tasks"}), taskId);
  const rows = t.sessions.map((s) => el("tr", {},
    el("td", {text: s.sample_index}),
    el("td", {}, el("a", {href: hash("session", s.session_id), class: "session-link", text: s.session_id})),
    el("td", {}, badge(s.status)), el("td", {text: fmt(s.reward)}), el("td", {text: s.num_traces}),
    el("td", {text: `${s.trainable_tokens} / ${s.response_tokens}`}),
    el("td", {text: fmt(s.durations_ms && s.durations_ms.total, 0)}),
    el("td", {class: "error", text: s.error || ""})));
  show(
    el("h2", {}, "Task ", el("span", {class: "mono", text: taskId}), " ", badge(t.status)),
    el("div", {class: "facts"}, fact("builder", t.builder), fact("harness", t.harness || "custom"),
       fact("model", t.model_name), fact("sessions", `${t.finished_sessions}/${t.total_sessions}`),
       fact("created", when(t.created_at))),
    el("details", {}, el("summary", {text: "instruction"}), el("pre", {class: "prompt-text", text: t.instruction})),
    table("sessions", ["#", "session", "status", "reward", "traces", "trainable / response tokens", "total ms",
                       "error"], rows));
}

function textSource(d) {
  if (!d.enabled) return "records only (detokenize off)";
  if (d.failed) return "records; ids elsewhere (engine unreachable)";
  return d.used ? "records + engine /detokenize" : "records";
}

async function sessionPage(sessionId, traceIndex) {
  const s = await api(`/viewer/api/session/${encodeURIComponent(sessionId)}`);
  crumbs(el("a", {href: "#", text: "tasks"}), el("a", {href: hash("task", s.task_id), text: s.task_id}), sessionId);
  const rec = s.reconstruction || {};
  const index = Math.min(Math.max(Number(traceIndex) || 0, 0), Math.max(s.traces.length - 1, 0));
  const open = (i) => { location.hash = hash("session", sessionId, "trace", String(i)); };
  const picker = el("div", {class: "trace-picker", id: "traces"}, s.traces.map((t) => el("button", {
    type: "button", class: t.index === index ? "selected trace-button" : "trace-button", "data-trace": t.index,
    text: `trace ${t.index} · ${t.response_len} tokens${t.drifted_turns.length ? " · drift" : ""}`,
    onclick: () => open(t.index)})));
  show(
    el("h2", {}, "Session ", el("span", {class: "mono", text: sessionId}), " ",
       el("span", {id: "status"}, badge(s.status))),
    el("div", {class: "facts"}, el("span", {}, el("b", {text: "reward"}),
                                   el("span", {class: "reward", id: "reward", text: fmt(s.reward)})),
       fact("sample", s.sample_index), fact("builder", s.builder), fact("chains", rec.chains_total),
       fact("drifted turns", rec.drifted_turns), fact("truncated turns", rec.truncated_turns),
       fact("source", s.source), fact("token text", textSource(s.detokenize))),
    s.error ? el("p", {class: "error", text: s.error}) : null,
    s.trajectory_error ? el("p", {class: "error", text: s.trajectory_error}) : null,
    el("h2", {text: "Timeline"}), timeline(s.timeline, open), stageKey(s.timeline),
    el("h2", {text: `Traces (${s.traces.length})`}),
    s.traces.length ? [picker, traceView(s.traces[index])] : el("p", {class: "hint", text: "No traces."}),
    Object.keys(s.evaluation || {}).length ? el("details", {}, el("summary", {text: "evaluation"}),
      el("pre", {class: "prompt-text", text: JSON.stringify(s.evaluation, null, 2)})) : null);
}

// --- timeline -------------------------------------------------------------------------------

// Where a moment of the session sits on the lanes, in percent. Linear between the stages'
// boundaries, but every stretch between two boundaries gets at least MIN_SHARE of the lane: a 3 ms
// INIT beside a 30 s RUN would otherwise be a sliver no one can see or hover. Model calls go
// through the same map, so they stay inside the stage they happened in.
const MIN_SHARE = 0.025;

function laneScale(tl) {
  const span = Math.max(tl.end || 0, 1e-3);
  const knots = [...new Set([0, span, ...tl.stages.flatMap((st) => [st.start, st.end])])]
    .filter((t) => t >= 0 && t <= span).sort((a, b) => a - b);
  const at = [0];  // display position of each knot
  for (let i = 1; i < knots.length; i++) at.push(at[i - 1] + Math.max(knots[i] - knots[i - 1], MIN_SHARE * span));
  const total = at[at.length - 1];
  return (t) => {
    const c = Math.min(Math.max(t, 0), span);
    let i = 1;
    while (i < knots.length - 1 && knots[i] < c) i++;
    const [a, b] = [knots[i - 1], knots[i]];
    const f = b > a ? (c - a) / (b - a) : 0;
    return (100 * (at[i - 1] + f * (at[i] - at[i - 1]))) / total;
  };
}

function timeline(tl, openTrace) {
  const x = laneScale(tl);
  const place = (node, a, b) => {
    node.style.left = `${x(a)}%`;  // CSSOM, not a style attribute: allowed by the CSP
    node.style.width = `${Math.max(x(b) - x(a), 0)}%`;
    return node;
  };
  const lane = (label, id, items) => el("div", {class: "lane", id},
                                        el("span", {class: "lane-label", text: label}), items);
  const ms = (a, b) => `${fmt((b - a) * 1000, 0)} ms`;
  const bars = tl.stages.map((st) => place(el("div", {class: `bar ${STAGES.includes(st.stage) ? st.stage : ""}`,
    title: `${st.stage}: ${fmt(st.start, 2)} s → ${fmt(st.end, 2)} s (${ms(st.start, st.end)})`, text: st.stage}),
    st.start, st.end));
  const calls = tl.calls.map((c) => place(el("div", {class: "call",
    title: `${c.provider}${c.stream ? " (stream)" : ""} ${c.model || ""}: ${c.prompt_tokens} prompt + ` +
      `${c.response_tokens} response tokens, ${fmt(c.latency_ms, 0)} ms upstream, ${c.finish_reason || ""}` +
      (c.trace !== null ? ` · trace ${c.trace}, turn ${c.turn}` : ""),
    onclick: c.trace !== null ? () => openTrace(c.trace) : null}), c.start, c.end));
  const failed = tl.errors.map((e) => place(el("div", {class: "call failed",
    title: `${e.status_code} ${e.error_type}: ${e.message}`}), e.start, e.end));
  return el("div", {class: "timeline", id: "timeline"},
    lane("stages", "lane-stages", bars), lane(`model calls (${tl.calls.length})`, "lane-calls", calls),
    tl.errors.length ? lane(`failed calls (${tl.errors.length})`, "lane-errors", failed) : null,
    el("div", {class: "axis"}, el("span", {text: "0 s"}),
      el("span", {text: "short stages and the waits between them are widened to be seen; hover a bar for its times"}),
      el("span", {text: `${fmt(tl.end, 2)} s`})));
}

function stageKey(tl) {
  return el("div", {class: "legend", id: "stage-key"},
    tl.stages.map((st) => el("span", {}, el("span", {class: `swatch bar-key ${st.stage}`}),
                             `${st.stage} ${fmt((st.end - st.start) * 1000, 0)} ms`)),
    tl.calls.length ? el("span", {}, el("span", {class: "swatch bar-key call-key"}), "model call (upstream)") : null);
}

// --- one trace ------------------------------------------------------------------------------

function heat(logprob) {
  if (logprob === null || logprob === undefined) return "noscore";
  return HEAT.find(([bound]) => logprob >= bound)[1];
}

function legend() {
  return el("div", {class: "legend", id: "legend"},
    el("span", {}, el("span", {class: "swatch tok train h0", text: "abc"}), "trainable (sampled; underlined)"),
    el("span", {}, el("span", {class: "swatch tok masked", text: "abc"}), "masked (not trained)"),
    el("span", {}, "probability of the sampled token: ",
       HEAT.map(([, cls, label]) => el("span", {class: `swatch tok train ${cls}`, text: label}))),
    el("span", {}, el("span", {class: "label tool", text: "tool call"})),
    el("span", {}, el("span", {class: "label inter", text: "interstitial"}), "template / tool result"),
    el("span", {}, el("span", {class: "badge drift", text: "drifted"}), "training context ≠ sampled context"));
}

function tokenSpan(tokens, i) {
  const text = tokens.text[i];
  const trainable = tokens.trainable[i];
  const cls = ["tok", trainable ? `train ${heat(tokens.logprob[i])}` : "masked", text === null ? "id" : ""];
  return el("span", {class: cls.join(" "), "data-i": i, text: text === null ? `[${tokens.ids[i]}]` : text,
    title: `#${i} id ${tokens.ids[i]}${trainable ? ` logprob ${fmt(tokens.logprob[i], 4)}` : " masked"}`});
}

function tokenRun(trace, start, end) {
  const box = el("div", {class: "tokens"});
  const spans = trace.spans.filter((s) => s.start < end && s.end > start);
  let i = start;
  while (i < end) {
    const span = spans.find((s) => s.start === i);
    if (span) {
      const wrap = el("span", {class: "toolcall", "data-span": "tool_call"},
                      el("span", {class: "label tool", text: "tool call"}));
      for (; i < Math.min(span.end, end); i++) wrap.append(tokenSpan(trace.tokens, i));
      box.append(wrap);
    } else {
      box.append(tokenSpan(trace.tokens, i++));
    }
  }
  return box;
}

function segmentView(trace, seg) {
  const end = seg.start + seg.len;
  if (seg.kind === "interstitial") {
    // Interstitial tokens carry no text of their own: the span decoded by the engine, else ids.
    const perToken = trace.tokens.text.slice(seg.start, end).every((t) => t !== null);
    const body = perToken || seg.text === null || seg.text === undefined ? tokenRun(trace, seg.start, end)
      : el("div", {class: "tokens"}, el("span", {class: "masked-block", text: seg.text}));
    return el("div", {class: "segment interstitial"}, el("div", {class: "segment-head"},
      el("span", {class: "label inter", text: "interstitial"}), el("span", {text: `${seg.len} tokens, masked`})), body);
  }
  if (seg.kind === "turn") {
    const drift = seg.drifted ? el("span", {class: "badge drift", text: "drifted", title: "An earlier turn was " +
      "re-rendered differently in this turn's prompt: the trainer scores this turn in a context the policy did " +
      "not sample it in."}) : null;
    const head = el("div", {class: "segment-head"}, el("b", {text: `turn ${seg.turn}`}),
      el("span", {text: `${seg.len} tokens`}),
      seg.finish_reason ? el("span", {text: `finish ${seg.finish_reason}`}) : null,
      seg.tool_calls.length ? el("span", {text: `tool calls: ${seg.tool_calls.join(", ")}`}) : null,
      seg.completion_id ? el("span", {class: "mono", text: seg.completion_id}) : null, drift);
    return el("div", {class: `segment turn${seg.drifted ? " drifted" : ""}`, "data-turn": seg.turn},
              head, tokenRun(trace, seg.start, end));
  }
  return el("div", {class: "segment other"}, el("div", {class: "segment-head", text: `${seg.len} tokens`}),
            tokenRun(trace, seg.start, end));
}

function traceView(t) {
  const promptText = t.prompt.text === null ? "(no text: the engine could not detokenize it)" : t.prompt.text;
  return el("div", {id: "trace", "data-trace": t.index},
    el("div", {class: "facts"}, fact("trace", t.index), fact("reward", fmt(t.reward)), fact("finish", t.finish_reason),
       fact("prompt tokens", t.prompt.len), fact("response tokens", t.response_len),
       fact("trainable", t.trainable_count), fact("masked", t.masked_count),
       fact("drift", t.drifted_turns.length ? `turn ${t.drifted_turns.join(", ")}` : "none")),
    legend(),
    el("details", {class: "prompt"}, el("summary", {text: `prompt (${t.prompt.len} tokens, masked)`}),
       el("div", {class: "prompt-text", text: promptText})),
    el("div", {id: "response"}, t.segments.map((seg) => segmentView(t, seg))));
}

// --- routing --------------------------------------------------------------------------------

async function route() {
  const parts = location.hash.replace(/^#/, "").split("/").filter(Boolean).map(decodeURIComponent);
  try {
    document.getElementById("login").hidden = true;
    if (parts[0] === "task" && parts[1]) await taskPage(parts[1]);
    else if (parts[0] === "session" && parts[1]) await sessionPage(parts[1], parts[3]);
    else await tasksPage();
    document.getElementById("logout").hidden = false;
    document.body.dataset.ready = location.hash || "#";  // what the browser test waits for
  } catch (err) {
    if (err instanceof Unauthorized) { showLogin(); return; }
    show(el("p", {class: "error", id: "page-error", text: String(err.message || err)}));
    document.body.dataset.ready = "error";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", login);
  document.getElementById("logout").addEventListener("click", logout);
  window.addEventListener("hashchange", route);
  route();
});
