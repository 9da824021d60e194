package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

// Schedule wire types (internal/http/apitypes).
type (
	Schedule            = apitypes.Schedule
	ScheduleList        = apitypes.ScheduleList
	SchedulePutResponse = apitypes.SchedulePutResponse
	ScheduleRun         = apitypes.ScheduleRun
	ScheduleRuns        = apitypes.ScheduleRuns
	TriggerResponse     = apitypes.TriggerResponse
)

func schedulePath(id string) string { return "/api/v1/schedules/" + url.PathEscape(id) }

// PutSchedule creates or updates a schedule from a DAG file with a
// schedule: block. A schedule always has an id, so sending it again is
// harmless and the call is retried.
func (c *Client) PutSchedule(ctx context.Context, body []byte, contentType string) (SchedulePutResponse, error) {
	var out SchedulePutResponse
	r := request{method: http.MethodPost, path: "/api/v1/schedules", body: body, contentType: contentType, idempotent: true}
	if r.contentType == "" {
		r.contentType = "application/octet-stream"
	}
	err := c.doJSON(ctx, r, &out)
	return out, err
}

// ListSchedules lists every schedule with its next fire times.
func (c *Client) ListSchedules(ctx context.Context) (*ScheduleList, error) {
	var out ScheduleList
	if err := c.getJSON(ctx, "/api/v1/schedules", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSchedule returns one schedule with its DAG.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	if err := need("schedule id", id); err != nil {
		return nil, err
	}
	var out Schedule
	if err := c.getJSON(ctx, schedulePath(id), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ScheduleRuns lists the runs of a schedule, newest tick first.
func (c *Client) ScheduleRuns(ctx context.Context, id string) (*ScheduleRuns, error) {
	if err := need("schedule id", id); err != nil {
		return nil, err
	}
	var out ScheduleRuns
	if err := c.getJSON(ctx, schedulePath(id)+"/runs", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSchedule stops a schedule firing; ResumeSchedule starts it again
// (ticks missed meanwhile are its catch-up policy's). Both are idempotent.
func (c *Client) PauseSchedule(ctx context.Context, id string) (ActionResponse, error) {
	return c.scheduleAction(ctx, id, http.MethodPost, "/pause")
}

// ResumeSchedule: see PauseSchedule.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (ActionResponse, error) {
	return c.scheduleAction(ctx, id, http.MethodPost, "/resume")
}

// DeleteSchedule deletes a schedule; its runs stay.
func (c *Client) DeleteSchedule(ctx context.Context, id string) (ActionResponse, error) {
	return c.scheduleAction(ctx, id, http.MethodDelete, "")
}

func (c *Client) scheduleAction(ctx context.Context, id, method, verb string) (ActionResponse, error) {
	var out ActionResponse
	if err := need("schedule id", id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{method: method, path: schedulePath(id) + verb, idempotent: verb != ""}, &out)
	return out, err
}

// TriggerSchedule starts a run of a schedule now. Retried: a repeat within
// the same second names the same run.
func (c *Client) TriggerSchedule(ctx context.Context, id string) (TriggerResponse, error) {
	var out TriggerResponse
	if err := need("schedule id", id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{method: http.MethodPost, path: schedulePath(id) + "/trigger"}, &out)
	return out, err
}
