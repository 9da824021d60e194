// The Gantt view of a DAG's run: one row per task, one bar per attempt (from
// history[] and the current attempt's started_at/finished_at), the retry
// waits between attempts (up to retry_at while a task is retrying), and the
// time a task spent queued, estimated from when its last dependency finished.
import { fmtDuration, fmtTime, ms } from "./dom";
import type { DAGView, TaskView } from "./types";

const NS = "http://www.w3.org/2000/svg";

export interface Segment {
  kind: "queued" | "attempt" | "retry_wait" | "cascade";
  from: number;
  to: number;
  outcome?: string; // for attempts: succeeded, failed, timeout, running, cancelled, ...
  attempt?: number;
  worker?: string;
  detail?: string;
}

export interface Row {
  task: TaskView;
  segments: Segment[];
  first: number; // sort key
}

const COLORS: Record<string, string> = {
  queued: "#cbd5e1",
  running: "#2563eb",
  succeeded: "#16a34a",
  failed: "#dc2626",
  timeout: "#b91c1c",
  cancelled: "#6b7280",
  orphaned: "#7c3aed",
  retry_wait: "#f59e0b",
  cascade: "#f87171",
  other: "#64748b",
};

function attemptColor(outcome = ""): string {
  if (COLORS[outcome]) return COLORS[outcome];
  if (/fail|error|exit/.test(outcome)) return COLORS.failed;
  if (/orphan|requeue|lost/.test(outcome)) return COLORS.orphaned;
  if (/cancel/.test(outcome)) return COLORS.cancelled;
  return COLORS.other;
}

/** Computes every task's bars. Pure, so it can be tested apart from drawing. */
export function buildRows(d: DAGView, now: number): { rows: Row[]; t0: number; t1: number } {
  const byId = new Map(d.tasks.map((t) => [t.id, t]));
  const submitted = ms(d.submitted_at) ?? now;
  let t0 = submitted;
  let t1 = submitted + 1000;
  const rows: Row[] = [];
  for (const t of d.tasks) {
    const segs: Segment[] = [];
    // When it became ready: its last dependency's finish (or submission).
    let readyAt = submitted;
    for (const dep of t.depends_on) {
      const f = ms(byId.get(dep)?.finished_at);
      if (f !== undefined && f > readyAt) readyAt = f;
    }
    const attempts = [...(t.history ?? [])].map((h) => ({
      attempt: h.attempt,
      worker: h.worker,
      start: ms(h.started_at),
      end: ms(h.finished_at),
      outcome: h.outcome,
      detail: h.error || (h.exit_code !== undefined && h.exit_code !== null ? `exit ${h.exit_code}` : ""),
    }));
    const curStart = ms(t.started_at);
    if (curStart !== undefined && !t.cascade && t.attempts > 0) {
      const end = ms(t.finished_at);
      let outcome: string = t.status;
      if (t.status === "retrying" || t.status === "pending" || t.status === "ready") outcome = end !== undefined ? (t.event === "timeout" ? "timeout" : "failed") : "orphaned";
      if (t.status === "upstream_failed") outcome = "cancelled";
      attempts.push({
        attempt: t.attempts,
        worker: t.worker,
        start: curStart,
        end: end ?? (t.status === "running" ? now : undefined),
        outcome,
        detail: t.error || (t.exit_code !== null && t.exit_code !== undefined ? `exit ${t.exit_code}` : ""),
      });
    }
    const first = attempts.find((a) => a.start !== undefined)?.start;
    if (first !== undefined && readyAt < first) {
      segs.push({ kind: "queued", from: readyAt, to: first, detail: "waiting for a slot (from its last dependency's finish)" });
    }
    let prevEnd: number | undefined;
    for (const a of attempts) {
      if (a.start === undefined) continue;
      if (prevEnd !== undefined && a.start > prevEnd) {
        segs.push({ kind: "retry_wait", from: prevEnd, to: a.start, attempt: a.attempt, detail: `backoff before attempt ${a.attempt}` });
      }
      const end = a.end ?? a.start;
      segs.push({ kind: "attempt", from: a.start, to: end, outcome: a.outcome, attempt: a.attempt, worker: a.worker, detail: a.detail });
      prevEnd = end;
    }
    const retryAt = ms(t.retry_at);
    if (t.status === "retrying" && prevEnd !== undefined) {
      const to = Math.max(retryAt ?? now, prevEnd);
      segs.push({ kind: "retry_wait", from: prevEnd, to, attempt: t.attempts + 1, detail: `backoff until ${fmtTime(t.retry_at)}` });
    } else if (t.status === "ready") {
      const from = prevEnd ?? readyAt;
      if (now > from) segs.push({ kind: "queued", from, to: now, detail: "ready, waiting for a slot" });
    }
    if (t.status === "upstream_failed" || (t.cascade && t.status === "cancelled")) {
      const at = ms(t.finished_at) ?? readyAt;
      segs.push({ kind: "cascade", from: at, to: at, detail: t.cause ? `upstream ${t.cause} failed` : "upstream failed" });
    }
    for (const s of segs) {
      t0 = Math.min(t0, s.from);
      t1 = Math.max(t1, s.to);
    }
    rows.push({ task: t, segments: segs, first: first ?? (segs.length ? segs[0].from : Number.MAX_SAFE_INTEGER) });
  }
  if (d.status === "running") t1 = Math.max(t1, now);
  rows.sort((a, b) => a.first - b.first);
  return { rows, t0, t1 };
}

