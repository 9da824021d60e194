// Render functions of the side panels: the selected task, metrics, cluster.
import { api, token } from "./api";
import { fmtDuration, fmtNum, fmtTime, h, ms } from "./dom";
import { STATUS_COLORS } from "./graph";
import { helpBadge } from "./help";
import { sparkline, type Derived } from "./metrics";
import type { ClusterResponse, DAGView, InstanceList, TaskStatus, TaskView } from "./types";

export function statusBadge(status: string): HTMLElement {
  const c = STATUS_COLORS[status as TaskStatus];
  const dagColors: Record<string, string> = { running: "#2563eb", succeeded: "#16a34a", failed: "#dc2626", cancelled: "#6b7280" };
  const el = h("span.badge", { "data-status": status }, status.replace("_", " "));
  const bg = c?.bg ?? dagColors[status] ?? "#e5e7eb";
  el.style.background = bg;
  el.style.color = c?.fg ?? (dagColors[status] ? "#fff" : "#111827");
  return el;
}

function kv(rows: [string, Node | string | number | undefined | null][]): HTMLElement {
  const dl = h("dl.kv");
  for (const [k, v] of rows) {
    if (v === undefined || v === null || v === "") continue;
    dl.append(h("dt", {}, k), h("dd", {}, v));
  }
  return dl;
}

