// Demo mode (orion server --demo): "Pull the plug" crashes the leader's
// scheduler as kill -9 would (POST /api/v1/demo/crash: its in-memory
// state is dropped and its etcd session abandoned; the HTTP server stays
// up, so the page stays connected), "Recover" starts a new scheduler there
// from etcd (POST /api/v1/demo/recover), and "Auto-demo" runs submit → execute →
// kill the leader → takeover → finish in one click, narrating each step.
// The controls show only when GET /api/v1/demo/status says {"demo": true}.
import { api } from "./api";
import { fmtDuration, ms } from "./dom";
import type { App } from "./main";
import { formatDAG } from "./templates";
import type { ClusterResponse, DAGView } from "./types";

const sleep = (msec: number) => new Promise((r) => setTimeout(r, msec));

/** The DAG the auto-demo submits: long enough to crash the leader halfway. */
export function autoDemoDAG() {
  const tasks: { id: string; kind: "shell"; command: string; depends_on?: string[]; priority?: number }[] = [];
  tasks.push({ id: "prepare", kind: "shell", command: 'echo "preparing the batch"; sleep 0.5; echo ready' });
  const mids: string[] = [];
  for (let i = 1; i <= 16; i++) {
    const id = `work-${String(i).padStart(2, "0")}`;
    mids.push(id);
    const secs = (1.0 + ((i * 37) % 10) / 10).toFixed(1);
    tasks.push({
      id,
      kind: "shell",
      command: `echo "${id} (attempt $ORION_ATTEMPT)"; sleep ${secs}; echo "${id}: processed ${i * 100} items"`,
      depends_on: ["prepare"],
      priority: i % 3,
    });
  }
  const aggs: string[] = [];
  for (let g = 0; g < 4; g++) {
    const id = `aggregate-${g + 1}`;
    aggs.push(id);
    tasks.push({ id, kind: "shell", command: `echo "${id}"; sleep 0.4; echo "${id}: ok"`, depends_on: mids.slice(g * 4, g * 4 + 4) });
  }
  tasks.push({ id: "report", kind: "shell", command: 'echo "all aggregates done"; echo "report ready"', depends_on: aggs });
  return { name: "auto-demo: failover", tasks };
}

/** A replica the demo crashed: where to send its recover. */
interface Crashed {
  name: string;
  base: string; // "" for this page's server, else its name (controls are relayed to it)
  at: number;
}

export class Demo {
  enabled = false;
  running = true; // this page's server's scheduler
  busy = false;
  crashed: Crashed | null = null;
  private bound = false;

  constructor(private readonly app: App) {}

  /** Asks GET /api/v1/demo/status; retries later when the server did not answer. */
  async probe(): Promise<void> {
    let st;
    try {
      st = await api.demoStatus();
    } catch {
      setTimeout(() => void this.probe(), 5000);
      return;
    }
    this.enabled = st?.demo === true;
    this.running = st?.running !== false;
    if (st && st.running === false && !this.crashed) this.crashed = { name: this.app.cluster?.node ?? "", base: "", at: ms(st.last_crash) ?? Date.now() };
    const box = document.getElementById("demo-controls");
    if (!box) return;
    box.hidden = !this.enabled;
    if (this.enabled && !this.bound) {
      this.bound = true;
      document.getElementById("btn-crash")?.addEventListener("click", () => void this.run(() => this.pullThePlug()));
      document.getElementById("btn-recover")?.addEventListener("click", () => void this.run(() => this.recover()));
      document.getElementById("btn-autodemo")?.addEventListener("click", () => void this.run(() => this.autoDemo()));
    }
    this.updateButtons();
  }

  private updateButtons(): void {
    const set = (id: string, disabled: boolean) => {
      const b = document.getElementById(id) as HTMLButtonElement | null;
      if (b) b.disabled = disabled;
    };
    set("btn-crash", this.busy);
    set("btn-autodemo", this.busy);
    set("btn-recover", this.busy || !this.crashed);
  }

