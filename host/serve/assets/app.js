// The run inspector's pages: the runs list, a run page and the sign-in
// page. Plain JavaScript over the JSON API and its server-sent events;
// nothing is loaded from anywhere else, and the pages hold no inline
// script or handler (the server's Content-Security-Policy runs only this
// file).
"use strict";

const $ = (sel, root) => (root || document).querySelector(sel);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    // Through the CSSOM: a `style` attribute is inline style, which the
    // pages' policy refuses.
    else if (k === "style") Object.assign(node.style, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function when(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

function micros(us) {
  if (us >= 1e6) return (us / 1e6).toFixed(2) + " s";
  if (us >= 1e3) return (us / 1e3).toFixed(1) + " ms";
  return us + " µs";
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

// A server started with a token needs it with every request. The page
// asks for it once and sends it to /api/session, which answers with an
// HttpOnly cookie the browser then sends by itself: the token is never
// kept where a script (or anything a run wrote) could read it.
async function session() {
  const response = await fetch("/api/session", { headers: { Accept: "application/json" } });
  const state = await response.json();
  const form = $("#signin");
  const out = $("#signout");
  form.hidden = !state.token_required || state.signed_in;
  out.hidden = !state.token_required || !state.signed_in;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api("POST", "/api/session", { token: $("#token").value });
      $("#token").value = "";
      location.reload();
    } catch (e) {
      $("#signin-result").textContent = e.message;
    }
  });
  out.addEventListener("click", async () => {
    await api("DELETE", "/api/session");
    location.reload();
  });
  return state;
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({ error: "the server answered " + response.status }));
  if (!response.ok) throw new Error(data.error || "HTTP " + response.status);
  return data;
}

function live(source) {
  const badge = $("#live");
  source.addEventListener("open", () => { badge.textContent = "live"; badge.classList.add("on"); });
  source.addEventListener("error", () => { badge.textContent = "reconnecting…"; badge.classList.remove("on"); });
}

// A form for a JSON Schema object: one input per property.
function schemaForm(form, schema, submitLabel, onSubmit) {
  form.replaceChildren();
  const props = (schema && schema.properties) || {};
  const required = new Set((schema && schema.required) || []);
  for (const [name, field] of Object.entries(props)) {
    const type = Array.isArray(field.type) ? field.type[0] : field.type;
    let input;
    if (type === "boolean") {
      input = el("select", { name, "data-type": type }, el("option", { value: "true" }, "yes"), el("option", { value: "false" }, "no"));
      if (field.default === false) input.value = "false";
    } else if (type === "object" || type === "array") {
      input = el("textarea", { name, "data-type": type, rows: 3, cols: 50 });
      if (field.default !== undefined) input.value = JSON.stringify(field.default);
    } else {
      input = el("input", { name, "data-type": type || "string", type: type === "integer" || type === "number" ? "number" : "text", size: 50 });
      if (type === "number") input.step = "any";
      if (field.default !== undefined) input.value = field.default;
      if (field.minLength) input.minLength = field.minLength;
    }
    if (required.has(name) && field.default === undefined) input.required = true;
    form.append(el("label", {}, name + (input.required ? " *" : "") + " ", input,
      field.description ? el("span", { class: "field-help" }, " " + field.description) : null));
  }
  const result = el("span", { class: "form-result" });
  form.append(el("button", { type: "submit" }, submitLabel), " ", result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = {};
    try {
      for (const input of form.querySelectorAll("[name]")) {
        const type = input.dataset.type;
        if (input.value === "" && !input.required) continue;
        if (type === "boolean") value[input.name] = input.value === "true";
        else if (type === "integer") value[input.name] = parseInt(input.value, 10);
        else if (type === "number") value[input.name] = parseFloat(input.value);
        else if (type === "object" || type === "array") value[input.name] = JSON.parse(input.value);
        else value[input.name] = input.value;
      }
      result.className = "form-result";
      result.textContent = await onSubmit(value);
    } catch (e) {
      result.className = "form-result error";
      result.textContent = e.message;
    }
  });
}

// ---- the runs list ----

function runRow(run) {
  return el("tr", { "data-run": run.id },
    el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(run.id) }, el("code", {}, run.id))),
    el("td", {}, run.scenario),
    el("td", {}, el("span", { class: "status " + run.status }, run.status)),
    el("td", {}, run.current_node || ""),
    el("td", {}, run.last_seq),
    el("td", {}, when(run.created_at_ms)),
    el("td", {}, when(run.updated_at_ms)));
}

