// Orion console: submit DAGs, watch them run live, inspect tasks, follow
// the cluster and its metrics, and (in demo mode) pull the plug.
import "./style.css";
import { api, APIError, setOnUnauthorized, setToken, token } from "./api";
import { Demo } from "./demo";
import { $, fmtTime, h } from "./dom";
import { GraphView, STATUS_COLORS } from "./graph";
import { installHelp } from "./help";
import { MetricsModel, parseProm, Snapshot } from "./metrics";
import { fmtValue, renderCluster, renderMetrics, renderTask, statusBadge } from "./panels";
import { renderSchedules, scheduleAPI } from "./schedules";
import { EventStream, type StreamState } from "./stream";
import { formatDAG, TEMPLATES } from "./templates";
import { renderTimeline } from "./timeline";
import { renderGroup } from "./bigpanel";
import { TASK_STATUSES, type ScheduleRun, type ScheduleView, type ClusterResponse, type DAGSummary, type DAGView, type StreamEvent, type TaskStatus, type TaskView } from "./types";

export type Tone = "info" | "ok" | "warn" | "bad" | "step";

/** Calls fn at most once per `wait` ms, trailing. */
function throttle(fn: () => void, wait: number): () => void {
  let timer = 0;
  let last = 0;
  return () => {
    if (timer) return;
    const delay = Math.max(0, last + wait - Date.now());
    timer = window.setTimeout(() => {
      timer = 0;
      last = Date.now();
      fn();
    }, delay);
  };
}

export class App {
  dags = new Map<string, DAGSummary>();
  current: DAGView | null = null;
  currentId: string | null = null;
  selected: string | null = null;
  cluster: ClusterResponse | null = null;
  clusterErr = "";
  schedules: ScheduleView[] | null = null;
  schedulesErr = "";
  scheduleOpen = "";
  scheduleRuns: ScheduleRun[] = [];
  node = "";
  tab: "graph" | "timeline" = "graph";
  readonly metrics = new MetricsModel();
  readonly graph: GraphView;
  readonly stream: EventStream;
  readonly demo: Demo;
  private loadSeq = 0;
  /**
   * DAGs known deleted, by the revision of their deletion: a list read
   * before that revision (one in flight when the DAG went) does not bring
   * them back. Dropped once a list at or after that revision came.
   */
  private deletedAt = new Map<string, number>();
  /** DAGs this page asked to delete, until the answer. */
  private deleting = new Set<string>();
  private lastLeader: string | null = null;
  private streamWas: StreamState | null = null;

  /** DAGs the API answers with tasks_truncated: read by their shape, without tasks. */
  private readonly big = new Set<string>();
  /** The big DAG shown was running at its last read. */
  private bigRunning = false;
  private readonly refreshSmall = throttle(() => void this.loadCurrent(), 400);
  // A big DAG's shape counts read a status per task on the server: at most every 2 s.
  private readonly refreshBig = throttle(() => void this.loadCurrent(), 2000);
  readonly refreshCurrent = (): void => (this.currentId && this.big.has(this.currentId) ? this.refreshBig() : this.refreshSmall());
  readonly refreshList = throttle(() => void this.loadList().catch(() => undefined), 1000);

  constructor() {
    this.graph = new GraphView($("#graph"), {
      onSelect: (id) => this.selectTask(id, false),
      onHover: (id, x, y) => this.nodeTip(id, x, y),
    });
    this.stream = new EventStream({
      onEvent: (e) => this.onEvent(e),
      onState: (s, d) => this.onStreamState(s, d),
    });
    this.demo = new Demo(this);
  }

  // ---- narration ---------------------------------------------------------

  say(text: string, tone: Tone = "info"): void {
    const ol = $("#narration");
    const li = h("li", { class: "n-" + tone }, h("time", {}, fmtTime(new Date().toISOString())), " ", text);
    ol.prepend(li);
    while (ol.children.length > 200) ol.lastElementChild?.remove();
  }

  // ---- loading -----------------------------------------------------------

  async loadList(): Promise<number> {
    const r = await api.listDAGs(100);
    this.node = r.node;
    // A DAG listed at or after its deletion's revision was submitted again.
    const stale = (id: string) => r.revision < (this.deletedAt.get(id) ?? 0);
    this.dags = new Map(r.dags.filter((d) => !stale(d.id)).map((d) => [d.id, d]));
    for (const [id, rev] of this.deletedAt) if (r.revision >= rev) this.deletedAt.delete(id);
    this.renderList();
    return r.revision;
  }

