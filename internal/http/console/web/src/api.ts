// The console's client of Orion's REST API: openapi-fetch over the paths
// generated from the server's OpenAPI document (src/api.gen.ts), so every
// path, parameter and answer is typed by the contract the server is tested
// against. Everything is same-origin: the console is served by the replica
// it talks to.
import createClient from "openapi-fetch";
import type { paths } from "./api.gen";
import type { APIErrorBody, DemoStatus } from "./types";

export type { DemoStatus };

const TOKEN_KEY = "orion.token";

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

const client = createClient<paths>({ cache: "no-store" });
client.use({
  onRequest({ request }) {
    const t = token();
    if (t) request.headers.set("Authorization", "Bearer " + t);
    return request;
  },
  onResponse({ response }) {
    if (response.status === 401) onUnauthorized();
    return response;
  },
});

/** What an openapi-fetch call resolves to, loosely: the data or the error body. */
interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/**
 * settle turns a call into its data and the revision of its answer
 * (X-Orion-Revision on writes: the revision the replica had applied, the
 * write included; 0 when absent), or throws an APIError: the server's error
 * body when it sent one, a timeout, or the network.
 */
async function settle<T>(what: string, timeoutMs: number, call: (signal: AbortSignal) => Promise<Answer<T>>): Promise<{ body: T; revision: number }> {
  let r: Answer<T>;
  try {
    r = await call(AbortSignal.timeout(timeoutMs));
  } catch (e) {
    const name = (e as Error).name;
    if (name === "TimeoutError" || name === "AbortError") throw new APIError(0, "timeout", `${what}: no answer in ${timeoutMs / 1000}s`);
    throw new APIError(0, "network", `${what}: ${(e as Error).message}`);
  }
  const status = r.response.status;
  if (!r.response.ok) {
    const err = (r.error as APIErrorBody | undefined)?.error;
    if (err && typeof err === "object") throw new APIError(status, err.code, err.message, err.details);
    throw new APIError(status, "http_" + status, `${what}: ${status} ${String(r.error ?? "").slice(0, 200)}`);
  }
  return { body: r.data as T, revision: Number(r.response.headers.get("X-Orion-Revision")) || 0 };
}

async function data<T>(what: string, timeoutMs: number, call: (signal: AbortSignal) => Promise<Answer<T>>): Promise<T> {
  return (await settle(what, timeoutMs, call)).body;
}

const enc = encodeURIComponent;

