// The DAG as a graph: Cytoscape.js draws it, ELK's layered algorithm (elkjs
// through cytoscape-elk) lays it out. Nodes are coloured by task status and
// recoloured in place as events arrive; the layout runs only when the set of
// tasks changes.
import cytoscape from "cytoscape";
import type { Core, ElementDefinition, NodeSingular, StylesheetJson } from "cytoscape";
import elk from "cytoscape-elk";
import type { Shape, ShapeNode, TaskStatus, TaskView } from "./types";

cytoscape.use(elk);

export const STATUS_COLORS: Record<TaskStatus, { bg: string; fg: string; border: string }> = {
  pending: { bg: "#e5e7eb", fg: "#374151", border: "#9ca3af" },
  ready: { bg: "#bfdbfe", fg: "#1e3a8a", border: "#3b82f6" },
  running: { bg: "#2563eb", fg: "#ffffff", border: "#1e3a8a" },
  retrying: { bg: "#f59e0b", fg: "#111827", border: "#b45309" },
  succeeded: { bg: "#16a34a", fg: "#ffffff", border: "#14532d" },
  failed: { bg: "#dc2626", fg: "#ffffff", border: "#7f1d1d" },
  upstream_failed: { bg: "#fecaca", fg: "#7f1d1d", border: "#dc2626" },
  cancelled: { bg: "#6b7280", fg: "#ffffff", border: "#374151" },
  skipped: { bg: "#f9fafb", fg: "#6b7280", border: "#9ca3af" },
};

export interface GraphOptions {
  onSelect: (taskId: string | null) => void;
  onHover: (taskId: string | null, x: number, y: number) => void;
}

function style(): StylesheetJson {
  const s: StylesheetJson = [
    {
      selector: "node",
      style: {
        shape: "round-rectangle",
        width: 118,
        height: 34,
        label: "data(label)",
        "font-size": 12,
        "font-family": "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
        "text-valign": "center",
        "text-halign": "center",
        "text-wrap": "ellipsis",
        "text-max-width": "110px",
        "min-zoomed-font-size": 7,
        "border-width": 1.5,
        "background-color": STATUS_COLORS.pending.bg,
        color: STATUS_COLORS.pending.fg,
        "border-color": STATUS_COLORS.pending.border,
      },
    },
    {
      selector: "edge",
      style: {
        width: 1.4,
        "curve-style": "bezier",
        "line-color": "#9ca3af",
        "target-arrow-color": "#9ca3af",
        "target-arrow-shape": "triangle",
        "arrow-scale": 0.8,
        opacity: 0.8,
      },
    },
  ];
  for (const [st, c] of Object.entries(STATUS_COLORS)) {
    s.push({ selector: `node[status = "${st}"]`, style: { "background-color": c.bg, color: c.fg, "border-color": c.border } });
  }
  s.push(
    { selector: 'node[status = "running"]', style: { "border-width": 3, "border-color": "#93c5fd" } },
    { selector: 'node[status = "retrying"]', style: { "border-style": "dashed", "border-width": 2.5 } },
    { selector: 'node[status = "upstream_failed"]', style: { "border-style": "dashed", "border-width": 2 } },
    { selector: 'node[status = "skipped"]', style: { "border-style": "dotted", "border-width": 2 } },
    // A task that runs by another rule than "all its dependencies
    // succeeded" (or has a condition): a double border. Handlers and
    // notifications: another shape, and dotted edges from what they wait for.
    { selector: 'node[rule = "yes"]', style: { "border-style": "double", "border-width": 4 } },
    { selector: 'node[role = "handler"]', style: { shape: "cut-rectangle" } },
    { selector: 'node[role = "notification"]', style: { shape: "tag" } },
    { selector: "edge.implicit", style: { "line-style": "dotted", "target-arrow-shape": "vee", opacity: 0.6 } },
    { selector: "node:selected", style: { "border-width": 4, "border-color": "#f472b6", "overlay-opacity": 0 } },
    { selector: "edge.hl", style: { "line-color": "#db2777", "target-arrow-color": "#db2777", width: 2.6, opacity: 1 } },
    { selector: 'edge[cascade = "yes"]', style: { "line-color": "#f87171", "target-arrow-color": "#f87171", "line-style": "dashed" } },
    { selector: "node.dim", style: { opacity: 0.35 } },
    // Large DAGs: smaller nodes, so the overview shows more of the graph.
    { selector: "node.compact", style: { width: 84, height: 24, "font-size": 10, "text-max-width": "78px" } },
    { selector: "edge.compact", style: { width: 1, "arrow-scale": 0.6 } },
    // A big DAG's groups (a map group, tasks collapsed): bigger, two lines.
    { selector: "node.group", style: { width: 150, height: 44, "text-wrap": "wrap", "text-max-width": "144px", "border-width": 3, "font-size": 11 } },
  );
  return s;
}

export class GraphView {
  readonly cy: Core;
  private key = "";
  private laidOut = false;

