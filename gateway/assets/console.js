// berth's console script: keeps pages live over the SSE streams the API already serves
// (the console cookie speaks for same-origin requests), follows logs, draws the detail
// panel's usage charts, closes a finished session's toast and sends the Data explorer's uploads.
// The pages work without it (but for uploads).

let live = document.querySelector("[data-live]");

// Fetches this page again and swaps in its main region, keeping focus and open details.
let refreshing = null;
async function refresh() {
  if (refreshing) return;
  refreshing = (async () => {
    try {
      const answer = await fetch(location.href, { credentials: "same-origin" });
      if (!answer.ok || answer.redirected) return;
      const next = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = next.querySelector("[data-live]");
      const active = document.activeElement;
      if (!fresh || (active && active.closest("form") && live.contains(active))) return;
      const open = [...live.querySelectorAll("details[open] > summary")].map((s) => s.textContent);
      live.replaceWith(fresh);
      live = fresh;
      for (const summary of fresh.querySelectorAll("details > summary")) {
        if (open.includes(summary.textContent)) summary.parentElement.open = true;
      }
      const unread = next.querySelector("[data-unread]");
      const here = document.querySelector("header [data-unread]");
      if (unread && here) here.textContent = unread.textContent;
      setUp(fresh);
    } finally {
      refreshing = null;
    }
  })();
}

// Session events make the Sessions page, its detail and its toast refresh (debounced).
let pending = null;
function soon() {
  clearTimeout(pending);
  pending = setTimeout(refresh, 300);
}
if (live && document.querySelector("#sessions, #detail, [data-toast], #notices, #agents, .queue")) {
  const events = new EventSource("/v1/events");
  events.onmessage = soon;
  for (const name of ["SessionRequested", "SessionScheduled", "SessionStatusChanged", "SessionRenamed",
    "KernelStarted", "SessionTerminationRequested", "SessionCommitProgressed", "SessionCommitEnded"]) {
    events.addEventListener(name, soon);
  }
  // The agents' heartbeats and the queue's reasons move without a session event.
  if (document.querySelector("#agents, .queue")) setInterval(soon, 5000);
}

// A toast closes itself 3 s after its session is TERMINATED or CANCELLED.
function toast(root) {
  const card = root.querySelector("[data-toast]");
  if (card && ["TERMINATED", "CANCELLED"].includes(card.dataset.status)) {
    setTimeout(() => card.remove(), 3000);
  }
}

// The detail panel's charts: the session's whole life (its usage series, a point a minute
// over the last day, an hour apart before), then a point per sample while the panel is open.
const series = { cpu: [], memory: [], network: [] };
let sampling = null;
let charted = null;
function charts(root) {
  const figure = root.querySelector("[data-charts]");
  clearInterval(sampling);
  if (!figure) return;
  const draw = () => {
    for (const [name, points] of Object.entries(series)) {
      const line = figure.querySelector(`[data-chart=${name}] polyline`);
      if (!line || points.length === 0) continue;
      const max = Math.max(...points, 1);
      const step = 120 / Math.max(points.length - 1, 1);
      line.setAttribute("points", points.map((v, i) => `${i * step},${30 - (v / max) * 28}`).join(" "));
    }
    figure.dataset.points = series.cpu.length;
  };
  const history = async () => {
    if (charted === figure.dataset.session) return;
    charted = figure.dataset.session;
    for (const name of Object.keys(series)) series[name] = [];
    const answer = await fetch(`/v1/sessions/${figure.dataset.session}/usage`, { credentials: "same-origin" });
    if (!answer.ok) return;
    for (const p of (await answer.json()).points) {
      series.cpu.push(p.cpu_percent ?? 0);
      series.memory.push(p.memory_bytes);
      series.network.push(p.network_bytes);
    }
    draw();
  };
  const sample = async () => {
    const answer = await fetch(`/v1/sessions/${figure.dataset.session}`, { credentials: "same-origin" });
    if (!answer.ok) return;
    const usage = (await answer.json()).usage;
    if (!usage) return;
    const push = (name, value) => { series[name].push(value); if (series[name].length > 4000) series[name].shift(); };
    push("cpu", usage.cpu_percent ?? 0);
    push("memory", usage.memory_bytes);
    push("network", usage.network_rx_bytes + usage.network_tx_bytes);
    draw();
  };
  history().then(() => { draw(); sample(); });
  sampling = setInterval(sample, 3000);
}