function runsPage() {
  const body = $("#runs tbody");
  const filter = $("#filter");
  let cursor = null;
  const query = () => {
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(filter)) if (v) params.set(k, v);
    return params;
  };
  const matches = (run) => {
    const q = query();
    return (!q.get("status") || q.get("status") === run.status) && (!q.get("scenario") || q.get("scenario") === run.scenario);
  };
  async function load(more) {
    const params = query();
    if (more && cursor) params.set("cursor", cursor);
    const page = await api("GET", "/api/runs?" + params);
    if (!more) body.replaceChildren();
    for (const run of page.runs) if (run.id && !run.unreadable) body.append(runRow(run));
    cursor = page.next_cursor;
    $("#more").hidden = !cursor;
  }
  filter.addEventListener("submit", (e) => { e.preventDefault(); load(false); });
  $("#more").addEventListener("click", () => load(true));
  load(false);
  const events = new EventSource("/api/events");
  live(events);
  events.addEventListener("run", (e) => {
    const run = JSON.parse(e.data);
    const old = body.querySelector(`tr[data-run="${CSS.escape(run.id)}"]`);
    if (!matches(run)) { if (old) old.remove(); return; }
    if (old) old.replaceWith(runRow(run)); else body.prepend(runRow(run));
  });
  api("GET", "/api/scenarios").then(({ scenarios }) => {
    const box = $("#scenarios");
    if (!scenarios.length) box.append(el("p", { class: "note" }, "No scenarios: start the server with --scenarios DIR to start runs here."));
    for (const s of scenarios) {
      // One the server was given but cannot run: why, and no form (the
      // reason is text, never markup).
      const title = el("a", { href: "/scenarios/" + encodeURIComponent(s.name) }, s.name);
      if (s.available === false) {
        box.append(el("div", { class: "scenario unavailable", "data-scenario": s.name },
          el("h3", {}, title, " ", el("small", {}, "unavailable")),
          el("p", {}, "This server cannot run it; fix it and restart the server:"),
          el("pre", { class: "error reason" }, s.reason)));
        continue;
      }
      const form = el("form", { class: "start", "data-scenario": s.name });
      box.append(el("div", { class: "scenario" }, el("h3", {}, title), s.description ? el("p", {}, s.description) : null, form));
      schemaForm(form, s.input_schema, "start " + s.name, async (input) => {
        const started = await api("POST", "/api/runs", { scenario: s.name, input });
        location.href = "/runs/" + encodeURIComponent(started.id);
        return "started " + started.id;
      });
    }
  });
}

// ---- a run page ----

function nodeStatuses(detail) {
  const status = {};
  for (const step of detail.steps) {
    status[step.node_id] = step.status === "ok" ? "completed" : "failed";
  }
  const run = detail.run;
  if (run.current_node && (run.status === "running" || run.status === "queued")) status[run.current_node] = "running";
  if (run.status === "waiting" && run.current_node) status[run.current_node] = "waiting";
  // An end node records no step: the run ended there.
  if (run.status === "completed" && run.current_node) status[run.current_node] = "completed";
  return status;
}

