package server

import (
	"fmt"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/store"
)

// maxItemsBytes is the most a map group's items may take: what a record
// may hold besides the rest of a task record (core.MaxTaskRecordBytes).
func maxItemsBytes(cfg config.Server) int {
	limits := store.Limits{MaxRequest: cfg.EtcdMaxRequestBytes}
	return max(limits.RecordLimit()-core.MaxTaskRecordBytes-len(`,"items":,"expanded":2147483647`), 1<<10)
}

// checkRecordBound refuses an etcd_max_request_bytes too small for the
// largest task record: one holding max_output_bytes of outputs. Outputs are
// committed with the success they belong to and are never cut, so etcd must
// take such a record whole; better said at start than by a poison entry
// parked on the first large output.
func checkRecordBound(cfg config.Server) error {
	need := core.TaskRecordBound(cfg.MaxOutputBytes)
	limits := store.Limits{MaxRequest: cfg.EtcdMaxRequestBytes}
	if got := limits.RecordLimit(); got < need {
		return fmt.Errorf("etcd_max_request_bytes %d leaves %d bytes for a record, and a task record with max_output_bytes %d of outputs "+
			"may take %d: raise etcd_max_request_bytes to at least %d (the etcd members' --max-request-bytes with it), or lower max_output_bytes",
			cfg.EtcdMaxRequestBytes, got, cfg.MaxOutputBytes, need, cfg.EtcdMaxRequestBytes+need-got)
	}
	return nil
}