  async loadCurrent(): Promise<void> {
    const id = this.currentId;
    if (!id) return;
    const seq = ++this.loadSeq;
    try {
      const d = await api.getDAG(id, this.big.has(id) ? 0 : undefined);
      if (seq !== this.loadSeq || id !== this.currentId) return;
      if (d.tasks_truncated) {
        this.big.add(id);
        // Its groups' counts may be a second older than its events (the
        // server reads them at most once a second): read it again while it
        // runs, and once more after it ended, so a quiet DAG shows them right.
        if (d.status === "running" || this.bigRunning) window.setTimeout(() => this.refreshCurrent(), 1200);
        this.bigRunning = d.status === "running";
      } else this.big.delete(id);
      const prev = this.current;
      this.current = d;
      this.dags.set(d.id, d);
      this.renderCurrent();
      this.renderList();
      if (prev && prev.id === d.id) this.narrateChanges(prev, d);
    } catch (e) {
      if (e instanceof APIError && e.status === 404 && id === this.currentId) {
        this.say(`DAG ${id} no longer exists (deleted on request or by retention?)`, "warn");
        this.forget(id, 0);
      }
    }
  }

  /**
   * Drops a deleted DAG (rev: its deletion's revision, 0 if unknown) from
   * the list; the page leaves it, for the list, when it is the one shown.
   */
  forget(id: string, rev: number): void {
    if (rev > (this.deletedAt.get(id) ?? 0)) this.deletedAt.set(id, rev);
    this.dags.delete(id);
    this.renderList();
    if (id === this.currentId) void this.select(null);
  }

  async select(id: string | null, task: string | null = null): Promise<void> {
    this.currentId = id;
    this.selected = task;
    this.current = null;
    this.updateHash();
    if (!id) {
      this.graph.clear();
      this.renderCurrent();
      return;
    }
    this.renderList();
    await this.loadCurrent();
    if (task) this.graph.select(task);
  }

  selectTask(id: string | null, fromOutside = true): void {
    this.selected = id;
    if (fromOutside) {
      this.graph.select(id);
      if (id) this.graph.focus(id);
    }
    this.updateHash();
    this.renderTaskPanel();
    if (this.tab === "timeline") this.renderTimeline();
  }

  private updateHash(): void {
    const p = new URLSearchParams();
    if (this.currentId) p.set("dag", this.currentId);
    if (this.selected) p.set("task", this.selected);
    const s = p.toString();
    history.replaceState(null, "", s ? "#" + s : location.pathname);
  }

  // ---- live events -------------------------------------------------------

  private onStreamState(s: StreamState, detail: string): void {
    const el = $("#conn");
    el.className = "pill pill-" + s;
    const label = { connecting: "connecting…", live: "● live", reconnecting: "reconnecting…", down: "stream down: polling" }[s];
    el.textContent = label + (s === "live" && this.stream.lastRev ? ` · rev ${this.stream.lastRev}` : "");
    el.title = detail;
    const was = this.streamWas;
    this.streamWas = s;
    if (s === "live" && was && was !== "live" && was !== "connecting") this.say(`live stream back, resumed after ${this.stream.cursor}`, "ok");
    if (s !== "live" && was === "live") this.say("live stream lost: reconnecting (the page polls meanwhile)", "warn");
    if (s === "live") {
      // Whatever happened while we were away is covered by the resume, but a
      // reload is cheap and makes the page right even if it was not.
      this.refreshCurrent();
      this.refreshList();
    }
  }

