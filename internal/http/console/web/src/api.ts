// A small client of Orion's REST API. Everything is same-origin: the console
// is served by the replica it talks to.
import type {
  APIErrorBody,
  ClusterResponse,
  DAGView,
  ListResponse,
  ScheduleRun,
  ScheduleView,
  SubmitResponse,
  TaskView,
} from "./types";

const TOKEN_KEY = "orion.token";

export interface DemoStatus {
  demo?: boolean;
  running?: boolean;
  last_crash?: string;
  detail?: unknown;
}

/** The bearer token, when the server requires one (kept for this tab only). */
export function token(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(t: string): void {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class APIError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown[],
  ) {
    super(message);
  }
}

/** Called with every 401, so the page can ask for a token. */
export let onUnauthorized: () => void = () => {};
export function setOnUnauthorized(fn: () => void): void {
  onUnauthorized = fn;
}

export function authHeaders(h: Record<string, string> = {}): Record<string, string> {
  const t = token();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}

async function request(method: string, path: string, body?: BodyInit, headers: Record<string, string> = {}, timeoutMs = 15000): Promise<Response> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const resp = await fetch(path, { method, body, headers: authHeaders(headers), signal: ctl.signal, cache: "no-store" });
    if (resp.status === 401) onUnauthorized();
    return resp;
  } catch (e) {
    if ((e as Error).name === "AbortError") throw new APIError(0, "timeout", `${method} ${path}: no answer in ${timeoutMs / 1000}s`);
    throw new APIError(0, "network", `${method} ${path}: ${(e as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
}

async function json<T>(method: string, path: string, body?: BodyInit, headers: Record<string, string> = {}, timeoutMs?: number): Promise<T> {
  return (await jsonRev<T>(method, path, body, headers, timeoutMs)).body;
}

/**
 * json, with the revision of a write's answer (X-Orion-Revision: the
 * revision the replica had applied, the write included; 0 when absent).
 */
async function jsonRev<T>(
  method: string,
  path: string,
  body?: BodyInit,
  headers: Record<string, string> = {},
  timeoutMs?: number,
): Promise<{ body: T; revision: number }> {
  const resp = await request(method, path, body, headers, timeoutMs);
  const text = await resp.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: reported below
  }
  if (!resp.ok) {
    const err = (parsed as APIErrorBody | undefined)?.error;
    if (err && typeof err === "object") throw new APIError(resp.status, err.code, err.message, err.details);
    throw new APIError(resp.status, "http_" + resp.status, `${method} ${path}: ${resp.status} ${text.slice(0, 200)}`);
  }
  return { body: parsed as T, revision: Number(resp.headers.get("X-Orion-Revision")) || 0 };
}

const enc = encodeURIComponent;

export const api = {
  listDAGs: (limit = 50) => json<ListResponse>("GET", `/api/v1/dags?limit=${limit}`),
  getDAG: (id: string) => json<DAGView>("GET", `/api/v1/dags/${enc(id)}`),
  getTask: (id: string, task: string) => json<TaskView>("GET", `/api/v1/dags/${enc(id)}/tasks/${enc(task)}`),
  /** A task's full log as text, read with the token (for a link that cannot carry one). */
  log: async (id: string, task: string, attempt?: number): Promise<string> => {
    const path = api.logURL(id, task, attempt);
    const resp = await request("GET", path, undefined, { Accept: "text/plain" }, 30000);
    if (!resp.ok) throw new APIError(resp.status, "log", `GET ${path}: ${resp.status}`);
    return resp.text();
  },
  logURL: (id: string, task: string, attempt?: number) =>
    `/api/v1/dags/${enc(id)}/tasks/${enc(task)}/log` + (attempt ? `?attempt=${attempt}` : ""),
  /** Submits a DAG file: JSON when it parses as JSON, YAML otherwise. */
  submit: (text: string) => {
    let ct = "application/yaml";
    try {
      JSON.parse(text);
      ct = "application/json";
    } catch {
      // YAML
    }
    return json<SubmitResponse>("POST", "/api/v1/dags", text, { "Content-Type": ct }, 35000);
  },
  cancel: (id: string) => json<{ id: string; status: string }>("POST", `/api/v1/dags/${enc(id)}/cancel`, undefined, {}, 35000),
  retry: (id: string) => json<{ id: string; status: string }>("POST", `/api/v1/dags/${enc(id)}/retry`, undefined, {}, 35000),
  /** Deletes a finished DAG with its tasks; revision is the deletion's (0 if the answer had none). */
  deleteDAG: (id: string) => jsonRev<{ id: string; status: string }>("DELETE", `/api/v1/dags/${enc(id)}`, undefined, {}, 35000),
  cluster: () => json<ClusterResponse>("GET", "/api/v1/cluster", undefined, {}, 5000),
  schedules: () => json<{ schedules: ScheduleView[] }>("GET", "/api/v1/schedules", undefined, {}, 5000),
  scheduleRuns: (id: string) => json<{ runs: ScheduleRun[] }>("GET", `/api/v1/schedules/${enc(id)}/runs`, undefined, {}, 5000),
  scheduleAction: (id: string, verb: "pause" | "resume" | "trigger") => json<unknown>("POST", `/api/v1/schedules/${enc(id)}/${verb}`),
  metricsText: async (): Promise<string> => {
    const resp = await request("GET", "/metrics", undefined, {}, 5000);
    if (!resp.ok) throw new APIError(resp.status, "http_" + resp.status, "GET /metrics: " + resp.status);
    return resp.text();
  },
  /**
   * GET /api/v1/demo/status: {"demo": bool, "running": bool, "last_crash"?}.
   * It answers on every server (demo is false outside demo mode); null when
   * this server has no such endpoint.
   */
  demoStatus: async (base = ""): Promise<DemoStatus | null> => {
    const resp = await request("GET", base + "/api/v1/demo/status", undefined, {}, 4000);
    if (resp.status === 404 || resp.status === 405) return null;
    if (!resp.ok) throw new APIError(resp.status, "http_" + resp.status, "GET /api/v1/demo/status: " + resp.status);
    if (!(resp.headers.get("Content-Type") ?? "").includes("json")) return null;
    return (await resp.json()) as DemoStatus;
  },
  /**
   * POST /api/v1/demo/crash or /api/v1/demo/recover (demo mode only), on
   * this server or, with target (a replica's name), relayed by this server
   * to that replica: the page stays on one origin.
   */
  demo: (what: "crash" | "recover", target = "") =>
    json<Record<string, unknown>>("POST", `/api/v1/demo/${what}` + (target ? `?target=${encodeURIComponent(target)}` : ""), undefined, {}, 35000),
};
