// The console's names for the API's JSON shapes. Every shape comes from the
// OpenAPI document the server serves (internal/http/openapi/openapi.json)
// through src/api.gen.ts, which `npm run gen` writes (`make openapi` runs it):
// nothing here restates a field or a status spelling.
import { taskStatusValues, type components } from "./api.gen";

type Schemas = components["schemas"];

/** Every task status, in the order the core declares them. */
export const TASK_STATUSES = taskStatusValues;
export type TaskStatus = Schemas["TaskStatus"];
export type DAGStatus = Schemas["DAGStatus"];

export type DAGSummary = Schemas["DAGSummary"];
export type DAGView = Schemas["DAG"];
export type TaskView = Schemas["Task"];
export type InstanceList = Schemas["InstanceList"];
export type Shape = Schemas["Shape"];
export type ShapeNode = Schemas["ShapeNode"];
export type TaskPage = Schemas["TaskPage"];
export type AttemptSummary = Schemas["Attempt"];
export type ClusterResponse = Schemas["Cluster"];
export type ScheduleView = Schemas["Schedule"];
export type ScheduleRun = Schemas["ScheduleRun"];
export type DemoStatus = Schemas["DemoStatus"];
export type APIErrorBody = Schemas["ErrorBody"];

/**
 * One live event (internal/http/events/events.go documents each type). Log
 * events (task, dag, dag_deleted) have a cursor id ("REV" or "REV:N") and
 * rev > 0. Unknown types and fields are ignored.
 */
export type StreamEvent = Schemas["Event"];