  private onEvent(e: StreamEvent): void {
    if (this.stream.state === "live" && e.rev) $("#conn").textContent = `● live · rev ${this.stream.lastRev}`;
    switch (e.type) {
      case "task": {
        if (e.dag && e.dag === this.currentId && this.current) {
          // A REST answer at revision R already shows every event up to R.
          if (e.rev !== undefined && e.rev <= this.current.revision) return;
          const t = this.current.tasks.find((x) => x.id === e.task);
          if (t && e.status && (TASK_STATUSES as readonly string[]).includes(e.status)) {
            const prev = t.status;
            t.status = e.status as TaskStatus;
            if (e.attempt !== undefined) t.attempts = e.attempt;
            if (e.retries !== undefined) t.retries = e.retries;
            if (e.worker !== undefined) t.worker = e.worker;
            if (e.event !== undefined) t.event = e.event;
            t.started_at = e.started_at ?? t.started_at;
            t.finished_at = e.finished_at;
            t.retry_at = e.retry_at;
            t.exit_code = e.exit_code ?? null;
            t.error = e.error;
            t.cascade = e.cascade;
            t.cause = e.cause;
            this.graph.setStatus(t.id, t.status, t);
            this.renderCounts();
            this.narrateTask(prev, t);
            if (t.id === this.selected) this.renderTaskPanel();
          }
          // History and output tails come with the next REST read.
          this.refreshCurrent();
        }
        this.refreshList();
        break;
      }
      case "dag": {
        const gone = e.dag ? this.deletedAt.get(e.dag) : undefined;
        // An event of a deleted DAG from before its deletion: not news.
        if (gone !== undefined && (e.rev ?? 0) <= gone) break;
        if (e.dag) {
          // After its deletion: the id was submitted again.
          if (gone !== undefined) this.deletedAt.delete(e.dag);
          const d = this.dags.get(e.dag);
          if (e.dag === this.currentId && this.current && e.status && e.status !== this.current.status && (e.rev ?? 0) > this.current.revision) {
            if (e.run && e.run !== this.current.run) this.say(`DAG ${e.dag}: run ${e.run} started (retry)`, "step");
            else this.say(`DAG ${e.dag} ${e.status}`, e.status === "succeeded" ? "ok" : e.status === "running" ? "info" : "bad");
            this.current.status = e.status as DAGSummary["status"];
            if (e.run) this.current.run = e.run;
            this.renderActions();
          }
          if (d) {
            if (e.status) d.status = e.status as DAGSummary["status"];
            if (e.run) d.run = e.run;
            d.finished_at = e.finished_at;
          } else {
            this.dags.set(e.dag, {
              id: e.dag,
              name: e.name ?? e.dag,
              status: (e.status ?? "running") as DAGSummary["status"],
              run: e.run ?? 1,
              submitted_at: e.submitted_at ?? e.time ?? new Date().toISOString(),
              finished_at: e.finished_at,
              task_count: e.tasks ?? 0,
              counts: {},
            });
          }
          this.renderList();
          this.refreshList();
          if (e.dag === this.currentId) this.refreshCurrent();
        }
        break;
      }
      case "dag_deleted":
        // On request (this page's or another client's) or by retention: the
        // event does not say which.
        if (e.dag) {
          if (e.dag === this.currentId && !this.deleting.has(e.dag)) this.say(`DAG ${e.dag} was deleted (on request or by the retention policy)`, "warn");
          this.forget(e.dag, e.rev ?? 0);
        }
        break;
      case "metrics": {
        if (this.metrics.pushEvent(e)) {
          $("#metrics-src").textContent = `(${this.metrics.source})`;
          this.renderMetricsPanel();
        }
        break;
      }
      case "leader": {
        const who = e.leader ?? "";
        if (who !== this.lastLeader) {
          this.say(who ? `${who} is the leader now` + (this.lastLeader ? ` (was ${this.lastLeader})` : "") : `no leader${this.lastLeader ? ` (${this.lastLeader} is gone)` : ""}: an election is in progress`, who ? "ok" : "warn");
          this.lastLeader = who;
        }
        void this.loadCluster();
        break;
      }
      case "system": {
        const m = e.meta ?? {};
        const node = e.node ?? "a node";
        if (e.event === "crash") {
          this.say(`${node}: scheduler crashed (as kill -9): in-memory state dropped, etcd session abandoned; the HTTP server stays up`, "bad");
        } else if (e.event === "recover") {
          this.say(
            `${node}: scheduler recovered from etcd after ${m.downtime_ms ?? "?"} ms down: replayed to revision ${m.revision ?? "?"}; ` +
              `${m.completed_recovered ?? "?"} task(s) already done, ${m.in_flight ?? "?"} in flight, ${m.failed_recovered ?? "?"} failed`,
            "ok",
          );
        } else {
          const meta = Object.entries(m).map(([k, v]) => `${k}=${v}`).join(" ");
          this.say(`${node}: ${e.event ?? "system event"}${meta ? " (" + meta + ")" : ""}`, "step");
        }
        void this.loadCluster();
        void this.demo.probe();
        break;
      }
      case "gap":
        this.say(`the stream fell behind and dropped ${e.dropped ?? "some"} event(s) after ${e.since ?? "?"}; it replays them from its buffer`, "warn");
        break;
      case "resync":
        this.say(`stream resync after ${e.since ?? "?"}: the server no longer had those events, reloading over REST`, "warn");
        void this.loadList().catch(() => undefined);
        this.refreshCurrent();
        break;
      default:
      // unknown types are ignored, as the stream's contract asks
    }
  }

