package workerstream

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/time/rate"

	"github.com/orion-sched/orion/internal/model"
)

// Limits of what a worker may say, enforced where its stream enters the
// hub: a hello is checked before the worker exists for the leader, and
// every stream has a budget of messages it may send beyond the results of
// the attempts it holds.
const (
	// DefaultMaxSlots bounds the slots a hello may announce
	// (HubConfig.MaxSlots; orion's worker_max_slots).
	DefaultMaxSlots = 1024
	// MaxSlotsCeiling bounds MaxSlots itself: slot counts are summed over
	// the workers, and a total must never overflow.
	MaxSlotsCeiling = 1 << 20
	// DefaultMaxWorkers bounds the workers a hub holds (HubConfig.MaxWorkers;
	// orion's max_workers). The term record lists the standalone ones:
	// 1000 ids of at most 255 bytes stay well within one etcd request.
	DefaultMaxWorkers = 1000
	// DefaultMaxRate is the messages per second a stream may send beyond
	// the results of attempts it holds (HubConfig.MaxRate; orion's
	// worker_stream_max_rate), with a burst of as many. A worker sends a
	// heartbeat every 100 ms and a confirmation per stream: a hundred
	// times less. A result of an attempt the stream's worker was sent (or
	// listed in its hello) costs nothing, so the rate of results, bounded
	// by the leader's own dispatches, never counts against it.
	DefaultMaxRate = 1000
	// maxHostBytes and maxInstanceBytes bound the hello's descriptive
	// fields (a host name is at most 255 bytes; an instance is 26).
	maxHostBytes     = 255
	maxInstanceBytes = 64
)

// Refusal reasons: the hub's OnRefused and the worker's error name them.
const (
	RefusedID      = "id"      // the worker id (or replica name) is not a valid id
	RefusedSlots   = "slots"   // no slots for a standalone worker, or more than the leader's maximum
	RefusedLabels  = "labels"  // labels model.CheckLabels refuses
	RefusedHello   = "hello"   // not a hello, or a hello with a bad host, instance or pid
	RefusedVersion = "version" // another protocol version
	RefusedWorkers = "workers" // the hub holds max_workers workers already (not final)
	// RefusedIdentity: the stream's token may not be this worker (its id
	// or labels), or is not a worker token at all.
	RefusedIdentity = "identity"
	// RefusedHeld: a worker of another token holds the id (not final).
	RefusedHeld  = "held"
	RefusedFlood = "flood" // the stream sent messages beyond its budget (not a hello refusal)
)

// checkHello returns why a hello is refused (reason and message), or ""
// when it is fine. Every refusal but the version's names a setting of the
// worker's that a new stream would send again identically. (The number of
// workers is checked when the worker joins: Hub.join.)
func checkHello(m Msg, maxSlots int) (reason, msg string) {
	h := m.Hello
	if m.Type != TypeHello || h == nil {
		return RefusedHello, fmt.Sprintf("the first message must be a hello, got %s", quoteCut(m.Type))
	}
	if h.Version != 0 && h.Version != ProtocolVersion {
		return RefusedVersion, fmt.Sprintf("protocol version %d; this leader speaks %d", h.Version, ProtocolVersion)
	}
	if err := model.CheckWorkerID(h.Worker); err != nil {
		return RefusedID, err.Error()
	}
	if h.Replica != "" && !model.ValidWorkerName(h.Replica) {
		return RefusedID, fmt.Sprintf("replica name %s is invalid: want %s", quoteCut(h.Replica), model.WorkerNameRule)
	}
	switch {
	case h.Slots < 0 || h.Slots > maxSlots:
		return RefusedSlots, fmt.Sprintf("%d slots: want 1 to %d (the leader's worker_max_slots)", h.Slots, maxSlots)
	case h.Slots == 0 && h.Replica == "":
		// A replica without slots still keeps a stream, so that it sees
		// the leader die at once; a standalone worker must bring slots.
		return RefusedSlots, "0 slots: a worker needs at least 1"
	}
	if err := model.CheckLabels(h.Labels); err != nil {
		return RefusedLabels, err.Error()
	}
	switch {
	case len(h.Host) > maxHostBytes || !printable(h.Host):
		return RefusedHello, fmt.Sprintf("host %s: want at most %d printable bytes", quoteCut(h.Host), maxHostBytes)
	case len(h.Instance) > maxInstanceBytes || !printable(h.Instance):
		return RefusedHello, fmt.Sprintf("instance %s: want at most %d printable bytes", quoteCut(h.Instance), maxInstanceBytes)
	case h.PID < 0:
		return RefusedHello, fmt.Sprintf("pid %d", h.PID)
	}
	return "", ""
}

// printable reports whether s is printable ASCII: what a log line or the
// cluster view shows of it as is.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// quoteCut quotes what a worker sent for a message, cut to 64 bytes.
func quoteCut(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:64], len(s))
}

// errFlood ends a stream that sent more than its budget allows.
var errFlood = errors.New("workerstream: the worker sent messages faster than the stream's limit")

// newBudget is a stream's allowance of messages beyond the results of the
// attempts it holds: rate a second, with a burst of as many.
func newBudget(r float64) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(r), max(1, int(r)))
}

// RefusedError is a leader's refusal of this worker's hello: a setting of
// the worker (its id, slots or labels) that the leader will refuse again,
// so the agent stops rather than reconnect for ever.
type RefusedError struct {
	Leader string
	Reason string
	Msg    string
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString("the leader")
	if e.Leader != "" {
		b.WriteString(" " + e.Leader)
	}
	fmt.Fprintf(&b, " refused this worker (%s): %s", e.Reason, e.Msg)
	return b.String()
}
