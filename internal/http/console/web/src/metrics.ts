// Live metrics: the replica's Prometheus text (/metrics, polled) and the
// stream's "metrics" events, turned into rates and a few percentiles.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the Prometheus text exposition format (the subset Go's client writes). */
export function parseProm(text: string): Sample[] {
  const out: Sample[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let lm: RegExpExecArray | null;
      while ((lm = re.exec(m[3]))) labels[lm[1]] = lm[2].replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    }
    const v = m[4] === "+Inf" ? Infinity : m[4] === "-Inf" ? -Infinity : Number(m[4]);
    out.push({ name: m[1], labels, value: v });
  }
  return out;
}

export class Snapshot {
  constructor(
    readonly at: number,
    readonly samples: Sample[],
  ) {}
  get(name: string, labels: Record<string, string> = {}): number | undefined {
    const s = this.samples.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
    return s?.value;
  }
  sum(name: string): number | undefined {
    const xs = this.samples.filter((x) => x.name === name);
    return xs.length ? xs.reduce((a, b) => a + b.value, 0) : undefined;
  }
  byLabel(name: string, label: string): Map<string, number> {
    const m = new Map<string, number>();
    for (const s of this.samples) if (s.name === name && s.labels[label] !== undefined) m.set(s.labels[label], s.value);
    return m;
  }
  /** Cumulative buckets of a histogram: [upper bound, count]. */
  buckets(name: string): [number, number][] {
    return this.samples
      .filter((s) => s.name === name + "_bucket")
      .map((s) => [s.labels.le === "+Inf" ? Infinity : Number(s.labels.le), s.value] as [number, number])
      .sort((a, b) => a[0] - b[0]);
  }
}

/** The q-quantile of a histogram given as cumulative buckets, linearly interpolated. */
export function quantile(q: number, buckets: [number, number][]): number | undefined {
  if (!buckets.length) return undefined;
  const total = buckets[buckets.length - 1][1];
  if (!(total > 0)) return undefined;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const [le, c] of buckets) {
    if (c >= rank) {
      if (le === Infinity) return prevLe;
      const inBucket = c - prevCount;
      return inBucket > 0 ? prevLe + (le - prevLe) * ((rank - prevCount) / inBucket) : le;
    }
    prevLe = le;
    prevCount = c;
  }
  return prevLe;
}

export interface Derived {
  at: number;
  throughput?: number; // tasks finished per second (succeeded + failed for good)
  succeededRate?: number;
  queue?: number;
  running?: number;
  retries?: number; // total retried attempts
  retriesRate?: number;
  dropped?: number;
  dispatchP50?: number; // seconds, over the last interval (all time when idle)
  dispatchP99?: number;
  isLeader?: boolean;
  leaderChanges?: number;
  takeover?: number;
  appliedRevision?: number;
  tasksTotal?: number;
  workerSlots: Map<string, number>;
  workerBusy: Map<string, number>;
}

/** Keeps the last snapshots and derives rates between them. */
export class MetricsModel {
  private prev: Snapshot | null = null;
  history: Derived[] = [];
  latest: Derived | null = null;

  push(s: Snapshot): Derived {
    const p = this.prev;
    const dt = p ? (s.at - p.at) / 1000 : 0;
    const rate = (name: string) => {
      if (!p || dt <= 0) return undefined;
      const a = p.get(name);
      const b = s.get(name);
      if (a === undefined || b === undefined) return undefined;
      return Math.max(0, b - a) / dt;
    };
    const succ = rate("orion_tasks_succeeded_total");
    const fail = rate("orion_tasks_failed_total");
    let b = s.buckets("orion_dispatch_latency_seconds");
    if (p) {
      const pb = p.buckets("orion_dispatch_latency_seconds");
      const delta = b.map(([le, c], i) => [le, c - (pb[i]?.[1] ?? 0)] as [number, number]);
      if (delta.length && delta[delta.length - 1][1] > 0) b = delta;
    }
    const d: Derived = {
      at: s.at,
      throughput: succ === undefined ? undefined : succ + (fail ?? 0),
      succeededRate: succ,
      queue: s.get("orion_queue_size"),
      running: s.get("orion_tasks_running"),
      retries: s.get("orion_tasks_retried_total"),
      retriesRate: rate("orion_tasks_retried_total"),
      dropped: s.get("orion_dropped_events_total"),
      dispatchP50: quantile(0.5, b),
      dispatchP99: quantile(0.99, b),
      isLeader: s.get("orion_is_leader") === 1,
      leaderChanges: s.get("orion_leader_changes_total"),
      takeover: s.get("orion_last_takeover_seconds"),
      appliedRevision: s.get("orion_applied_revision"),
      tasksTotal: s.sum("orion_tasks"),
      workerSlots: s.byLabel("orion_worker_slots", "worker"),
      workerBusy: s.byLabel("orion_worker_busy_slots", "worker"),
    };
    this.prev = s;
    this.latest = d;
    this.history.push(d);
    if (this.history.length > 90) this.history.shift();
    return d;
  }