  /** Narrates the notable transitions between two loads of the current DAG (what events did not already tell). */
  private narrateChanges(a: DAGView, b: DAGView): void {
    if (a.run !== b.run) this.say(`DAG ${b.id}: run ${b.run} started (retry)`, "step");
    const before = new Map(a.tasks.map((t) => [t.id, t]));
    for (const t of b.tasks) {
      const p = before.get(t.id);
      if (p && p.status !== t.status) this.narrateTask(p.status, t);
    }
    if (a.status !== b.status) {
      const tone: Tone = b.status === "succeeded" ? "ok" : b.status === "running" ? "info" : "bad";
      this.say(`DAG ${b.id} ${b.status}`, tone);
    }
  }

  private cascaded: { ids: string[]; cause: string; timer: number } | null = null;

  /** One line per notable task transition; a cascade's tasks are told in one line. */
  private narrateTask(prev: string, t: TaskView): void {
    if (prev === t.status) return;
    if (t.status === "failed") this.say(`${t.id} failed for good after ${t.attempts} attempt(s)${t.error ? ": " + t.error : ""}`, "bad");
    else if (t.status === "retrying") this.say(`${t.id} attempt ${t.attempts} failed${t.error ? " (" + t.error + ")" : ""}; retry at ${fmtTime(t.retry_at)}`, "warn");
    else if (t.status === "running" && t.attempts > 1 && prev !== "retrying" && prev !== "ready")
      this.say(`${t.id} re-dispatched (attempt ${t.attempts}) to ${t.worker ?? "a worker"}`, "info");
    else if (t.status === "upstream_failed") {
      if (!this.cascaded) {
        this.cascaded = {
          ids: [],
          cause: t.cause ?? "a failed task",
          timer: window.setTimeout(() => {
            const c = this.cascaded;
            this.cascaded = null;
            if (c) this.say(`cascade from ${c.cause}: ${c.ids.length} task(s) upstream_failed (${c.ids.slice(0, 6).join(", ")}${c.ids.length > 6 ? ", …" : ""})`, "bad");
          }, 300),
        };
      }
      this.cascaded.ids.push(t.id);
    } else if (t.status === "skipped") this.say(`${t.id} skipped (${t.skipped ?? "by its rule"})`, "info");
  }

  // ---- rendering ---------------------------------------------------------

  renderList(): void {
    const ul = $("#dag-list");
    const items = [...this.dags.values()].sort((a, b) => (b.submitted_at > a.submitted_at ? 1 : b.submitted_at < a.submitted_at ? -1 : a.id < b.id ? -1 : 1));
    $("#dag-count").textContent = items.length ? `(${items.length})` : "";
    ul.replaceChildren(
      ...items.map((d) => {
        const done = d.counts?.succeeded ?? 0;
        const li = h(
          "li",
          { class: d.id === this.currentId ? "active" : "", "data-dag": d.id, title: d.id },
          h("div.dag-name", {}, d.name || d.id),
          h("div.dag-sub", {}, statusBadge(d.status), h("span.muted", {}, ` ${done}/${d.task_count} · ${fmtTime(d.submitted_at)}`)),
        );
        li.addEventListener("click", () => void this.select(d.id));
        return li;
      }),
    );
    if (!items.length) ul.append(h("li.muted.empty", {}, "no DAG yet"));
  }

  renderCounts(): void {
    const host = $("#dag-counts");
    const d = this.current;
    if (!d) {
      host.replaceChildren();
      return;
    }
    let counts: Record<string, number> = {};
    if (d.tasks_truncated) counts = d.counts;
    else for (const t of d.tasks) counts[t.status] = (counts[t.status] ?? 0) + 1;
    host.replaceChildren(
      ...TASK_STATUSES.filter((s) => counts[s]).map((s) => h("span.count", { "data-status": s }, h("i", { style: `background:${STATUS_COLORS[s].bg};border-color:${STATUS_COLORS[s].border}` }), `${s.replace("_", " ")} ${counts[s]}`)),
    );
  }

