package apitypes

import "time"

// DemoStatus answers GET /api/v1/demo/status (and the seed's GET
// /admin/status) on every server, in demo mode or not.
type DemoStatus struct {
	Demo      bool       `json:"demo"`    // the server runs with --demo
	Running   bool       `json:"running"` // a scheduler runs (false after a crash, until a recovery)
	LastCrash *time.Time `json:"last_crash,omitempty"`
	// Detail is what the replica adds about its scheduler, when it does.
	Detail any `json:"detail,omitempty"`
}

// DemoCrash answers POST /api/v1/demo/crash.
type DemoCrash struct {
	Status    string    `json:"status"` // "crashed"
	CrashTime time.Time `json:"crash_time"`
}

// DemoRecover answers POST /api/v1/demo/recover.
type DemoRecover struct {
	Status       string    `json:"status"` // "recovered"
	RecoveryTime time.Time `json:"recovery_time"`
	// DowntimeMs is the time since the last crash (0 when there was none).
	DowntimeMs int64 `json:"downtime_ms"`
}

// Health answers /healthz: the process serves (whatever its leadership).
type Health struct {
	Status string `json:"status"` // "ok"
}
