// The Schedules card: every schedule with its next ticks and its latest
// runs; a run opens its DAG. Pause, resume and trigger act on the leader
// (any replica forwards them).
import { api } from "./api";
import { fmtTime, h } from "./dom";
import { statusBadge } from "./panels";
import type { ScheduleRun, ScheduleView } from "./types";

export interface ScheduleHandlers {
  open: (dagID: string) => void;
  act: (id: string, verb: "pause" | "resume" | "trigger") => void;
  expand: (id: string) => void;
}

/** Renders the schedules; runs holds the latest runs of the expanded one. */
export function renderSchedules(host: HTMLElement, list: ScheduleView[] | null, err: string, expanded: string, runs: ScheduleRun[], on: ScheduleHandlers): void {
  if (!list) {
    host.replaceChildren(h("div.muted", {}, err || "loading…"));
    return;
  }
  if (!list.length) {
    host.replaceChildren(h("div.muted", {}, "No schedules. A DAG file with a schedule: block creates one (orion submit -f)."));
    return;
  }
  const body = h("tbody");
  for (const s of list) {
    const state = s.paused ? "paused" : s.next.length ? "active" : "ended";
    const btn = (label: string, verb: "pause" | "resume" | "trigger") => {
      const b = h("button.small", { type: "button", "data-action": verb }, label);
      b.addEventListener("click", (ev) => {
        ev.stopPropagation();
        on.act(s.id, verb);
      });
      return b;
    };
    const row = h(
      "tr.schedule",
      { "data-schedule": s.id, "data-state": state, title: "show its runs" },
      h("td", {}, h("b", {}, s.id)),
      h("td", {}, h("code", {}, s.cron), h("span.muted", {}, " " + s.timezone)),
      h("td", {}, state + (s.active_runs ? ` · ${s.active_runs} running` : "")),
      h("td.next", {}, s.next.length ? fmtTime(s.next[0]) : "—"),
      h("td", {}, s.paused ? btn("resume", "resume") : btn("pause", "pause"), " ", btn("run now", "trigger")),
    );
    row.addEventListener("click", () => on.expand(s.id));
    body.append(row);
    if (s.id !== expanded) continue;
    const items = h("div.runs");
    items.append(h("div.muted", {}, `catchup ${s.catchup} · overlap ${s.overlap}` + (s.max_active_runs ? ` · max ${s.max_active_runs} active` : "") + ` · next ${s.next.slice(0, 3).map((t) => fmtTime(t)).join(", ") || "—"}`));
    for (const r of runs.slice(0, 10)) {
      const a = h("a.run", { href: `#dag=${encodeURIComponent(r.id)}`, "data-run": r.id }, r.id);
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        on.open(r.id);
      });
      items.append(h("div", {}, statusBadge(r.status), " ", a, r.manual ? h("span.muted", {}, " (run now)") : ""));
    }
    if (!runs.length) items.append(h("div.muted", {}, "no runs yet"));
    body.append(h("tr.schedule-runs", {}, h("td", { colspan: "5" }, items)));
  }
  host.replaceChildren(
    h("table.schedules", {}, h("thead", {}, h("tr", {}, h("th", {}, "schedule"), h("th", {}, "cron"), h("th", {}, "state"), h("th", {}, "next tick"), h("th", {}, ""))), body),
    err ? h("div.muted", {}, err) : "",
  );
}

export const scheduleAPI = {
  list: () => api.schedules(),
  runs: (id: string) => api.scheduleRuns(id),
  act: (id: string, verb: "pause" | "resume" | "trigger") => api.scheduleAction(id, verb),
};