  renderCurrent(): void {
    const d = this.current;
    $("#graph-empty").hidden = !!d || !!this.currentId;
    if (!d) {
      $("#dag-title").textContent = this.currentId ? `loading ${this.currentId}…` : "No DAG selected";
      $("#dag-status").replaceChildren();
      $("#dag-meta").textContent = "";
      $("#dag-params").replaceChildren();
      this.renderActions();
      this.renderCounts();
      this.renderTaskPanel();
      $("#timeline").replaceChildren();
      return;
    }
    $("#dag-title").textContent = d.name && d.name !== d.id ? `${d.name}` : d.id;
    $("#dag-status").replaceChildren(statusBadge(d.status));
    $("#dag-meta").textContent =
      `${d.id} · run ${d.run} · ${d.tasks_truncated ? `${d.task_count} tasks, drawn by groups` : `${d.tasks.length} tasks`} · submitted ${fmtTime(d.submitted_at)} · rev ${d.revision}` +
      (d.scheduled ? ` · ${d.scheduled.schedule} tick ${fmtTime(d.scheduled.tick)} (interval from ${fmtTime(d.scheduled.interval_start)})` : "") +
      (d.cancel_requested && d.status === "running" ? " · cancel requested: its handlers and notifications run, then it is cancelled" : "");
    const params = d.params ?? {};
    $("#dag-params").replaceChildren(
      ...Object.keys(params)
        .sort()
        .map((k) => h("span.param", { "data-name": k, title: fmtValue(params[k]) }, h("code", {}, k), "=", fmtValue(params[k]))),
    );
    this.renderActions();
    if (d.shape) this.graph.setShape(d.id, d.shape);
    else this.graph.setTasks(d.id, d.tasks);
    if (this.selected) this.graph.select(this.selected);
    const g = $("#graph");
    g.dataset.dag = d.id;
    g.dataset.status = d.status;
    this.renderCounts();
    this.renderTaskPanel();
    if (this.tab === "timeline") this.renderTimeline();
  }

  /** Cancel while it runs, retry once failed or cancelled, delete once finished (and not being deleted). */
  renderActions(): void {
    const d = this.current;
    (document.getElementById("btn-cancel") as HTMLButtonElement).disabled = d?.status !== "running";
    (document.getElementById("btn-retry") as HTMLButtonElement).disabled = !(d?.status === "failed" || d?.status === "cancelled");
    (document.getElementById("btn-delete") as HTMLButtonElement).disabled = !d || d.status === "running" || this.deleting.has(d.id);
  }

  renderTaskPanel(): void {
    const host = $("#task-body");
    const d = this.current;
    if (d?.shape) {
      this.renderBigPanel(host, d);
      return;
    }
    const t = d && this.selected ? d.tasks.find((x) => x.id === this.selected) : undefined;
    if (!d || !t) {
      host.className = "muted";
      host.replaceChildren(d ? "Click a task in the graph or the timeline." : "No DAG selected.");
      return;
    }
    host.className = "";
    renderTask(host, d, t, Date.now(), (id) => this.selectTask(id));
  }

  /**
   * A big DAG's panel: a group of its shape (its counts and a paged list of
   * its tasks), or one task read alone.
   */
  private renderBigPanel(host: HTMLElement, d: DAGView): void {
    const id = this.selected;
    const n = id ? d.shape?.nodes.find((x) => x.id === id) : undefined;
    if (n && n.kind !== "task") {
      renderGroup(host, d, n, (task) => this.selectTask(task));
      return;
    }
    if (!id) {
      host.className = "muted";
      host.replaceChildren("Click a group or a task in the graph: a group lists its tasks.");
      return;
    }
    api.getTask(d.id, id).then(
      (t) => {
        if (this.selected !== id || this.current?.id !== d.id) return;
        host.className = "";
        renderTask(host, d, t, Date.now(), (x) => this.selectTask(x));
      },
      (e: Error) => {
        if (this.selected === id) host.replaceChildren(`could not read task ${id}: ${e.message}`);
      },
    );
  }

  renderTimeline(): void {
    renderTimeline($("#timeline"), this.current, Date.now(), (id) => this.selectTask(id), this.selected);
  }

