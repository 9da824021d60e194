// Ready-made DAGs to submit from the console. None sets an id, so each
// submission is a new DAG. Shell tasks only use /bin/sh and coreutils.

interface T {
  id: string;
  kind: "shell" | "sleep" | "noop";
  command?: string;
  duration?: string;
  depends_on?: string[];
  priority?: number;
  max_retries?: number;
  timeout?: string;
  trigger_rule?: string;
  when?: string;
  continue_on_failure?: boolean;
}

/** A DAG of templates: its tasks, and the handlers that run at its end. */
interface D {
  name: string;
  tasks: T[];
  on_failure?: Omit<T, "id">;
  on_exit?: Omit<T, "id">;
}

export interface Template {
  key: string;
  title: string;
  description: string;
  dag: () => D;
}

const sh = (id: string, command: string, deps: string[] = [], extra: Partial<T> = {}): T => ({
  id,
  kind: "shell",
  command,
  ...(deps.length ? { depends_on: deps } : {}),
  ...extra,
});

function chain() {
  const steps = ["checkout", "deps", "compile", "unit-tests", "package", "sign", "publish", "announce"];
  return {
    name: "chain",
    tasks: steps.map((s, i) =>
      sh(s, `echo "step ${i + 1}/${steps.length}: ${s}"; sleep 0.6; echo "${s} done"`, i ? [steps[i - 1]] : []),
    ),
  };
}

function diamond() {
  return {
    name: "diamond",
    tasks: [
      sh("fetch", 'echo "fetching input"; sleep 0.8; echo "42 records"'),
      sh("left", 'echo "left branch: parse"; sleep 1.5; echo "parsed 42"', ["fetch"], { priority: 0 }),
      sh("right", 'echo "right branch: enrich"; sleep 1; echo "enriched 42"', ["fetch"], { priority: 1 }),
      sh("merge", 'echo "merging left and right"; sleep 0.5; echo "merged"', ["left", "right"]),
    ],
  };
}

function fanOutIn() {
  const n = 12;
  const shards = Array.from({ length: n }, (_, i) => `shard-${String(i + 1).padStart(2, "0")}`);
  return {
    name: "fan-out/fan-in",
    tasks: [
      sh("split", `echo "splitting the input into ${n} shards"; sleep 0.5`),
      ...shards.map((s, i) =>
        sh(s, `echo "${s}: processing"; sleep 0.${(i * 7) % 8 + 2}; echo "${s}: ${(i + 1) * 1000} rows"`, ["split"], {
          priority: i % 3,
        }),
      ),
      sh("reduce", `echo "reducing ${n} shards"; sleep 0.5; echo "total: ${n * 1000} rows"`, shards),
      sh("report", 'echo "report written"', ["reduce"]),
    ],
  };
}

/** A deterministic pseudo-random generator (mulberry32), so "random" is reproducible per seed. */
function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomDAG(n = 200, seed = Date.now() % 100000) {
  const r = rng(seed);
  const layers: string[][] = [];
  const tasks: T[] = [];
  const nLayers = Math.max(2, Math.round(Math.sqrt(n) * 0.85));
  let made = 0;
  for (let l = 0; l < nLayers; l++) {
    const left = n - made;
    const width = l === nLayers - 1 ? left : Math.max(1, Math.min(left - (nLayers - l - 1), Math.round((n / nLayers) * (0.6 + r() * 0.8))));
    const layer: string[] = [];
    for (let i = 0; i < width; i++) {
      const id = `t${String(made).padStart(3, "0")}`;
      made++;
      const deps = new Set<string>();
      if (l > 0) {
        const k = 1 + Math.floor(r() * 3);
        for (let j = 0; j < k; j++) {
          // Mostly from the layer just before, sometimes from further back.
          const back = j === 0 || r() < 0.7 ? 1 : 1 + Math.floor(r() * Math.min(3, l));
          const from = layers[Math.max(0, l - back)];
          deps.add(from[Math.floor(r() * from.length)]);
        }
      }
      const ms = 50 + Math.floor(r() * 350);
      const t: T =
        r() < 0.25
          ? sh(id, `echo "${id}: layer ${l}, ${ms} ms"; sleep ${(ms / 1000).toFixed(2)}; echo "${id}: done"`, [...deps])
          : { id, kind: "sleep", duration: `${ms}ms`, ...(deps.size ? { depends_on: [...deps] } : {}) };
      t.priority = Math.floor(r() * 4);
      tasks.push(t);
      layer.push(id);
    }
    layers.push(layer);
  }
  return { name: `random-${n} (seed ${seed})`, tasks };
}

function cascade() {
  return {
    name: "failure cascade",
    tasks: [
      sh("extract", 'echo "extracting"; sleep 0.5; echo "extracted 1000 rows"'),
      sh(
        "flaky-api",
        'echo "calling the API (attempt $ORION_ATTEMPT)"; if [ "$ORION_ATTEMPT" -lt 2 ]; then echo "503 service unavailable" >&2; exit 1; fi; echo "200 OK"',
        ["extract"],
        { max_retries: 2 },
      ),
      sh(
        "load-db",
        'echo "connecting to the warehouse (attempt $ORION_ATTEMPT)"; sleep 0.3; echo "error: connection refused" >&2; exit 3',
        ["extract"],
        { max_retries: 1 },
      ),
      sh("build-index", 'echo "indexing"', ["load-db"]),
      sh("refresh-views", 'echo "refreshing views"', ["load-db"]),
      sh("publish", 'echo "publishing"', ["build-index", "refresh-views", "flaky-api"]),
      sh("notify", 'echo "notifying"', ["publish"]),
      sh("archive", 'echo "archiving the extract"; sleep 0.4; echo "archived"', ["extract"]),
    ],
  };
}