export const api = {
  listDAGs: (limit = 50) =>
    data("GET /api/v1/dags", 15000, (signal) => client.GET("/api/v1/dags", { params: { query: { limit } }, signal })),
  /** A DAG with its tasks; taskLimit 0 asks for none (a big DAG's shape and counts only). */
  getDAG: (id: string, taskLimit?: number) =>
    data(`GET /api/v1/dags/${id}`, 15000, (signal) =>
      client.GET("/api/v1/dags/{id}", { params: { path: { id }, query: taskLimit === undefined ? {} : { task_limit: taskLimit } }, signal }),
    ),
  /** A page of a DAG's tasks: a shape node's or a map group's (group), from cursor. */
  listTasks: (id: string, q: { group?: string; status?: string; limit?: number; cursor?: string }) =>
    data(`GET /api/v1/dags/${id}/tasks`, 15000, (signal) => client.GET("/api/v1/dags/{id}/tasks", { params: { path: { id }, query: q }, signal })),
  getTask: (id: string, task: string) =>
    data(`GET /api/v1/dags/${id}/tasks/${task}`, 15000, (signal) =>
      client.GET("/api/v1/dags/{id}/tasks/{task}", { params: { path: { id, task } }, signal }),
    ),
  /** A page of a map group's instances, in index order. */
  instances: (id: string, task: string, offset: number, limit: number) =>
    data(`GET /api/v1/dags/${id}/tasks/${task}/instances`, 15000, (signal) =>
      client.GET("/api/v1/dags/{id}/tasks/{task}/instances", { params: { path: { id, task }, query: { offset, limit } }, signal }),
    ),
  /** A task's full log as text, read with the token (for a link that cannot carry one). */
  log: (id: string, task: string, attempt?: number): Promise<string> =>
    data(api.logURL(id, task, attempt), 30000, (signal) =>
      client.GET("/api/v1/dags/{id}/tasks/{task}/log", {
        params: { path: { id, task }, query: attempt ? { attempt } : {} },
        headers: { Accept: "text/plain" },
        parseAs: "text",
        signal,
      }),
    ),
  logURL: (id: string, task: string, attempt?: number) =>
    `/api/v1/dags/${enc(id)}/tasks/${enc(task)}/log` + (attempt ? `?attempt=${attempt}` : ""),
  /**
   * Submits a DAG file as it was written: JSON when it parses as JSON, YAML
   * otherwise. The text goes as is, so the server's errors name its lines.
   */
  submit: (text: string) => {
    let ct = "application/yaml";
    try {
      JSON.parse(text);
      ct = "application/json";
    } catch {
      // YAML
    }
    return data("POST /api/v1/dags", 35000, (signal) =>
      client.POST("/api/v1/dags", {
        body: {}, // the file's text below, not an object to serialize
        bodySerializer: () => text,
        headers: { "Content-Type": ct },
        signal,
      }),
    );
  },
  cancel: (id: string) =>
    data(`POST /api/v1/dags/${id}/cancel`, 35000, (signal) => client.POST("/api/v1/dags/{id}/cancel", { params: { path: { id } }, signal })),
  retry: (id: string) =>
    data(`POST /api/v1/dags/${id}/retry`, 35000, (signal) => client.POST("/api/v1/dags/{id}/retry", { params: { path: { id } }, signal })),
  /** Deletes a finished DAG with its tasks; revision is the deletion's (0 if the answer had none). */
  deleteDAG: (id: string) =>
    settle(`DELETE /api/v1/dags/${id}`, 35000, (signal) => client.DELETE("/api/v1/dags/{id}", { params: { path: { id } }, signal })),
  cluster: () => data("GET /api/v1/cluster", 5000, (signal) => client.GET("/api/v1/cluster", { signal })),
  schedules: () => data("GET /api/v1/schedules", 5000, (signal) => client.GET("/api/v1/schedules", { signal })),
  scheduleRuns: (id: string) =>
    data(`GET /api/v1/schedules/${id}/runs`, 5000, (signal) => client.GET("/api/v1/schedules/{id}/runs", { params: { path: { id } }, signal })),
  scheduleAction: (id: string, verb: "pause" | "resume" | "trigger") => {
    const opts = (signal: AbortSignal) => ({ params: { path: { id } }, signal });
    return data(`POST /api/v1/schedules/${id}/${verb}`, 15000, (signal): Promise<Answer<unknown>> => {
      switch (verb) {
        case "pause":
          return client.POST("/api/v1/schedules/{id}/pause", opts(signal));
        case "resume":
          return client.POST("/api/v1/schedules/{id}/resume", opts(signal));
        case "trigger":
          return client.POST("/api/v1/schedules/{id}/trigger", opts(signal));
      }
    });
  },
  metricsText: () => data("GET /metrics", 5000, (signal) => client.GET("/metrics", { parseAs: "text", signal })),
  /**
   * GET /api/v1/demo/status: {"demo": bool, "running": bool, "last_crash"?}
   * on this server or, with base, on another replica's. It answers on every
   * server (demo is false outside demo mode); null when that server has no
   * such endpoint.
   */
  demoStatus: async (base = ""): Promise<DemoStatus | null> => {
    try {
      return await data("GET /api/v1/demo/status", 4000, async (signal): Promise<Answer<DemoStatus | null>> => {
        const r = await client.GET("/api/v1/demo/status", { baseUrl: base || undefined, parseAs: "text", signal });
        if (!r.response.ok) return { error: r.error, response: r.response };
        if (!(r.response.headers.get("Content-Type") ?? "").includes("json")) return { data: null, response: r.response };
        return { data: JSON.parse(r.data ?? "null") as DemoStatus, response: r.response };
      });
    } catch (e) {
      if (e instanceof APIError && (e.status === 404 || e.status === 405)) return null;
      throw e;
    }
  },
  /**
   * POST /api/v1/demo/crash (demo mode only), on this server or, with
   * target (a replica's name), relayed by this server to that replica: the
   * page stays on one origin.
   */
  crash: (target = "") =>
    data("POST /api/v1/demo/crash", 35000, (signal) =>
      client.POST("/api/v1/demo/crash", { params: { query: target ? { target } : {} }, signal }),
    ),
  /** POST /api/v1/demo/recover, as crash. */
  recover: (target = "") =>
    data("POST /api/v1/demo/recover", 35000, (signal) =>
      client.POST("/api/v1/demo/recover", { params: { query: target ? { target } : {} }, signal }),
    ),
};
