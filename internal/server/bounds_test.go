package server

import (
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/config"
)

// A replica refuses to start when etcd's request limit leaves no room for
// a task record holding max_output_bytes of outputs, and says what to
// raise; the defaults fit.
func TestRecordBoundCheckedAtStart(t *testing.T) {
	if err := checkRecordBound(config.Server{EtcdMaxRequestBytes: 3 << 19, MaxOutputBytes: 64 << 10}); err != nil {
		t.Errorf("defaults: %v", err)
	}
	err := checkRecordBound(config.Server{EtcdMaxRequestBytes: 64 << 10, MaxOutputBytes: 64 << 10})
	if err == nil || !strings.Contains(err.Error(), "raise etcd_max_request_bytes to at least 131083") {
		t.Errorf("64 KiB requests with 64 KiB outputs: %v", err)
	}
	if err := checkRecordBound(config.Server{EtcdMaxRequestBytes: 131083, MaxOutputBytes: 64 << 10}); err != nil {
		t.Errorf("the size the message asks for: %v", err)
	}
}