/** The task panel: status, attempts, worker, timings, exit code, output tail, logs. */
export function renderTask(host: HTMLElement, d: DAGView, t: TaskView, now: number, onSelect: (id: string) => void): void {
  const started = ms(t.started_at);
  const finished = ms(t.finished_at);
  let dur: string | undefined;
  if (t.duration_ms !== undefined) dur = fmtDuration(t.duration_ms);
  else if (started !== undefined && t.status === "running") dur = fmtDuration(now - started) + " so far";
  const depLinks = (ids: string[]) => {
    if (!ids.length) return "none";
    const span = h("span.deps");
    ids.forEach((id, i) => {
      if (i) span.append(", ");
      const a = h("a", { href: "#", "data-task": id }, id);
      a.addEventListener("click", (e) => {
        e.preventDefault();
        onSelect(id);
      });
      span.append(a);
    });
    return span;
  };
  const dependents = d.tasks.filter((x) => x.depends_on.includes(t.id)).map((x) => x.id);
  const spec = t.spec;
  let what = "";
  if (spec.kind === "shell") what = (spec.interpreter ? spec.interpreter + " -c " : "") + (spec.command ?? "");
  else if (spec.kind === "http") what = `${spec.method || "GET"} ${spec.url ?? ""}` + (spec.expect_status ? ` → ${spec.expect_status}` : "");
  else if (spec.kind === "sleep") what = `sleep ${spec.duration ?? "0s"}` + (spec.fail ? `, fails with p=${spec.fail}` : "");
  else what = spec.kind;

  const retryInfo =
    t.status === "retrying" && t.retry_at
      ? h("span", {}, `next attempt at ${fmtTime(t.retry_at)} (in ${fmtDuration(Math.max(0, (ms(t.retry_at) ?? now) - now))}) `, helpBadge("retry"))
      : undefined;
  const cascadeInfo = t.cascade || t.status === "upstream_failed" ? h("span", {}, `because ${t.cause || "a dependency"} failed `, helpBadge("cascade")) : undefined;
  const skipWhy: Record<string, string> = {
    condition: "its when: condition was false",
    trigger_rule: "its dependencies ended in a way its rule does not run on",
    not_needed: "the way the DAG ended does not call for it",
    empty: "its for_each yielded no items",
  };
  const skippedInfo = t.skipped ? h("span", { "data-testid": "task-skipped" }, (skipWhy[t.skipped] ?? t.skipped) + " ", helpBadge("rules")) : undefined;
  let ruleInfo: string | undefined = t.trigger_rule;
  if (t.role === "handler") ruleInfo = `${t.id} handler: runs once the DAG's tasks have ended`;
  else if (t.role === "notification") ruleInfo = "notification: sent once the DAG's tasks and handlers have ended";
  else if (spec.continue_on_failure) ruleInfo += " · continue on failure";

  const head = h(
    "div.task-head",
    {},
    h("code.task-id", { "data-testid": "task-id" }, t.id),
    statusBadge(t.status),
    h("span.muted", {}, t.kind),
  );
  const required: Record<string, string> = { ...(spec.selector ?? {}) };
  if (spec.pool) required.pool = spec.pool;
  const requires = Object.keys(required).length ? fmtLabels(required) : undefined;
  const facts = kv([
    ["waiting", t.waiting ? h("span", { "data-testid": "task-waiting" }, t.waiting) : undefined],
    ["rule", ruleInfo ? h("span", { "data-testid": "task-rule" }, ruleInfo) : undefined],
    ["when", t.when ? h("code", { "data-testid": "task-when" }, t.when) : undefined],
    ["skipped", skippedInfo],
    ["requires", requires],
    ["attempts", `${t.attempts} (retries used ${t.retries} of ${t.max_retries})`],
    ["worker", t.worker ?? "—"],
    ["priority", String(t.priority)],
    ["started", fmtTime(t.started_at)],
    ["finished", t.finished_at ? fmtTime(t.finished_at) : "—"],
    ["duration", dur ?? (finished && started ? fmtDuration(finished - started) : "—")],
    ["exit code", t.exit_code === null || t.exit_code === undefined ? "—" : String(t.exit_code)],
    ["error", t.error],
    ["retry", retryInfo],
    ["cascade", cascadeInfo],
    ["last event", t.event],
    ["map", t.map ? h("span", { "data-testid": "task-map" }, mapSummary(t.map)) : undefined],
    ["instance", t.instance ? h("span", { "data-testid": "task-instance" }, `${t.instance.index} of ${t.instance.group}, item ${fmtValue(t.instance.item)}`) : undefined],
    ["depends on", depLinks(t.depends_on)],
    ["dependents", depLinks(dependents)],
  ]);
  const runs = h("code.cmd", {}, what);

  const out = h("pre.output", { "data-testid": "output-tail" }, t.output_tail || (t.attempts ? "(no output)" : "(not run yet)"));
  const logs = h("div.logs");
  if (t.attempts > 0) {
    const link = h("a", { href: api.logURL(d.id, t.id, t.attempts), target: "_blank", rel: "noopener", "data-testid": "log-link" }, `full log of attempt ${t.attempts} ↗`);
    // A new tab cannot send the bearer token: with one, read the log here
    // and open it as a blob.
    link.addEventListener("click", (ev) => {
      if (!token()) return;
      ev.preventDefault();
      const tab = window.open("", "_blank");
      api.log(d.id, t.id, t.attempts).then(
        (text) => {
          const url = URL.createObjectURL(new Blob([text], { type: "text/plain;charset=utf-8" }));
          if (tab) tab.location.href = url;
          else window.open(url, "_blank");
          setTimeout(() => URL.revokeObjectURL(url), 60000);
        },
        (e: Error) => {
          tab?.close();
          link.title = e.message;
          link.classList.add("error");
        },
      );
    });
    logs.append(link);
  }

  const hist = t.history ?? [];
  let histTable: HTMLElement | undefined;
  if (hist.length) {
    const tbody = h("tbody");
    for (const a of hist) {
      const s = ms(a.started_at);
      const f = ms(a.finished_at);
      tbody.append(
        h(
          "tr",
          {},
          h("td", {}, String(a.attempt)),
          h("td", {}, a.outcome),
          h("td", {}, a.worker ?? "—"),
          h("td", {}, s !== undefined && f !== undefined ? fmtDuration(f - s) : "—"),
          h("td", {}, a.exit_code ?? "—"),
          h("td", {}, h("a", { href: api.logURL(d.id, t.id, a.attempt), target: "_blank", rel: "noopener" }, "log")),
        ),
      );
    }
    histTable = h(
      "div",
      {},
      h("h3", {}, "Earlier attempts"),
      h("table.hist", {}, h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "outcome"), h("th", {}, "worker"), h("th", {}, "took"), h("th", {}, "exit"), h("th", {}, ""))), tbody),
    );
  }
  const outputs = t.outputs && Object.keys(t.outputs).length ? h("div", {}, h("h3", {}, "Outputs"), valueTable(t.outputs, "task-outputs")) : "";
  const group = t.map?.expanded ? instancesSection(d, t) : "";
  host.replaceChildren(head, runs, facts, group, outputs, h("h3", {}, "Output (last 4 KiB)"), out, logs, histTable ?? "");
}

/** A map group's instances by status, in a few words. */
function mapSummary(m: NonNullable<TaskView["map"]>): string {
  if (!m.expanded) return "not expanded yet: its items are judged when its dependencies have ended";
  const counts = Object.entries(m.counts ?? {})
    .map(([s, n]) => `${n} ${s}`)
    .join(", ");
  return `${m.count} instances: ${counts || "none"}`;
}

/**
 * The instances of map group t, a page at a time: opened on demand, and
 * kept open at its page across the panel's re-renders (every live update
 * of the DAG re-renders it).
 */