function el<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>, title?: string): SVGElementTagNameMap[K] {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (title) {
    const t = document.createElementNS(NS, "title");
    t.textContent = title;
    e.appendChild(t);
  }
  return e;
}

function niceStep(span: number, px: number): number {
  const target = span / Math.max(1, px / 90);
  const steps = [50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 1800000, 3600000];
  return steps.find((s) => s >= target) ?? 3600000;
}

export function renderTimeline(host: HTMLElement, d: DAGView | null, now: number, onSelect: (task: string) => void, selected: string | null): void {
  host.replaceChildren();
  if (!d) return;
  const { rows, t0, t1 } = buildRows(d, now);
  const width = Math.max(host.clientWidth - 4, 480);
  const labelW = 150;
  const rowH = rows.length > 60 ? 13 : 22;
  const axisH = 24;
  const plotW = width - labelW - 12;
  const span = Math.max(t1 - t0, 1);
  const x = (t: number) => labelW + ((t - t0) / span) * plotW;
  const height = axisH + rows.length * rowH + 8;
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "gantt", role: "img", "aria-label": "timeline of attempts" });

  const defs = el("defs", {});
  const pat = el("pattern", { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
  pat.appendChild(el("rect", { width: 6, height: 6, fill: "#fde68a" }));
  pat.appendChild(el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: COLORS.retry_wait, "stroke-width": 3 }));
  defs.appendChild(pat);
  svg.appendChild(defs);

  // Axis: seconds since the DAG was submitted.
  const step = niceStep(span, plotW);
  for (let t = 0; t <= span + 1; t += step) {
    const xx = x(t0 + t);
    svg.appendChild(el("line", { x1: xx, y1: axisH - 4, x2: xx, y2: height, stroke: "#e5e7eb" }));
    const label = el("text", { x: xx + 2, y: 14, "font-size": 10, fill: "#6b7280" });
    label.textContent = step < 1000 ? `${(t / 1000).toFixed(2)}s` : fmtDuration(t);
    svg.appendChild(label);
  }
  rows.forEach((r, i) => {
    const y = axisH + i * rowH;
    const g = el("g", { class: "row", "data-task": r.task.id, cursor: "pointer" });
    if (r.task.id === selected) g.appendChild(el("rect", { x: 0, y, width, height: rowH, fill: "#fce7f3" }));
    else if (i % 2) g.appendChild(el("rect", { x: 0, y, width, height: rowH, fill: "#f8fafc" }));
    if (rowH >= 13) {
      const lt = el("text", { x: 4, y: y + rowH - (rowH > 16 ? 7 : 3), "font-size": rowH > 16 ? 11 : 9, fill: "#111827", "font-family": "ui-monospace, monospace" });
      lt.textContent = r.task.id.length > 22 ? r.task.id.slice(0, 21) + "…" : r.task.id;
      g.appendChild(lt);
    }
    const bh = rowH - 6;
    for (const s of r.segments) {
      const x1 = x(s.from);
      const w = Math.max(x(s.to) - x1, 2);
      const when = `${fmtTime(new Date(s.from).toISOString())} → ${fmtTime(new Date(s.to).toISOString())} (${fmtDuration(s.to - s.from)})`;
      if (s.kind === "queued") {
        g.appendChild(el("rect", { x: x1, y: y + 3 + bh / 3, width: w, height: bh / 3, fill: COLORS.queued, rx: 1 }, `${r.task.id}: queued ${when}\n${s.detail ?? ""}`));
      } else if (s.kind === "retry_wait") {
        g.appendChild(el("rect", { x: x1, y: y + 3, width: w, height: bh, fill: "url(#hatch)", rx: 2 }, `${r.task.id}: retry wait ${when}\n${s.detail ?? ""}`));
      } else if (s.kind === "attempt") {
        const title = `${r.task.id} attempt ${s.attempt}: ${s.outcome} ${when}` + (s.worker ? `\nworker ${s.worker}` : "") + (s.detail ? `\n${s.detail}` : "");
        const rect = el("rect", { x: x1, y: y + 3, width: w, height: bh, fill: attemptColor(s.outcome), rx: 2, class: `att att-${s.outcome}` }, title);
        g.appendChild(rect);
        if (s.outcome === "running") {
          rect.setAttribute("class", "att att-running pulse");
        }
      } else if (s.kind === "cascade") {
        const cx = x(s.from);
        const cy = y + rowH / 2;
        const r2 = Math.min(5, bh / 2);
        g.appendChild(
          el("path", { d: `M${cx - r2},${cy - r2}L${cx + r2},${cy + r2}M${cx - r2},${cy + r2}L${cx + r2},${cy - r2}`, stroke: COLORS.cascade, "stroke-width": 2.2 }, `${r.task.id}: upstream_failed\n${s.detail ?? ""}`),
        );
      }
    }
    g.addEventListener("click", () => onSelect(r.task.id));
    svg.appendChild(g);
  });
  if (d.status === "running" && now >= t0) {
    const xn = x(now);
    svg.appendChild(el("line", { x1: xn, y1: axisH - 6, x2: xn, y2: height, stroke: "#db2777", "stroke-dasharray": "3,3" }, "now"));
  }
  host.appendChild(svg);
}
