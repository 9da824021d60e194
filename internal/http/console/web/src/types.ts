// JSON shapes of Orion's REST API v1 (internal/http/api, internal/core/view.go)
// and of the live event stream (internal/http/events).

export const TASK_STATUSES = [
  "pending",
  "ready",
  "running",
  "retrying",
  "succeeded",
  "failed",
  "upstream_failed",
  "cancelled",
  "skipped",
] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];
export type DAGStatus = "running" | "succeeded" | "failed" | "cancelled";

export interface DAGSummary {
  id: string;
  name: string;
  status: DAGStatus;
  run: number;
  submitted_at: string;
  finished_at?: string;
  task_count: number;
  counts: Record<string, number>;
  /** A cancel was asked for a DAG with handlers or notifications: its tasks are cancelled, then those run. */
  cancel_requested?: boolean;
}

export interface ListResponse {
  dags: DAGSummary[];
  revision: number;
  node: string;
}

export interface AttemptSummary {
  attempt: number;
  worker?: string;
  started_at?: string;
  finished_at?: string;
  outcome: string;
  exit_code?: number;
  error?: string;
}

export interface TaskSpec {
  id: string;
  name?: string;
  kind: string;
  command?: string;
  interpreter?: string;
  env?: Record<string, string>;
  workdir?: string;
  url?: string;
  method?: string;
  expect_status?: number;
  duration?: string;
  fail?: number;
  depends_on?: string[];
  priority: number;
  max_retries: number;
  timeout: string;
  pool?: string;
  selector?: Record<string, string>;
  trigger_rule?: string;
  when?: string;
  continue_on_failure?: boolean;
}

export interface TaskView {
  id: string;
  kind: string;
  status: TaskStatus;
  attempts: number;
  retries: number;
  max_retries: number;
  priority: number;
  depends_on: string[];
  worker?: string;
  started_at?: string;
  finished_at?: string;
  retry_at?: string;
  duration_ms?: number;
  exit_code: number | null;
  error?: string;
  output_tail: string;
  event?: string;
  cascade?: boolean;
  cause?: string;
  /** Why a ready task is not running yet: a DAG or pool limit, or no worker with its labels. */
  waiting?: string;
  /** The rule it runs by (all_success by default), its condition, and what it is. */
  trigger_rule: string;
  when?: string;
  role: "task" | "handler" | "notification";
  /** Why a skipped task was: condition, trigger_rule or not_needed. */
  skipped?: string;
  history?: AttemptSummary[];
  spec: TaskSpec;
  revision?: number;
}

export interface DAGView extends DAGSummary {
  tasks: TaskView[];
  revision: number;
}

export interface SubmitResponse {
  id: string;
  created: boolean;
  status?: string;
}

export interface APIErrorBody {
  error: { code: string; message: string; details?: unknown[] };
}

export interface Replica {
  name: string;
  role: string; // leader | standby | unknown
  api_url?: string;
  applied_revision: number;
  lag: number;
  leader_since?: string;
  first_commit_at?: string;
  pid?: number;
  reachable: boolean;
}

export interface WorkerInfo {
  id: string;
  replica?: string;
  slots: number;
  labels?: Record<string, string>;
  busy: number;
  running: number;
  connected: boolean;
  since: string;
  /** where the worker runs, as its hello said; absent for an earlier version */
  host?: string;
  pid?: number;
}

export interface EtcdMember {
  name: string;
  id: string;
  client_urls: string[];
  peer_urls: string[];
  is_leader: boolean;
}

export interface ClusterResponse {
  node: string;
  leader: string;
  leader_url?: string;
  applied_revision: number;
  lag: number;
  replicas: Replica[];
  workers: WorkerInfo[];
  etcd: { endpoints: string[]; members?: EtcdMember[] };
}

/**
 * One live event (internal/http/events/events.go documents each type). Log events
 * (task, dag, dag_deleted) have a cursor id ("REV" or "REV:N") and rev > 0.
 * Unknown types and fields are ignored.
 */
export interface StreamEvent {
  type: string; // task | dag | dag_deleted | metrics | leader | system | gap | resync
  id?: string;
  rev?: number;
  time?: string;
  dag?: string;
  task?: string;
  name?: string;
  status?: string;
  run?: number;
  tasks?: number;
  attempt?: number;
  retries?: number;
  worker?: string;
  event?: string;
  exit_code?: number;
  error?: string;
  started_at?: string;
  finished_at?: string;
  retry_at?: string;
  cascade?: boolean;
  cause?: string;
  submitted_at?: string;
  node?: string;
  leader?: string;
  since?: string;
  dropped?: number;
  meta?: Record<string, string>;
  metrics?: Record<string, unknown>;
  [key: string]: unknown;
}

/** GET /api/v1/schedules (internal/http/apitypes/schedules.go). */
export interface ScheduleView {
  id: string;
  name: string;
  cron: string;
  timezone: string;
  paused: boolean;
  catchup: string;
  overlap: string;
  max_active_runs: number;
  last_tick?: string;
  last_run?: string;
  next: string[];
  active_runs: number;
}

export interface ScheduleRun {
  id: string;
  tick: string;
  manual?: boolean;
  status: string;
  submitted_at: string;
}