const INSTANCE_PAGE = 50;
const openMaps = new Map<string, number>(); // DAG/task → offset shown
function instancesSection(d: DAGView, t: TaskView): HTMLElement {
  const key = `${d.id}/${t.id}`;
  const tbody = h("tbody");
  const info = h("span.muted", {});
  const prev = h("button", { type: "button", "data-testid": "instances-prev" }, "‹ previous") as HTMLButtonElement;
  const next = h("button", { type: "button", "data-testid": "instances-next" }, "next ›") as HTMLButtonElement;
  const table = h(
    "table.hist",
    { "data-testid": "instances" },
    h("thead", {}, h("tr", {}, h("th", {}, "instance"), h("th", {}, "status"), h("th", {}, "item"), h("th", {}, "attempts"), h("th", {}, "error"), h("th", {}, ""))),
    tbody,
  );
  const body = h("div", { hidden: "" }, h("div", {}, prev, " ", next, " ", info), table);
  let offset = openMaps.get(key) ?? 0;
  const show = (page: InstanceList) => {
    tbody.replaceChildren(
      ...page.instances.map((i) =>
        h(
          "tr",
          { "data-id": i.id },
          h("td", {}, h("code", {}, i.id)),
          h("td", {}, statusBadge(i.status)),
          h("td", {}, h("code", {}, fmtValue(i.instance?.item ?? ""))),
          h("td", {}, String(i.attempts)),
          h("td", {}, i.error ?? ""),
          h("td", {}, i.attempts ? h("a", { href: api.logURL(d.id, i.id, i.attempts), target: "_blank", rel: "noopener" }, "log") : ""),
        ),
      ),
    );
    info.textContent = page.total ? `${page.offset}–${page.offset + page.instances.length - 1} of ${page.total}` : "none";
    prev.disabled = page.offset === 0;
    next.disabled = page.offset + page.instances.length >= page.total;
  };
  const load = () => {
    openMaps.set(key, offset);
    if (!tbody.childElementCount) info.textContent = "loading…";
    api.instances(d.id, t.id, offset, INSTANCE_PAGE).then(show, (e: Error) => {
      info.textContent = `could not list the instances: ${e.message}`;
    });
  };
  prev.addEventListener("click", () => {
    offset = Math.max(0, offset - INSTANCE_PAGE);
    load();
  });
  next.addEventListener("click", () => {
    offset += INSTANCE_PAGE;
    load();
  });
  const open = h("button", { type: "button", "data-testid": "instances-open" }, `show its ${t.map?.count ?? 0} instances`) as HTMLButtonElement;
  const expand = () => {
    open.hidden = true;
    body.hidden = false;
    load();
  };
  open.addEventListener("click", expand);
  if (openMaps.has(key)) expand();
  return h("div", { "data-testid": "map-group" }, h("h3", {}, "Mapped instances"), open, body);
}

/** A value as a template renders it: a string as it is, anything else as JSON. */
export function fmtValue(v: unknown): string {
  return typeof v === "string" ? v : JSON.stringify(v);
}

/** Params or outputs, one row each, sorted by name. */
export function valueTable(values: Record<string, unknown>, testid: string): HTMLElement {
  const tbody = h("tbody");
  for (const k of Object.keys(values).sort()) {
    tbody.append(h("tr", { "data-name": k }, h("td", {}, h("code", {}, k)), h("td", {}, h("pre.value", {}, fmtValue(values[k])))));
  }
  return h("table.values", { "data-testid": testid }, tbody);
}

function tile(label: string, value: string, help?: string, spark?: SVGSVGElement, testid?: string): HTMLElement {
  const t = h("div.tile", testid ? { "data-testid": testid } : {}, h("div.tile-label", {}, label, help ? helpBadge(help) : ""), h("div.tile-value", {}, value));
  if (spark) t.append(spark);
  return t;
}