  renderMetricsPanel(): void {
    renderMetrics($("#metrics-body"), this.metrics.latest, this.metrics.history, this.cluster);
  }

  private nodeTip(id: string | null, x: number, y: number): void {
    const tip = $("#node-tip");
    const n = id && this.current?.shape?.nodes.find((x) => x.id === id);
    if (n && n.kind !== "task") {
      tip.replaceChildren(
        h("b", {}, n.kind === "map" ? `${n.id} (map group)` : `${n.tasks} tasks: ${n.sample.join(", ")}${n.tasks > n.sample.length ? ", …" : ""}`),
        h("div", {}, Object.entries(n.counts).map(([s, c]) => `${c} ${s.replace("_", " ")}`).join(" · ") || "none yet"),
        h("div.muted", {}, "click to list its tasks"),
      );
      tip.hidden = false;
      tip.style.left = x + 14 + "px";
      tip.style.top = y + 14 + "px";
      return;
    }
    const t = id && this.current?.tasks.find((x) => x.id === id);
    if (!t) {
      tip.hidden = true;
      return;
    }
    const rule =
      t.role === "handler" ? "handler" : t.role === "notification" ? "notification" : t.trigger_rule && t.trigger_rule !== "all_success" ? t.trigger_rule : "";
    tip.replaceChildren(
      h("b", {}, t.id),
      " ",
      statusBadge(t.status),
      h("div", {}, `attempts ${t.attempts} · priority ${t.priority}` + (t.worker ? ` · ${t.worker}` : "") + (rule ? ` · ${rule}` : "") + (t.when ? " · when" : "")),
      ...(t.skipped ? [h("div", {}, `skipped: ${t.skipped}`)] : []),
    );
    tip.hidden = false;
    tip.style.left = x + 14 + "px";
    tip.style.top = y + 14 + "px";
  }

  setTab(tab: "graph" | "timeline"): void {
    this.tab = tab;
    $("#tab-graph").classList.toggle("active", tab === "graph");
    $("#tab-timeline").classList.toggle("active", tab === "timeline");
    $("#graph-wrap").hidden = tab !== "graph";
    $("#timeline").hidden = tab !== "timeline";
    if (tab === "timeline") this.renderTimeline();
    else this.graph.resize();
  }

  // ---- polling -----------------------------------------------------------

  async loadCluster(): Promise<void> {
    try {
      const c = await api.cluster();
      this.cluster = c;
      this.clusterErr = "";
      if (this.lastLeader !== null && c.leader !== this.lastLeader) {
        if (c.leader) this.say(`${c.leader} is the leader now` + (this.lastLeader ? ` (was ${this.lastLeader})` : ""), "ok");
        else this.say(`no leader (${this.lastLeader} is gone): standbys are campaigning`, "warn");
      }
      this.lastLeader = c.leader;
      const me = c.replicas?.find((r) => r.name === c.node);
      $("#node-info").replaceChildren(
        "node ",
        h("b", {}, c.node),
        me ? h("span", { class: "role-" + me.role }, ` · ${me.role}`) : "",
        ` · applied rev ${c.applied_revision}` + (c.lag ? ` · lag ${c.lag}` : ""),
      );
    } catch (e) {
      this.clusterErr = (e as Error).message;
    }
    renderCluster($("#cluster-body"), this.cluster, this.clusterErr);
    this.renderMetricsPanel(); // its slots tile may come from the cluster
  }

  async loadSchedules(): Promise<void> {
    try {
      this.schedules = (await scheduleAPI.list()).schedules;
      this.schedulesErr = "";
      if (this.scheduleOpen) this.scheduleRuns = (await scheduleAPI.runs(this.scheduleOpen)).runs;
    } catch (e) {
      this.schedulesErr = (e as Error).message;
    }
    renderSchedules($("#schedules-body"), this.schedules, this.schedulesErr, this.scheduleOpen, this.scheduleRuns, {
      open: (id) => void this.select(id),
      expand: (id) => {
        this.scheduleOpen = this.scheduleOpen === id ? "" : id;
        this.scheduleRuns = [];
        void this.loadSchedules();
      },
      act: (id, verb) => {
        scheduleAPI.act(id, verb).then(
          () => {
            this.say(`schedule ${id}: ${verb === "trigger" ? "run started" : verb + "d"}`, "ok");
            void this.loadSchedules();
          },
          (e: Error) => this.say(`schedule ${id}: ${verb} failed: ${e.message}`, "warn"),
        );
      },
    });
  }