  private async run(fn: () => Promise<unknown>): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    this.updateButtons();
    try {
      await fn();
    } catch (e) {
      this.app.say(`demo step failed: ${(e as Error).message}`, "bad");
    } finally {
      this.busy = false;
      await this.probe();
    }
  }

  private async cluster(): Promise<ClusterResponse | null> {
    try {
      const c = await api.cluster();
      this.app.cluster = c;
      return c;
    } catch {
      return null;
    }
  }

  /** Polls the cluster until pred holds; returns the matching answer or null on timeout. */
  private async waitCluster(pred: (c: ClusterResponse) => boolean, timeoutMs: number, everyMs = 200): Promise<ClusterResponse | null> {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      const c = await this.cluster();
      if (c && pred(c)) return c;
      await sleep(everyMs);
    }
    return null;
  }

  /** Crashes the leader's scheduler. Returns what it crashed and whether it is a lone node. */
  async pullThePlug(): Promise<{ crashed: Crashed; single: boolean }> {
    const c = await this.cluster();
    const here = c?.node ?? "";
    const leader = c?.leader || here;
    const single = !c || (c.replicas ?? []).length <= 1;
    // The replica serving this page relays the request to the one named
    // (same origin: the page never calls another replica directly).
    const base = leader !== here ? leader : "";
    this.app.say(
      `pulling the plug on ${leader}${leader === here ? " (the node serving this page)" : ""}: its scheduler stops as kill -9 would, mid-commit; ` +
        "its in-memory state is gone and its etcd session is abandoned, not resigned",
      "step",
    );
    const at = Date.now();
    await api.crash(base);
    const crashed = { name: leader, base, at };
    this.crashed = crashed;
    if (single) {
      this.app.say(
        "a lone node: nothing runs until its scheduler recovers, but every acknowledged change is in etcd. The page stays connected: the HTTP server is up",
        "warn",
      );
    } else {
      void this.watchTakeover(leader, at);
    }
    return { crashed, single };
  }

  /** Narrates the takeover after the leader was crashed at `at`. */
  async watchTakeover(old: string, at: number): Promise<string | null> {
    const gone = await this.waitCluster((c) => c.leader !== old, 15000, 100);
    if (!gone) {
      this.app.say(`${old} still counts as leader after 15 s`, "bad");
      return null;
    }
    if (!gone.leader) {
      this.app.say(`${old}'s lease is gone: standbys campaign for the election key`, "warn");
    }
    const c = gone.leader ? gone : await this.waitCluster((x) => !!x.leader, 20000, 100);
    if (!c) {
      this.app.say("no new leader after 20 s", "bad");
      return null;
    }
    const r = c.replicas.find((x) => x.name === c.leader);
    const first = ms(r?.first_commit_at);
    const took = first && first > at ? first - at : Date.now() - at;
    this.app.say(
      `${c.leader} took over: it won the election, caught up on the watch to revision ${r?.applied_revision ?? "?"}, wrote its term record ` +
        `and committed its first fenced write ${fmtDuration(took)} after the crash`,
      "ok",
    );
    this.app.say("workers reconnect to the new leader and report their running attempts, which it adopts; attempts nobody reports are re-queued", "info");
    return c.leader;
  }

  /** Recovers the replica the demo crashed (this page's server if none is known). */
  async recover(): Promise<void> {
    const target = this.crashed ?? { name: this.app.cluster?.node ?? "this node", base: "", at: Date.now() };
    const before = Date.now();
    this.app.say(`recover ${target.name}: a new scheduler loads the state from etcd (a snapshot read of /orion/v1/, then the watch from its revision)`, "step");
    const r = await api.recover(target.base);
    this.crashed = null;
    const down = typeof r.downtime_ms === "number" ? ` after ${fmtDuration(r.downtime_ms)} down` : "";
    const c = await this.waitCluster((x) => !!x.leader, 20000, 150);
    if (!c) {
      this.app.say(`${target.name} recovered${down}, but there is no leader 20 s later`, "bad");
      return;
    }
    const rep = c.replicas.find((x) => x.name === target.name);
    const role = c.leader === target.name ? "leads again" : `follows ${c.leader} as a standby`;
    this.app.say(
      `${target.name} recovered${down} in ${fmtDuration(Date.now() - before)} and ${role}; applied revision ${rep?.applied_revision ?? c.applied_revision}. ` +
        "Tasks that were running when it crashed are orphans: they run again",
      "ok",
    );
    this.app.refreshCurrent();
  }

  private async waitDAG(id: string, pred: (d: DAGView) => boolean, timeoutMs: number): Promise<DAGView | null> {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      try {
        const d = await api.getDAG(id);
        if (pred(d)) return d;
      } catch {
        // no scheduler for a moment
      }
      await sleep(250);
    }
    return null;
  }

  async autoDemo(): Promise<void> {
    const t0 = Date.now();
    this.app.say("auto-demo 1/5: submit a DAG of 22 shell tasks (prepare → 16 parallel workers → 4 aggregates → report)", "step");
    const text = document.getElementById("dag-text") as HTMLTextAreaElement | null;
    const body = formatDAG(autoDemoDAG());
    if (text) text.value = body;
    const id = await this.app.submit(body);
    if (!id) throw new Error("the submission failed");

    this.app.say("auto-demo 2/5: execute. Ready tasks (in-degree 0) leave the priority heap for free slots", "step");
    const mid = await this.waitDAG(id, (d) => d.status !== "running" || d.tasks.filter((t) => t.status === "succeeded").length >= 5, 60000);
    if (!mid) throw new Error("the DAG made no progress in 60 s");
    if (mid.status !== "running") {
      this.app.say(`the DAG ${mid.status} before the crash could happen`, "warn");
      return;
    }

    this.app.say("auto-demo 3/5: kill the leader", "step");
    const { crashed, single } = await this.pullThePlug();

    this.app.say(single ? "auto-demo 4/5: recover the lone node: it replays the log from etcd" : "auto-demo 4/5: watch a standby take over", "step");
    if (single) {
      await sleep(2500);
      await this.recover();
    } else {
      const c = await this.waitCluster((x) => !!x.leader && x.leader !== crashed.name, 25000, 150);
      if (!c) throw new Error("no standby took over in 25 s");
    }

    this.app.say("auto-demo 5/5: let the DAG finish", "step");
    const end = await this.waitDAG(id, (d) => d.status !== "running", 120000);
    if (!end) throw new Error("the DAG did not finish in 120 s");
    const reran = end.tasks.filter((t) => t.attempts > 1);
    this.app.say(
      `auto-demo done: DAG ${end.status} in ${fmtDuration(Date.now() - t0)}; ` +
        `${reran.length} task(s) ran more than once (attempts in flight at the crash), no task was lost`,
      end.status === "succeeded" ? "ok" : "bad",
    );
    if (!single && this.crashed) {
      // Bring the crashed replica back as a standby.
      await this.recover();
    }
  }
}