  constructor(
    private readonly container: HTMLElement,
    private readonly opts: GraphOptions,
  ) {
    this.cy = cytoscape({
      container,
      style: style(),
      wheelSensitivity: 0.4,
      minZoom: 0.05,
      maxZoom: 3,
      boxSelectionEnabled: false,
      autoungrabify: true,
      pixelRatio: "auto",
    });
    this.cy.on("tap", "node", (e) => {
      this.opts.onHover(null, 0, 0);
      this.select((e.target as NodeSingular).id(), true);
    });
    this.cy.on("tap", (e) => {
      if (e.target === this.cy) this.select(null, true);
    });
    this.cy.on("mouseover", "node", (e) => {
      const p = (e.target as NodeSingular).renderedPosition();
      this.opts.onHover((e.target as NodeSingular).id(), p.x, p.y);
      container.style.cursor = "pointer";
    });
    this.cy.on("mouseout", "node", () => {
      this.opts.onHover(null, 0, 0);
      container.style.cursor = "";
    });
    this.cy.on("viewport", () => this.opts.onHover(null, 0, 0));
  }

  /** Shows a DAG: rebuilds and lays out when its tasks changed, else recolours. */
  setTasks(dagId: string, tasks: TaskView[]): void {
    const key = dagId + "|" + tasks.map((t) => t.id + ":" + t.depends_on.join(",") + ":" + (t.role ?? "")).join(";");
    if (key !== this.key) {
      this.key = key;
      this.rebuild(tasks);
      return;
    }
    this.cy.batch(() => {
      for (const t of tasks) this.setStatus(t.id, t.status, t);
    });
  }

  /**
   * Shows a big DAG by its shape: one node per task, map group or set of
   * tasks collapsed (at most 150, the server's bound), labelled with its
   * size and coloured by the status that most needs a look. Rebuilds and
   * lays out when the shape changed, else relabels and recolours.
   */
  setShape(dagId: string, shape: Shape): void {
    const key = "shape|" + dagId + "|" + shape.nodes.map((n) => n.id).join(",") + "|" + shape.edges.map((e) => e.join(">")).join(",");
    if (key !== this.key) {
      this.key = key;
      const els: ElementDefinition[] = shape.nodes.map((n) => ({
        group: "nodes",
        data: { id: n.id, label: shapeLabel(n), status: shapeStatus(n), rule: "no", role: n.role || "task", kind: n.kind },
        classes: n.kind === "task" ? "" : "group",
      }));
      for (const [a, b] of shape.edges) {
        const s = shape.nodes[a]?.id;
        const t = shape.nodes[b]?.id;
        if (s && t) els.push({ group: "edges", data: { id: `${s}->${t}`, source: s, target: t, cascade: "no" } });
      }
      this.cy.batch(() => {
        this.cy.elements().remove();
        this.cy.add(els);
      });
      this.container.dataset.shape = String(shape.nodes.length);
      this.layout();
      return;
    }
    this.cy.batch(() => {
      for (const n of shape.nodes) {
        const el = this.cy.getElementById(n.id);
        if (el.empty()) continue;
        const label = shapeLabel(n);
        if (el.data("label") !== label) el.data("label", label);
        const st = shapeStatus(n);
        if (el.data("status") !== st) el.data("status", st);
      }
    });
  }

  clear(): void {
    this.key = "";
    this.cy.elements().remove();
  }

  setStatus(id: string, status: string, t?: TaskView): void {
    const n = this.cy.getElementById(id);
    if (n.empty()) return;
    if (n.data("status") !== status) n.data("status", status);
    if (t) {
      const cas = t.status === "upstream_failed" ? "yes" : "no";
      n.connectedEdges(`[target = "${cssEscape(id)}"]`).forEach((e) => {
        if (e.data("cascade") !== cas) e.data("cascade", cas);
      });
    }
  }

  private rebuild(tasks: TaskView[]): void {
    const els: ElementDefinition[] = [];
    const compact = tasks.length > 60 ? "compact" : "";
    for (const t of tasks) {
      const rule = (t.trigger_rule && t.trigger_rule !== "all_success") || t.when || t.spec?.continue_on_failure ? "yes" : "no";
      els.push({ group: "nodes", data: { id: t.id, label: t.id, status: t.status, rule, role: t.role ?? "task" }, classes: compact });
    }
    const ids = new Set(tasks.map((t) => t.id));
    for (const t of tasks) {
      for (const d of t.depends_on) {
        if (ids.has(d)) els.push({ group: "edges", data: { id: `${d}->${t.id}`, source: d, target: t.id, cascade: "no" }, classes: compact });
      }
    }
    els.push(...implicitEdges(tasks, compact));
    this.cy.batch(() => {
      this.cy.elements().remove();
      this.cy.add(els);
    });
    this.layout();
  }