  /** /metrics: the fallback when the stream sends no metrics, and the source of leader changes and takeover time. */
  async loadMetrics(): Promise<void> {
    try {
      const text = await api.metricsText();
      const snap = new Snapshot(Date.now(), parseProm(text));
      if (Date.now() - this.metrics.lastEventAt < 3500) {
        this.metrics.mergeProm(snap);
      } else {
        this.metrics.push(snap);
        $("#metrics-src").textContent = this.node ? `(/metrics of ${this.node})` : "";
      }
    } catch {
      // the panel keeps the last sample
    }
    this.renderMetricsPanel();
  }

  // ---- actions -----------------------------------------------------------

  async submit(text: string): Promise<string | null> {
    const msg = $("#submit-msg");
    msg.className = "msg";
    if (!text.trim()) {
      msg.textContent = "Nothing to submit: pick a template or paste a DAG.";
      msg.classList.add("bad");
      return null;
    }
    const btn = document.getElementById("btn-submit") as HTMLButtonElement;
    btn.disabled = true;
    msg.textContent = "submitting…";
    try {
      const r = await api.submit(text);
      msg.textContent = r.created ? `Submitted: ${r.id}` : `Already submitted: ${r.id} (same id and content)`;
      msg.classList.add("ok");
      this.say(`submitted DAG ${r.id}` + (r.created ? "" : " (it already existed)"), "step");
      await this.select(r.id);
      this.refreshList();
      return r.id;
    } catch (e) {
      const err = e as APIError;
      msg.replaceChildren(h("b", {}, `${err.status || ""} ${err.code ?? "error"}: `), err.message);
      if (Array.isArray(err.details) && err.details.length) {
        msg.append(h("ul", {}, ...err.details.map((d) => h("li", {}, typeof d === "string" ? d : JSON.stringify(d)))));
      }
      msg.classList.add("bad");
      return null;
    } finally {
      btn.disabled = false;
    }
  }

  async cancel(): Promise<void> {
    if (!this.currentId) return;
    try {
      const r = await api.cancel(this.currentId);
      this.say(`cancel ${r.id}: ${r.status}; running attempts are being killed`, "warn");
    } catch (e) {
      this.say(`cancel failed: ${(e as Error).message}`, "bad");
    }
    this.refreshCurrent();
  }

  async retry(): Promise<void> {
    if (!this.currentId) return;
    try {
      const r = await api.retry(this.currentId);
      this.say(`retry ${r.id}: ${r.status}; tasks that did not succeed run again with fresh retry budgets`, "step");
    } catch (e) {
      this.say(`retry failed: ${(e as Error).message}`, "bad");
    }
    this.refreshCurrent();
  }

  /**
   * Deletes the finished DAG shown, once confirmed; the page then leaves it
   * for the list, as when any deletion reaches it. A refusal (409 while it
   * runs or stops its attempts) is told with the server's message.
   */
  async deleteDAG(): Promise<void> {
    const d = this.current;
    if (!d || d.id !== this.currentId || this.deleting.has(d.id)) return;
    const id = d.id;
    const name = d.name && d.name !== id ? `${d.name} (${id})` : id;
    if (!window.confirm(`Delete DAG ${name} and its ${d.tasks.length} task(s)? Their records and logs go too; this cannot be undone.`)) return;
    this.deleting.add(id);
    this.renderActions();
    try {
      const r = await api.deleteDAG(id);
      this.say(`deleted DAG ${r.body.id} with its ${d.tasks.length} task(s)`, "step");
      this.forget(id, r.revision);
    } catch (e) {
      if (e instanceof APIError && e.status === 404) {
        this.say(`DAG ${id} was deleted already (${e.message})`, "warn");
        this.forget(id, 0);
      } else {
        this.say(`delete failed: ${(e as Error).message}`, "bad");
      }
    } finally {
      this.deleting.delete(id);
    }
    if (this.currentId === id) {
      this.renderActions();
      this.refreshCurrent();
    }
  }
}

// ---- bootstrap ------------------------------------------------------------

function legend(): HTMLElement[] {
  return TASK_STATUSES.map((s) => h("span.lg", {}, h("i", { style: `background:${STATUS_COLORS[s].bg};border-color:${STATUS_COLORS[s].border}` }), s.replace("_", " ")));
}

