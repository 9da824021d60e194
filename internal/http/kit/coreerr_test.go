package kit

import (
	"net/http"
	"testing"

	"github.com/orion-sched/orion/internal/core"
)

// Every code the core refuses with has its wire code, spelled as the core
// names it (what logs show is what clients see), with the status the API
// documents for it.
func TestCoreCodesMapped(t *testing.T) {
	for c := core.ErrCode(1); c.String() != "unknown"; c++ {
		code, status := CoreCode(c)
		if string(code) != c.String() {
			t.Errorf("core code %d (%s) maps to %q", c, c, code)
		}
		if status == http.StatusInternalServerError {
			t.Errorf("core code %s has no status", c)
		}
	}
	if code, status := CoreCode(0); status != http.StatusInternalServerError {
		t.Errorf("the zero code maps to %s %d, want internal 500", code, status)
	}
}