function runPage() {
  const runId = document.body.dataset.run;
  const base = "/api/runs/" + encodeURIComponent(runId);
  let answerShape = null;

  function paint(detail, checkpoints) {
    const run = detail.run;
    const status = $("#status");
    status.className = "status " + run.status;
    status.textContent = run.status;
    status.dataset.status = run.status;
    const usage = detail.usage && detail.usage.total ? ` · llm tokens ${detail.usage.total}` : "";
    $("#summary").textContent = `checkpoint ${run.last_seq} · ${detail.steps.length} step(s) · started ${when(run.created_at_ms)} · updated ${when(run.updated_at_ms)}` +
      (run.current_node ? ` · at ${run.current_node}` : "") + usage;
    const error = $("#error");
    error.hidden = !run.error;
    error.textContent = run.error ? pretty(run.error) : "";

    const statuses = nodeStatuses(detail);
    for (const g of document.querySelectorAll("svg.graph .node")) {
      g.dataset.status = statuses[g.dataset.node] || "pending";
    }

    const start = detail.steps.length ? detail.steps[0].started_at_ms : 0;
    const end = Math.max(1, ...detail.steps.map((s) => s.started_at_ms + s.duration_us / 1000 - start));
    $("#steps tbody").replaceChildren(...detail.steps.map((s, i) => {
      const left = ((s.started_at_ms - start) / end) * 100;
      const width = Math.max(0.3, (s.duration_us / 1000 / end) * 100);
      const warnings = (s.detail && s.detail.warnings) || [];
      return el("tr", { "data-node": s.node_id, "data-status": s.status },
        el("td", {}, s.seq === null ? "–" : s.seq),
        el("td", {}, s.node_id),
        el("td", {}, s.attempt),
        el("td", {}, s.status, s.error ? el("div", { class: "error" }, s.error.message || pretty(s.error)) : null,
          warnings.map((w) => el("div", { class: "note" }, "warning: " + (w.message || pretty(w))))),
        el("td", {}, micros(s.duration_us)),
        el("td", { style: { width: "30%" } }, el("div", { class: "bar" + (s.status === "ok" ? "" : " failed"), style: { marginLeft: left + "%", width: width + "%" } })));
    }));

    const quotes = detail.steps.flatMap((s) => (s.detail && s.detail.verified_quotes) || []);
    $("#citations-box").hidden = !quotes.length;
    if (quotes.length) {
      const columns = [...new Set(quotes.flatMap((q) => Object.keys(q)))];
      $("#citations thead").replaceChildren(el("tr", {}, columns.map((c) => el("th", {}, c))));
      $("#citations tbody").replaceChildren(...quotes.map((q) => el("tr", {},
        columns.map((c) => el("td", {}, typeof q[c] === "object" ? pretty(q[c]) : q[c])))));
    }

    if (checkpoints) {
      $("#diffs").replaceChildren(...checkpoints.checkpoints.filter((c) => c.seq > 0).map((c) =>
        el("div", { class: "diff", "data-seq": c.seq },
          el("h4", {}, `#${c.seq} ${c.node_id}`, " ", el("small", {}, `→ ${c.next_nodes.join(", ") || "end"}`)),
          c.changes.length ? el("pre", {}, c.changes.map((ch) => `${ch.op} ${ch.field}: ${JSON.stringify(ch.value !== undefined ? ch.value : ch.items)}`).join("\n"))
            : el("p", { class: "note" }, "no change"))));
    }

    const waiting = $("#waiting");
    waiting.hidden = !detail.waiting;
    if (detail.waiting) {
      $("#prompt").textContent = detail.waiting.prompt || "";
      const shape = JSON.stringify(detail.waiting.answer_schema) + detail.waiting.seq;
      if (shape !== answerShape) {
        answerShape = shape;
        schemaForm($("#answer"), detail.waiting.answer_schema, "answer", async (answer) => {
          const done = await api("POST", base + "/answer", { answer });
          refresh();
          return `answered at ${done.node}; the run continues`;
        });
      }
    }
    $("#cancel").hidden = ["completed", "failed", "cancelled"].includes(run.status);
  }

  let pending = null;
  async function refresh() {
    if (pending) return pending;
    pending = (async () => {
      try {
        const [detail, checkpoints] = await Promise.all([api("GET", base), api("GET", base + "/checkpoints")]);
        paint(detail, checkpoints);
        document.body.dataset.loaded = detail.run.status;
      } catch (e) {
        const error = $("#error");
        error.hidden = false;
        error.textContent = e.message;
      } finally {
        pending = null;
      }
    })();
    return pending;
  }

  $("#cancel").addEventListener("click", async () => {
    try {
      const done = await api("POST", base + "/cancel", {});
      $("#cancel-result").textContent = done.result;
      refresh();
    } catch (e) {
      $("#cancel-result").textContent = e.message;
    }
  });

  refresh();
  const events = new EventSource(base + "/events");
  live(events);
  let timer = null;
  const soon = () => { clearTimeout(timer); timer = setTimeout(refresh, 100); };
  events.addEventListener("run", soon);
  events.addEventListener("step", soon);
  // A streaming node's text as the model generates it, per node (and map
  // item; a subgraph's child run's nodes under the end of the child's id,
  // its random part: a UUIDv7 starts with its time); a failed attempt's is
  // struck out when it is discarded, and the retry's starts anew.
  const streams = new Map();
  const streamOf = (t) => {
    const node = t.item == null ? t.node : `${t.node} [${t.item}]`;
    const key = t.under && t.under.length ? `${String(t.run_id).slice(-8)}/${node}` : node;
    let s = streams.get(key);
    if (!s) {
      const row = document.createElement("p");
      const label = document.createElement("code");
      label.textContent = key;
      const text = document.createElement("span");
      text.className = "token-text";
      row.append(label, " ", text);
      $("#tokens").append(row);
      s = { text, attempt: t.attempt };
      streams.set(key, s);
    }
    $("#tokens-box").hidden = false;
    return s;
  };
  events.addEventListener("token", (e) => {
    const t = JSON.parse(e.data);
    const s = streamOf(t);
    if (s.attempt !== t.attempt) {
      s.text.textContent = "";
      s.text.classList.remove("discarded");
      s.attempt = t.attempt;
    }
    s.text.textContent += t.text;
    s.text.dataset.attempt = t.attempt;
  });
  events.addEventListener("tokens_discarded", (e) => {
    const t = JSON.parse(e.data);
    const s = streamOf(t);
    if (s.attempt === t.attempt) s.text.classList.add("discarded");
  });
  events.addEventListener("end", () => {
    events.close();
    $("#live").textContent = "finished";
    // The report and the other artifacts are written with the last step.
    fetch(location.href).then((r) => r.text()).then((html) => {
      const doc = new DOMParser().parseFromString(html, "text/html");
      const fresh = doc.querySelector("#artifacts");
      if (fresh) $("#artifacts").replaceWith(fresh);
      refresh();
    });
  });
}

session().then((state) => {
  const page = document.body.dataset.page;
  if (state.token_required && !state.signed_in) {
    if (page !== "signin") {
      $("main").prepend(el("p", { class: "signin-needed" },
        "This server needs its token: give it in the field above to see and change its runs."));
    }
    $("#token").focus();
    return;
  }
  if (page === "signin") location.reload();
  if (page === "runs") runsPage();
  if (page === "run") runPage();
});
