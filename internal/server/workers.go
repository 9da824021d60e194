package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/workerstream"
)

// replicaDialer connects a replica's own slots to the leader: through an
// in-process pipe when the leader is this replica (nothing is serialized),
// over the leader's websocket otherwise. The leader comes from the
// replica's watched view: redials during a failover read no etcd.
func replicaDialer(view *leaderView, self string, hub *workerstream.Hub, token string, dialer *websocket.Dialer) func(ctx context.Context) (workerstream.Conn, string, error) {
	return func(ctx context.Context) (workerstream.Conn, string, error) {
		l, ok := view.LeaderAddr()
		if !ok {
			return nil, "", errors.New("no leader yet")
		}
		if l.Name == self {
			return hub.DialSelf(self)
		}
		if l.APIURL == "" {
			return nil, "", fmt.Errorf("leader %s has no API URL registered", l.Name)
		}
		url, err := workerstream.StreamURL(l.APIURL)
		if err != nil {
			return nil, "", err
		}
		c, err := workerstream.DialWebsocket(ctx, url, token, dialer)
		return c, l.Name, err
	}
}

// hubWorkers describes the hub's workers for the cluster endpoint.
func hubWorkers(hub *workerstream.Hub) func() []apitypes.Worker {
	return func() []apitypes.Worker {
		ws := hub.Workers()
		out := make([]apitypes.Worker, 0, len(ws))
		for _, w := range ws {
			out = append(out, apitypes.Worker{ID: w.ID, Replica: w.Replica, Slots: w.Slots, Labels: w.Labels, Running: w.InFlight,
				Connected: w.Connected, Since: w.Since, Host: w.Host, PID: w.PID})
		}
		return out
	}
}

// idleExecutor stands in for the slots of a replica started with --slots 0:
// it runs nothing, but its stream to the leader still tells the replica at
// once when the leader dies.
type idleExecutor struct {
	id      string
	results chan model.Result
}

func newIdleExecutor(id string) *idleExecutor {
	return &idleExecutor{id: id, results: make(chan model.Result, 16)}
}

func (x *idleExecutor) ID() string                   { return x.id }
func (x *idleExecutor) Slots() int                   { return 0 }
func (x *idleExecutor) Close() error                 { return nil }
func (x *idleExecutor) Cancel(model.AttemptID)       {}
func (x *idleExecutor) InFlight() []model.AttemptID  { return nil }
func (x *idleExecutor) Results() <-chan model.Result { return x.results }
func (x *idleExecutor) OpenLog(model.AttemptID) (io.ReadCloser, error) {
	return nil, fmt.Errorf("replica has no slots: %w", os.ErrNotExist)
}

// Start is never called (the leader dispatches nothing to zero slots); if it
// were, the attempt is handed back at once without consuming a retry.
func (x *idleExecutor) Start(a model.Attempt) {
	select {
	case x.results <- model.Result{AttemptID: a.AttemptID, Worker: x.id, Outcome: model.Cancelled, ExitCode: -1, Error: "replica has no slots"}:
	default:
	}
}

// remoteLogs returns the stream-connected worker that can serve a log, if it
// is connected to this replica's hub.
func remoteLogs(hub *workerstream.Hub, worker string) executor.Executor {
	if w := hub.Worker(worker); w != nil {
		return w
	}
	return nil
}