  /** When the last "metrics" event arrived (0: never). */
  lastEventAt = 0;
  source = "";

  /**
   * Takes a "metrics" event of the stream (internal/http/events: {type, time,
   * metrics: {...}}), sent every second by the replica the page follows.
   */
  pushEvent(ev: Record<string, unknown>): Derived | null {
    const m = (ev.metrics ?? null) as Record<string, unknown> | null;
    if (!m || typeof m !== "object") return null;
    const num = (v: unknown) => (typeof v === "number" && isFinite(v) ? v : undefined);
    const totals = (m.totals ?? {}) as Record<string, unknown>;
    const slots = new Map<string, number>();
    const busy = new Map<string, number>();
    for (const w of (Array.isArray(m.workers) ? m.workers : []) as Record<string, unknown>[]) {
      const id = String(w.id ?? "");
      slots.set(id, num(w.slots) ?? 0);
      busy.set(id, num(w.busy) ?? 0);
    }
    const prev = this.latest;
    const at = Date.now();
    const retries = num(totals.retried);
    const p50 = num(m.dispatch_p50_ms);
    const p99 = num(m.dispatch_p99_ms);
    const d: Derived = {
      at,
      throughput: num(m.throughput),
      queue: num(m.queue_size),
      running: num(m.running),
      retries,
      retriesRate:
        prev && prev.retries !== undefined && retries !== undefined && at > prev.at ? Math.max(0, retries - prev.retries) / ((at - prev.at) / 1000) : undefined,
      dropped: num(m.dropped_events),
      // Present only where dispatches happened in the window: keep the last.
      dispatchP50: p50 !== undefined ? p50 / 1000 : prev?.dispatchP50,
      dispatchP99: p99 !== undefined ? p99 / 1000 : prev?.dispatchP99,
      isLeader: m.role === "leader",
      leaderChanges: prev?.leaderChanges,
      takeover: prev?.takeover,
      appliedRevision: num(m.revision),
      workerSlots: slots.size ? slots : (prev?.workerSlots ?? new Map()),
      workerBusy: busy.size ? busy : (prev?.workerBusy ?? new Map()),
    };
    this.lastEventAt = at;
    this.source = `stream from ${String(m.node ?? "?")} (${String(m.role ?? "?")})`;
    this.latest = d;
    this.history.push(d);
    if (this.history.length > 90) this.history.shift();
    return d;
  }

  /** Merges what only /metrics has (leader changes, takeover) into the latest sample. */
  mergeProm(s: Snapshot): void {
    if (!this.latest) return;
    this.latest.leaderChanges = s.get("orion_leader_changes_total");
    this.latest.takeover = s.get("orion_last_takeover_seconds");
  }
}

/** A small SVG sparkline of a series. */
export function sparkline(values: (number | undefined)[], w = 160, h = 32, color = "#2563eb"): SVGSVGElement {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", String(w));
  svg.setAttribute("height", String(h));
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("class", "spark");
  const vs = values.map((v) => (v === undefined || !isFinite(v) ? 0 : v));
  const max = Math.max(1, ...vs);
  if (vs.length > 1) {
    const pts = vs.map((v, i) => `${((i / (vs.length - 1)) * (w - 2) + 1).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`);
    const area = document.createElementNS(NS, "polygon");
    area.setAttribute("points", `1,${h - 1} ${pts.join(" ")} ${w - 1},${h - 1}`);
    area.setAttribute("fill", color);
    area.setAttribute("opacity", "0.15");
    svg.appendChild(area);
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "1.5");
    svg.appendChild(line);
  }
  return svg;
}
