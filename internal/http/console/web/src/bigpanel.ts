// The side panel of a big DAG (one the API answers with tasks_truncated and
// a shape): a node of the shape with its counts, and its tasks a page at a
// time (GET /api/v1/dags/{id}/tasks?group=), opened on demand; a task picked
// there is read alone (GET .../tasks/{task}). Nothing here holds the DAG's
// tasks: a page is what the panel shows.
import { api } from "./api";
import { fmtDuration, h } from "./dom";
import { statusBadge } from "./panels";
import { TASK_STATUSES, type DAGView, type ShapeNode, type TaskView } from "./types";

/** Tasks per page of a group's list. */
export const GROUP_PAGE = 100;

/** The panel shown, so that a live refresh updates its counts in place rather than closing its list. */
let shown: { key: string; counts: HTMLElement } | null = null;

function countBadges(counts: Record<string, number>): HTMLElement[] {
  return TASK_STATUSES.filter((s) => counts[s]).map((s) => h("span.count", { "data-status": s }, statusBadge(s), ` ${counts[s]}`));
}

/**
 * Renders shape node n of DAG d into host: what it is, its tasks by status,
 * and its tasks a page at a time, filtered by status; onTask opens one.
 * A refresh of the same node only updates its counts.
 */
export function renderGroup(host: HTMLElement, d: DAGView, n: ShapeNode, onTask: (id: string) => void): void {
  const key = `${d.id}/${n.id}`;
  if (shown?.key === key && host.contains(shown.counts)) {
    shown.counts.replaceChildren(...countBadges(n.counts));
    return;
  }
  const counts = h("div.counts", { "data-testid": "group-counts" }, ...countBadges(n.counts));
  shown = { key, counts };
  const what =
    n.kind === "map"
      ? `map group: ${Object.values(n.counts).reduce((a, b) => a + b, 0)} instances`
      : `${n.tasks} tasks` + (n.levels > 1 ? `, levels ${n.level}–${n.level + n.levels - 1}` : `, level ${n.level}`) + (n.role && n.role !== "task" ? ` (${n.role}s)` : "");
  const filter = h(
    "select",
    { "data-testid": "group-filter" },
    h("option", { value: "" }, "every status"),
    ...TASK_STATUSES.map((s) => h("option", { value: s }, s.replace("_", " "))),
  ) as HTMLSelectElement;
  const tbody = h("tbody");
  const info = h("span.muted", { "data-testid": "group-info" });
  const more = h("button", { type: "button", "data-testid": "group-more" }, "more ›") as HTMLButtonElement;
  const table = h(
    "table.hist",
    { "data-testid": "group-tasks" },
    h("thead", {}, h("tr", {}, h("th", {}, "task"), h("th", {}, "status"), h("th", {}, "attempts"), h("th", {}, "duration"), h("th", {}, "error"))),
    tbody,
  );
  let cursor: string | undefined;
  let listed = 0;
  let seq = 0;
  const row = (t: TaskView) => {
    const a = h("a", { href: "#", "data-task": t.id }, t.id);
    a.addEventListener("click", (e) => {
      e.preventDefault();
      onTask(t.id);
    });
    return h(
      "tr",
      { "data-id": t.id },
      h("td", {}, h("code", {}, a)),
      h("td", {}, statusBadge(t.status)),
      h("td", {}, String(t.attempts)),
      h("td", {}, t.duration_ms !== undefined ? fmtDuration(t.duration_ms) : ""),
      h("td", {}, t.error ?? ""),
    );
  };
  // load reads pages until one lists something or the walk ends: a
  // filtered page may list none and still go on (the server bounds what
  // one page examines), so a few are read, each a request.
  const load = async (fresh: boolean) => {
    const mine = ++seq;
    if (fresh) {
      cursor = undefined;
      listed = 0;
      tbody.replaceChildren();
    }
    more.disabled = true;
    info.textContent = "loading…";
    try {
      for (let reads = 0; reads < 20; reads++) {
        const p = await api.listTasks(d.id, { group: n.id, status: filter.value || undefined, limit: GROUP_PAGE, cursor });
        if (mine !== seq) return;
        tbody.append(...p.tasks.map(row));
        listed += p.tasks.length;
        cursor = p.next;
        if (p.tasks.length || !cursor) break;
      }
      info.textContent = `${listed} listed` + (cursor ? "" : listed ? ", all of them" : ": none");
      more.disabled = !cursor;
      more.hidden = !cursor;
    } catch (e) {
      if (mine === seq) info.textContent = `could not list the tasks: ${(e as Error).message}`;
    }
  };
  filter.addEventListener("change", () => void load(true));
  more.addEventListener("click", () => void load(false));
  const body = h("div", { hidden: "" }, h("div", {}, "status ", filter, " ", info), table, more);
  const open = h("button", { type: "button", "data-testid": "group-open" }, n.kind === "map" ? "list its instances" : `list its ${n.tasks} tasks`) as HTMLButtonElement;
  open.addEventListener("click", () => {
    open.hidden = true;
    body.hidden = false;
    void load(true);
  });
  host.className = "";
  host.replaceChildren(
    h("div.task-head", {}, h("h2", { "data-testid": "group-title" }, n.kind === "map" ? n.id : n.kind === "task" ? n.id : `${n.sample.join(", ")}${n.tasks > n.sample.length ? ", …" : ""}`)),
    h("div.muted", {}, what),
    counts,
    open,
    body,
  );
}

/** Forgets the panel shown: the next renderGroup draws it anew. */
export function resetGroupPanel(): void {
  shown = null;
}