  layout(): void {
    const n = this.cy.nodes().length;
    this.laidOut = false;
    const opts = {
      name: "elk",
      fit: true,
      padding: 40, // room for the legend and the zoom buttons
      animate: false,
      nodeDimensionsIncludeLabels: false,
      elk: {
        algorithm: "layered",
        "elk.direction": "RIGHT",
        "elk.layered.spacing.nodeNodeBetweenLayers": n > 60 ? 36 : 60,
        "elk.spacing.nodeNode": n > 60 ? 6 : 22,
        "elk.layered.nodePlacement.strategy": "BRANDES_KOEPF",
        "elk.layered.crossingMinimization.strategy": "LAYER_SWEEP",
        "elk.edgeRouting": "POLYLINE",
        // One drawing: tasks without dependents stay in their layer.
        "elk.separateConnectedComponents": false,
        // Keep the DAG file's order where it costs no crossing (shard-01, shard-02, ...).
        "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
      },
      stop: () => {
        // Small DAGs would fill the view with huge nodes: keep them readable.
        if (this.cy.zoom() > 1.15) {
          this.cy.zoom(1.15);
          this.cy.center();
        }
        this.laidOut = true;
        this.container.dataset.layout = "done";
        this.container.dataset.nodes = String(n);
      },
    };
    this.container.dataset.layout = "running";
    this.cy.layout(opts as unknown as cytoscape.LayoutOptions).run();
  }

  get ready(): boolean {
    return this.laidOut;
  }

  fit(): void {
    this.cy.fit(undefined, 40);
  }

  zoomBy(f: number): void {
    const c = { x: this.container.clientWidth / 2, y: this.container.clientHeight / 2 };
    this.cy.zoom({ level: this.cy.zoom() * f, renderedPosition: c });
  }

  resize(): void {
    this.cy.resize();
  }

  /** Selects a task: highlights it and the edges of its dependencies and dependents. */
  select(id: string | null, notify = false): void {
    this.cy.batch(() => {
      this.cy.elements().unselect();
      this.cy.edges().removeClass("hl");
      if (id) {
        const n = this.cy.getElementById(id);
        if (n.nonempty()) {
          n.select();
          n.connectedEdges().addClass("hl");
        }
      }
    });
    if (notify) this.opts.onSelect(id);
  }

  /** Centres a task in view, zooming in enough to read it. */
  focus(id: string): void {
    const n = this.cy.getElementById(id);
    if (n.empty()) return;
    this.cy.animate({ center: { eles: n }, zoom: Math.max(this.cy.zoom(), 0.9) }, { duration: 250 });
  }
}

/** The statuses a collapsed node takes its colour from, most pressing first. */
const SHAPE_STATUS_ORDER: TaskStatus[] = ["failed", "running", "retrying", "upstream_failed", "ready", "pending", "cancelled", "succeeded", "skipped"];

/** A shape node's colour: the most pressing status any of its tasks is in. */
export function shapeStatus(n: ShapeNode): TaskStatus {
  for (const s of SHAPE_STATUS_ORDER) if ((n.counts[s] ?? 0) > 0) return s;
  return "pending";
}

/** A shape node's label: a task's id; a group's id with its size and its unfinished or failed. */
export function shapeLabel(n: ShapeNode): string {
  if (n.kind === "task") return n.id;
  const total = Object.values(n.counts).reduce((a, b) => a + b, 0);
  const name = n.kind === "map" ? `${n.id} [map]` : `${n.sample[0] ?? n.id}…`;
  const bad = (n.counts.failed ?? 0) + (n.counts.upstream_failed ?? 0);
  const done = (n.counts.succeeded ?? 0) + (n.counts.skipped ?? 0);
  return `${name}\n${done}/${total}` + (bad ? ` · ${bad}✗` : "");
}

function cssEscape(s: string): string {
  return s.replace(/["\\]/g, "\\$&");
}

/**
 * Dotted edges to what runs at a DAG's end: each handler waits for every
 * task, drawn from the tasks nothing depends on; each notification waits for
 * the handlers too, drawn from them (or from those tasks). None past 50 such
 * tasks: the picture would say less than the panel.
 */
function implicitEdges(tasks: TaskView[], compact: string): ElementDefinition[] {
  const own = tasks.filter((t) => (t.role ?? "task") === "task");
  const needed = new Set(own.flatMap((t) => t.depends_on));
  const leaves = own.filter((t) => !needed.has(t.id)).map((t) => t.id);
  const handlers = tasks.filter((t) => t.role === "handler").map((t) => t.id);
  const notes = tasks.filter((t) => t.role === "notification").map((t) => t.id);
  if (leaves.length > 50) return [];
  const out: ElementDefinition[] = [];
  const edge = (s: string, t: string) =>
    out.push({ group: "edges", data: { id: `${s}=>${t}`, source: s, target: t, cascade: "no" }, classes: ("implicit " + compact).trim() });
  for (const hd of handlers) for (const l of leaves) edge(l, hd);
  for (const n of notes) for (const s of handlers.length ? handlers : leaves) edge(s, n);
  return out;
}