// The log viewer follows the session's output until it ends.
function logs(root) {
  const viewer = root.querySelector("[data-follow-logs]");
  if (!viewer) return;
  const stream = new EventSource(`/v1/sessions/${viewer.dataset.followLogs}/logs?follow=true`);
  const seen = new Set();
  stream.addEventListener("log", (e) => {
    const { kernel, text } = JSON.parse(e.data);
    const pre = viewer.querySelector(`pre[data-kernel="${kernel}"]`);
    if (!pre) return;
    if (!seen.has(kernel)) { pre.textContent = ""; seen.add(kernel); }
    pre.textContent += text;
    pre.scrollTop = pre.scrollHeight;
  });
  stream.addEventListener("end", () => {
    stream.close();
    const state = viewer.querySelector("[data-follow-state]");
    if (state) state.textContent = "The session has ended; this is all of its output.";
  });
}

function setUp(root) {
  toast(root);
  charts(root);
}

if (live) {
  setUp(live);
  logs(live);
}

// A copy button puts its reference on the clipboard (the field beside it can be selected
// by hand where the browser allows no clipboard).
for (const button of document.querySelectorAll("[data-copy]")) {
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(button.dataset.copy);
      button.textContent = "Copied";
    } catch {
      button.previousElementSibling?.select();
    }
  });
}

// The Data explorer's uploads: the files picked or dropped go to the API one by one (the
// console cookie speaks for same-origin requests), each streamed with its progress drawn,
// then the page shows the directory again.
function uploads() {
  const zone = document.getElementById("dropzone");
  if (!zone) return;
  const input = document.getElementById("upload-input");
  const bar = document.getElementById("upload-progress");
  const status = document.getElementById("upload-status");
  const folder = encodeURIComponent(zone.dataset.uploadFolder);
  const put = (file) => new Promise((resolve, reject) => {
    const path = zone.dataset.uploadPath ? `${zone.dataset.uploadPath}/${file.name}` : file.name;
    const request = new XMLHttpRequest();
    request.open("PUT", `/v1/folders/${folder}/files?path=${encodeURIComponent(path)}`);
    request.upload.onprogress = (e) => { if (e.lengthComputable) bar.value = e.loaded / e.total; };
    request.onload = () => request.status < 300 ? resolve() : reject(new Error(
      (JSON.parse(request.responseText || "{}").error || {}).message || `HTTP ${request.status}`));
    request.onerror = () => reject(new Error("the upload was cut"));
    request.send(file);
  });
  const send = async (files) => {
    bar.hidden = false;
    try {
      for (const file of files) {
        status.textContent = `uploading ${file.name}`;
        bar.value = 0;
        await put(file);
      }
      status.textContent = "uploaded";
      location.reload();
    } catch (e) {
      status.textContent = `upload failed: ${e.message}`;
    }
  };
  input.addEventListener("change", () => send([...input.files]));
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    send([...e.dataTransfer.files]);
  });
}

uploads();

// The launcher's environment variables as rows (the seeds' "+ Add environment variables"
// and a "-" on each): a name and a value a row, written back into the form's one
// NAME=value-a-line field as they change, which the page reads without the script too.
function envRows() {
  const field = document.querySelector("[data-env-rows]");
  if (!field) return;
  const rows = document.createElement("div");
  rows.className = "env-rows";
  rows.id = "env-rows";
  const add = document.createElement("button");
  add.type = "button";
  add.id = "env-add";
  add.textContent = "+ Add environment variables";
  const write = () => {
    field.value = [...rows.querySelectorAll(".env-row")]
      .map((row) => [row.querySelector(".env-name").value.trim(), row.querySelector(".env-value").value])
      .filter(([name]) => name)
      .map(([name, value]) => `${name}=${value}`)
      .join("\n");
  };
  const row = (name, value) => {
    const line = document.createElement("div");
    line.className = "env-row";
    const n = rows.children.length + 1;
    line.innerHTML = `<input class="env-name" aria-label="Variable ${n} name" placeholder="NAME">
      <input class="env-value" aria-label="Variable ${n} value" placeholder="value">
      <button type="button" class="env-remove" aria-label="Remove variable ${n}">-</button>`;
    line.querySelector(".env-name").value = name;
    line.querySelector(".env-value").value = value;
    line.addEventListener("input", write);
    line.querySelector(".env-remove").addEventListener("click", () => { line.remove(); write(); });
    rows.append(line);
  };
  for (const text of field.value.split("\n").filter((l) => l.includes("="))) {
    const at = text.indexOf("=");
    row(text.slice(0, at), text.slice(at + 1));
  }
  add.addEventListener("click", () => { row("", ""); rows.lastElementChild.querySelector(".env-name").focus(); });
  field.hidden = true;
  document.querySelector("label[for='env']").textContent = "Environment variables";
  field.after(rows, add);
}

envRows();