async function boot(): Promise<void> {
  const app = new App();
  (window as unknown as { orion: App }).orion = app; // for the browser tests and the curious
  installHelp(document.body);
  $("#legend").replaceChildren(...legend());

  // Templates.
  const text = document.getElementById("dag-text") as HTMLTextAreaElement;
  const tpl = $("#templates");
  for (const t of TEMPLATES) {
    const b = h("button", { type: "button", class: "tpl", "data-template": t.key, title: t.description }, t.title);
    b.addEventListener("click", () => {
      text.value = formatDAG(t.dag());
      tpl.querySelectorAll(".tpl").forEach((x) => x.classList.toggle("active", x === b));
      const m = $("#submit-msg");
      m.className = "msg";
      m.textContent = t.description;
    });
    tpl.append(b);
  }
  $("#btn-submit").addEventListener("click", () => void app.submit(text.value));
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) void app.submit(text.value);
  });
  const file = document.getElementById("dag-file") as HTMLInputElement;
  file.addEventListener("change", async () => {
    const f = file.files?.[0];
    if (!f) return;
    text.value = await f.text();
    $("#submit-msg").textContent = `loaded ${f.name} (${f.size} bytes): press Submit`;
    file.value = "";
  });
  // Drop a file anywhere on the editor.
  text.addEventListener("dragover", (e) => e.preventDefault());
  text.addEventListener("drop", async (e) => {
    const f = e.dataTransfer?.files?.[0];
    if (!f) return;
    e.preventDefault();
    text.value = await f.text();
  });

  $("#btn-cancel").addEventListener("click", () => void app.cancel());
  $("#btn-retry").addEventListener("click", () => void app.retry());
  $("#btn-delete").addEventListener("click", () => void app.deleteDAG());
  $("#tab-graph").addEventListener("click", () => app.setTab("graph"));
  $("#tab-timeline").addEventListener("click", () => app.setTab("timeline"));
  $("#zoom-in").addEventListener("click", () => app.graph.zoomBy(1.4));
  $("#zoom-out").addEventListener("click", () => app.graph.zoomBy(1 / 1.4));
  $("#zoom-fit").addEventListener("click", () => app.graph.fit());
  window.addEventListener("resize", () => {
    app.graph.resize();
    if (app.tab === "timeline") app.renderTimeline();
  });

  // Auth: a 401 shows the token field.
  const auth = $("#auth");
  setOnUnauthorized(() => {
    auth.hidden = false;
  });
  $("#auth-save").addEventListener("click", () => {
    setToken((document.getElementById("auth-token") as HTMLInputElement).value.trim());
    location.reload();
  });
  if (token()) auth.hidden = true;

  // First load, then the stream from the revision the list reflects.
  let rev = 0;
  for (let i = 0; ; i++) {
    try {
      rev = await app.loadList();
      break;
    } catch (e) {
      app.say(`cannot list DAGs yet: ${(e as Error).message}`, "warn");
      await new Promise((r) => setTimeout(r, Math.min(500 * 2 ** i, 4000)));
    }
  }
  app.stream.start(rev);
  const params = new URLSearchParams(location.hash.slice(1));
  const want = params.get("dag");
  if (want) await app.select(want, params.get("task"));
  else {
    const running = [...app.dags.values()].find((d) => d.status === "running");
    if (running) await app.select(running.id);
  }
  // Start with a template in the editor.
  (tpl.querySelector('[data-template="diamond"]') as HTMLButtonElement | null)?.click();

  // Polls: the cluster every 1.5 s, metrics every 2 s; the current DAG and
  // the list only while the stream is not live (events drive them otherwise);
  // the timeline's running bars grow every second.
  void app.loadCluster();
  void app.loadMetrics();
  void app.loadSchedules();
  setInterval(() => void app.loadCluster(), 1500);
  setInterval(() => void app.loadSchedules(), 2000);
  setInterval(() => void app.loadMetrics(), 2000);
  setInterval(() => {
    if (app.stream.state !== "live") {
      app.refreshCurrent();
      app.refreshList();
    }
    if (app.current?.status === "running") {
      if (app.tab === "timeline") app.renderTimeline();
      if (app.selected) app.renderTaskPanel();
    }
  }, 1000);
  // Demo mode does not change while a server runs: ask once.
  void app.demo.probe();
}

void boot();
