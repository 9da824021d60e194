// Hover help on the algorithms behind what the page shows. Any element with
// data-help="KEY" shows HELP[KEY] in a popover on hover or keyboard focus.

export const HELP: Record<string, { title: string; body: string }> = {
  ready: {
    title: "Ready when in-degree is 0",
    body:
      "Each task keeps a count of dependencies that have not succeeded yet (its in-degree in what is left of the DAG). " +
      "Submitting a DAG makes every task with no dependency ready. When a task succeeds, each dependent's count drops by one; " +
      "the dependents that reach 0 become ready in the same step and join the queue. pending → ready → running.",
  },
  heap: {
    title: "Priority heap",
    body:
      "Ready tasks wait in one min-heap ordered by priority (lower runs first), then by DAG submission order, then by position in the DAG. " +
      "Whenever a worker slot is free, the scheduler pops the top and dispatches it to the least-loaded worker. " +
      "The order depends only on committed state, so every replica would dispatch in the same order. Queue size is the heap's size.",
  },
  cascade: {
    title: "Failure cascade, one level at a time",
    body:
      "When a task fails for good (its retries are used up), each dependent whose trigger rule says so (all_success, the default) becomes " +
      "upstream_failed, with cause = the failed task; once that record is committed, its own dependents are judged the same way, and so on. " +
      "Each task is marked exactly once however many paths lead to it. Tasks that do not depend on the failure keep running; " +
      "the DAG fails when nothing is left to run.",
  },
  rules: {
    title: "Trigger rules, conditions, handlers",
    body:
      "A task runs when its trigger rule says so, judged as its dependencies end: all_success (the default), all_done, one_success, " +
      "one_failed, none_failed, all_failed. Otherwise it is skipped or upstream_failed, and its own dependents judge that in turn. " +
      "A when: condition is judged once the rule says run: false skips the task. continue_on_failure makes a failure count as a success. " +
      "Handlers (on_success, on_failure, on_exit) run once every task has ended; notifications once the handlers have, " +
      "the ones the DAG's end does not call for are skipped as not needed.",
  },
  retry: {
    title: "Retries with capped exponential backoff",
    body:
      "A failed attempt with retries left makes the task retrying: retry n waits min(retry_base × 2^n, retry_cap) (2 s, 4 s, 8 s … 30 s by default), " +
      "then the task is ready again and re-enters the heap. The timeline shows these waits hatched in amber.",
  },
  delete: {
    title: "Delete a finished DAG",
    body:
      "Deletes the DAG shown, with all its tasks and their records, in one fenced commit: what retention does on its own once a DAG has been finished " +
      "longer than retention. Only a finished DAG (succeeded, failed or cancelled) can go: a running one must be cancelled first, and a cancelled one " +
      "once its attempts have stopped. Its id can then be submitted again.",
  },
  fence: {
    title: "Fenced commit",
    body:
      "Every state change is proposed, committed to etcd, and only then applied, on the leader exactly as on a replay. " +
      "Each transaction carries If(CreateRevision(election key) == my revision): a leader that lost its lease (killed, frozen, partitioned) " +
      "cannot write, because its key is gone, and the whole transaction fails. Proposals are group-committed, up to 128 ops per transaction.",
  },
  takeover: {
    title: "Takeover",
    body:
      "Standbys follow the log live with an etcd watch. When the leader dies its worker streams drop; a standby checks in etcd that the dead node still " +
      "holds leadership, revokes its lease, and its own pending campaign wins. It catches up on the watch to etcd's current revision, writes its term record " +
      "(/orion/v1/leader) and leads. Workers reconnect and report their running attempts, which the new leader adopts; attempts no worker reports within " +
      "orphan_grace are re-queued without using a retry.",
  },
  replay: {
    title: "Replay (single node)",
    body:
      "A node that restarts (or recovers from a crash) reloads its state from etcd: a snapshot read of /orion/v1/, then the watch from that revision. " +
      "Nothing acknowledged is lost; tasks that were running when it died are orphans and run again.",
  },
  stream: {
    title: "Live stream",
    body:
      "The page follows GET /api/v1/events (Server-Sent Events). Each event's id is the etcd revision it reflects, so a dropped connection resumes with " +
      "Last-Event-ID. When the server cannot resume (the history was compacted, or the subscriber fell behind) it says resync or gap, and the page reloads over REST.",
  },
};

export function installHelp(root: HTMLElement): void {
  const pop = document.createElement("div");
  pop.className = "help-pop";
  pop.setAttribute("role", "tooltip");
  pop.hidden = true;
  document.body.appendChild(pop);
  let current: HTMLElement | null = null;
  const show = (el: HTMLElement) => {
    const h = HELP[el.dataset.help ?? ""];
    if (!h) return;
    current = el;
    pop.replaceChildren();
    const t = document.createElement("strong");
    t.textContent = h.title;
    const p = document.createElement("p");
    p.textContent = h.body;
    pop.append(t, p);
    pop.hidden = false;
    const r = el.getBoundingClientRect();
    const pw = Math.min(380, window.innerWidth - 16);
    pop.style.width = pw + "px";
    let left = Math.min(Math.max(8, r.left), window.innerWidth - pw - 8);
    let top = r.bottom + 6;
    pop.style.left = left + "px";
    pop.style.top = top + "px";
    const ph = pop.getBoundingClientRect().height;
    if (top + ph > window.innerHeight - 8) top = Math.max(8, r.top - ph - 6);
    pop.style.top = top + "px";
  };
  const hide = (el: HTMLElement) => {
    if (current === el) {
      pop.hidden = true;
      current = null;
    }
  };
  root.addEventListener("mouseover", (e) => {
    const el = (e.target as HTMLElement).closest<HTMLElement>("[data-help]");
    if (el && el !== current) show(el);
  });
  root.addEventListener("mouseout", (e) => {
    const el = (e.target as HTMLElement).closest<HTMLElement>("[data-help]");
    const to = (e as MouseEvent).relatedTarget as Node | null;
    if (el && !(to && el.contains(to))) hide(el);
  });
  root.addEventListener("focusin", (e) => {
    const el = (e.target as HTMLElement).closest<HTMLElement>("[data-help]");
    if (el) show(el);
  });
  root.addEventListener("focusout", (e) => {
    const el = (e.target as HTMLElement).closest<HTMLElement>("[data-help]");
    if (el) hide(el);
  });
}

/** A small "?" badge that shows a help topic. */
export function helpBadge(key: string): HTMLElement {
  const b = document.createElement("span");
  b.className = "help";
  b.tabIndex = 0;
  b.dataset.help = key;
  b.textContent = "?";
  b.setAttribute("aria-label", "help: " + (HELP[key]?.title ?? key));
  return b;
}