/**
 * A release: an optional lint that fails without stopping it, a smoke test
 * that fails, a rollback that runs because it did (one_failed) and only if
 * the deploy went out (when), a cleanup that runs whatever happened
 * (all_done), a page to on-call skipped (the deploy did not fail), and
 * handlers at the end.
 */
function release() {
  return {
    name: "release",
    tasks: [
      sh("build", 'echo "building web"; sleep 0.4; echo "built"'),
      sh("lint", 'echo "style: 3 warnings" >&2; exit 1', ["build"], { continue_on_failure: true, max_retries: 0 }),
      sh("deploy", 'echo "deploying to production"; sleep 0.5; echo "deployed"', ["build", "lint"], { max_retries: 0 }),
      sh("smoke", 'echo "smoke test: GET /health"; echo "503" >&2; exit 1', ["deploy"], { max_retries: 0 }),
      sh("rollback", 'echo "rolling back to the previous release"', ["deploy", "smoke"], {
        trigger_rule: "one_failed",
        when: 'tasks.deploy.status == "succeeded"',
      }),
      sh("cleanup", 'echo "removing build artifacts"', ["smoke", "rollback"], { trigger_rule: "all_done" }),
      sh("page-oncall", 'echo "paging on-call: the deploy failed"', ["deploy"], { trigger_rule: "one_failed" }),
    ],
    on_failure: { kind: "shell" as const, command: 'echo "release failed: $ORION_FAILED_TASKS"', max_retries: 0 },
    on_exit: { kind: "shell" as const, command: 'echo "release ended: $ORION_DAG_STATUS"', max_retries: 0 },
  };
}

export const TEMPLATES: Template[] = [
  { key: "chain", title: "Chain (8 steps)", description: "Each task waits for the one before it: one runs at a time.", dag: chain },
  { key: "diamond", title: "Diamond", description: "fetch → left ∥ right → merge: the merge waits for both branches.", dag: diamond },
  { key: "fanout", title: "Fan-out / fan-in (12 shards)", description: "One split, 12 parallel shards competing for slots by priority, one reduce.", dag: fanOutIn },
  { key: "random200", title: "Random DAG (200 tasks)", description: "200 tasks in layers with random dependencies and priorities: zoom and pan.", dag: () => randomDAG(200) },
  {
    key: "cascade",
    title: "Failure cascade",
    description: "flaky-api succeeds on its 2nd attempt; load-db fails for good, and everything downstream becomes upstream_failed.",
    dag: cascade,
  },
  {
    key: "release",
    title: "Release with rollback",
    description: "lint may fail (continue_on_failure); smoke fails, so rollback runs (one_failed, when deploy went out); cleanup runs anyway (all_done); handlers run at the end.",
    dag: release,
  },
];

/** A YAML scalar: plain when that is unambiguous, else double-quoted (JSON quoting is valid YAML). */
function scalar(v: string | number): string {
  if (typeof v === "number") return String(v);
  if (/^[A-Za-z_][\w./-]*$/.test(v) && !/^(true|false|yes|no|on|off|null|y|n)$/i.test(v)) return v;
  return JSON.stringify(v);
}

/** The DAG as YAML, in Orion's native format (what the server reads with Content-Type application/yaml). */
export function formatDAG(d: D): string {
  const out = [`name: ${scalar(d.name)}`, "tasks:"];
  for (const t of d.tasks) {
    out.push(`  - id: ${scalar(t.id)}`);
    fields(out, t, "    ");
  }
  for (const [key, t] of [["on_failure", d.on_failure], ["on_exit", d.on_exit]] as const) {
    if (!t) continue;
    out.push(`${key}:`);
    fields(out, t, "  ");
  }
  return out.join("\n") + "\n";
}

/** A task's fields but its id, at the given indent. */
function fields(out: string[], t: Omit<T, "id">, ind: string): void {
  out.push(`${ind}kind: ${t.kind}`);
  if (t.command !== undefined) {
    if (t.command.includes("\n")) {
      out.push(`${ind}command: |`);
      for (const l of t.command.split("\n")) out.push(`${ind}  ` + l);
    } else if (!t.command.includes("'")) {
      out.push(`${ind}command: '${t.command}'`); // YAML single quotes: no escapes inside
    } else out.push(`${ind}command: ${JSON.stringify(t.command)}`);
  }
  if (t.duration !== undefined) out.push(`${ind}duration: ${scalar(t.duration)}`);
  if (t.depends_on?.length) out.push(`${ind}depends_on: [${t.depends_on.map(scalar).join(", ")}]`);
  if (t.priority !== undefined) out.push(`${ind}priority: ${t.priority}`);
  if (t.max_retries !== undefined) out.push(`${ind}max_retries: ${t.max_retries}`);
  if (t.timeout !== undefined) out.push(`${ind}timeout: ${scalar(t.timeout)}`);
  if (t.trigger_rule !== undefined) out.push(`${ind}trigger_rule: ${t.trigger_rule}`);
  if (t.when !== undefined) out.push(`${ind}when: ${JSON.stringify(t.when)}`);
  if (t.continue_on_failure) out.push(`${ind}continue_on_failure: true`);
}