export function renderMetrics(host: HTMLElement, m: Derived | null, history: Derived[], cluster: ClusterResponse | null): void {
  if (!m) {
    host.replaceChildren(h("div.muted", {}, "waiting for the first sample…"));
    return;
  }
  const lat = (s?: number) => (s === undefined ? "—" : s < 0.001 ? `${(s * 1e6).toFixed(0)} µs` : s < 1 ? `${(s * 1000).toFixed(1)} ms` : `${s.toFixed(2)} s`);
  // Slots from the latest sample (the stream's metrics, every second), else
  // from the cluster endpoint.
  let slots = 0;
  let busy = 0;
  for (const v of m.workerSlots.values()) slots += v;
  for (const v of m.workerBusy.values()) busy += v;
  if (!slots) {
    for (const w of cluster?.workers ?? []) {
      slots += w.slots;
      busy += w.busy;
    }
  }
  host.replaceChildren(
    tile("throughput", m.throughput === undefined ? "—" : `${fmtNum(m.throughput, 1)} tasks/s`, undefined, sparkline(history.map((x) => x.throughput)), "m-throughput"),
    tile("queue (ready)", fmtNum(m.queue), "heap", sparkline(history.map((x) => x.queue), 160, 32, "#7c3aed"), "m-queue"),
    tile("running", fmtNum(m.running), undefined, sparkline(history.map((x) => x.running), 160, 32, "#0891b2"), "m-running"),
    tile("retries", `${fmtNum(m.retries)}` + (m.retriesRate ? ` (${fmtNum(m.retriesRate, 1)}/s)` : ""), "retry", undefined, "m-retries"),
    tile("dispatch latency", `p50 ${lat(m.dispatchP50)} · p99 ${lat(m.dispatchP99)}`, "heap", undefined, "m-dispatch"),
    tile("dropped events", fmtNum(m.dropped), "stream", undefined, "m-dropped"),
    tile("slots", slots ? `${busy} busy · ${slots - busy} idle of ${slots}` : "no worker", undefined, undefined, "m-slots"),
    tile("leader changes", `${fmtNum(m.leaderChanges)}` + (m.takeover ? ` · last takeover ${lat(m.takeover)}` : ""), "takeover", undefined, "m-leader"),
  );
}

export function renderCluster(host: HTMLElement, c: ClusterResponse | null, err: string): void {
  if (!c) {
    host.replaceChildren(h("div.muted", {}, err || "loading…"));
    return;
  }
  const reps = h("tbody");
  for (const r of c.replicas ?? []) {
    const role = h("span.role", { class: "role-" + r.role }, r.role === "leader" ? "★ leader" : r.role);
    reps.append(
      h(
        "tr",
        { "data-replica": r.name, "data-role": r.role },
        h("td", {}, h("b", {}, r.name), r.name === c.node ? h("span.muted", {}, " (this page)") : ""),
        h("td", {}, role),
        h("td.num", {}, fmtNum(r.applied_revision)),
        h("td.num", {}, r.reachable ? fmtNum(r.lag) : "—"),
        h("td.num", {}, r.pid ? String(r.pid) : "—"),
      ),
    );
  }
  const ws = h("div.workers");
  for (const w of c.workers ?? []) {
    const bar = h("div.slots", { title: `${w.busy} of ${w.slots} slots busy` });
    for (let i = 0; i < w.slots; i++) bar.append(h("span.slot", { class: i < w.busy ? "busy" : "idle" }));
    ws.append(
      h(
        "div.worker",
        { "data-worker": w.id },
        h("span.dot", { class: w.connected ? "on" : "off", title: w.connected ? "connected" : "disconnected" }),
        h("code", {}, w.id),
        w.replica ? h("span.muted", {}, ` (replica ${w.replica})`) : "",
        w.host && !w.replica ? h("span.muted", { "data-testid": "worker-host", title: w.pid ? `pid ${w.pid}` : "" }, ` on ${w.host}`) : "",
        w.labels && Object.keys(w.labels).length ? h("span.muted", { "data-testid": "worker-labels" }, ` ${fmtLabels(w.labels)}`) : "",
        bar,
        h("span.muted", {}, ` ${w.busy}/${w.slots}`),
      ),
    );
  }
  if (!(c.workers ?? []).length) ws.append(h("div.muted", {}, c.leader ? "no worker connected" : "no leader: workers are listed by the leader"));
  const members = (c.etcd.members ?? []).map((m) => h("li", {}, m.is_leader ? "★ " : "", h("code", {}, m.name || m.id), h("span.muted", {}, " " + (m.client_urls ?? []).join(", "))));
  host.replaceChildren(
    h(
      "div.leader-line",
      {},
      "leader: ",
      c.leader ? h("b", { "data-testid": "leader" }, c.leader) : h("b.warn", { "data-testid": "leader" }, "none (election in progress)"),
      " ",
      helpBadge("takeover"),
    ),
    h("h3", {}, "Replicas"),
    h("table.replicas", {}, h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "role"), h("th", {}, "applied rev"), h("th", {}, "lag"), h("th", {}, "pid"))), reps),
    h("h3", {}, "Workers"),
    ws,
    members.length ? h("h3", {}, "etcd members") : "",
    members.length ? h("ul.members", {}, ...members) : h("div.muted", {}, "etcd: " + (c.etcd.endpoints ?? []).join(", ")),
  );
}

/** Labels as k=v,k2=v2, keys sorted: the form of --labels. */
function fmtLabels(l: Record<string, string>): string {
  return Object.keys(l)
    .sort()
    .map((k) => `${k}=${l[k]}`)
    .join(",");
}
