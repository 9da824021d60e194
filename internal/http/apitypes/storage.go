package apitypes

import "time"

// Storage states: what etcd's space lets Orion do.
const (
	StorageOK      = "ok"      // under the admission limit
	StorageLimited = "limited" // above it: new DAGs and retries get 507; what runs goes on
	StorageFull    = "full"    // at the store's guard or etcd's NOSPACE alarm: writes are held
)

// Storage is etcd's space as a replica measures it (every member, every
// second), in /readyz and the cluster view.
type Storage struct {
	State   string `json:"state"` // StorageOK, StorageLimited, StorageFull
	Message string `json:"message,omitempty"`
	// The largest database among the members and the part of it in use
	// (both estimated: measured, plus what the leader wrote since), the
	// smallest quota, and the in-use size above which new work is refused
	// (storage_admission_ratio of the quota).
	DBSizeBytes         int64     `json:"db_size_bytes"`
	InUseBytes          int64     `json:"in_use_bytes"`
	QuotaBytes          int64     `json:"quota_bytes"`
	AdmissionLimitBytes int64     `json:"admission_limit_bytes"`
	AdmissionRatio      float64   `json:"admission_ratio"`
	NoSpaceAlarm        bool      `json:"nospace_alarm,omitempty"`
	MeasuredAt          time.Time `json:"measured_at"`
}
