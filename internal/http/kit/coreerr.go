package kit

import (
	"net/http"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
)

// coreCodes maps each refusal of the core (core.Error, core.LimitError) to
// the API's code and HTTP status: the one place the core's codes meet the
// wire's.
var coreCodes = map[core.ErrCode]struct {
	code   apitypes.Code
	status int
}{
	core.CodeNotFound:         {apitypes.CodeNotFound, http.StatusNotFound},
	core.CodeConflict:         {apitypes.CodeConflict, http.StatusConflict},
	core.CodeNotLeader:        {apitypes.CodeNotLeader, http.StatusServiceUnavailable},
	core.CodeTooManyLiveDAGs:  {apitypes.CodeTooManyLiveDAGs, http.StatusTooManyRequests},
	core.CodeTooManyLiveTasks: {apitypes.CodeTooManyLiveTasks, http.StatusTooManyRequests},
	core.CodeTooManySchedules: {apitypes.CodeTooManySchedules, http.StatusTooManyRequests},
}

// CoreCode returns the API's code and HTTP status for a code of the core's
// (internal for one it does not know: a code added to the core and not here).
func CoreCode(c core.ErrCode) (apitypes.Code, int) {
	if m, ok := coreCodes[c]; ok {
		return m.code, m.status
	}
	return apitypes.CodeInternal, http.StatusInternalServerError
}
