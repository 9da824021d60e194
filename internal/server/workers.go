package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/workerstream"
)

// dialLeader connects a replica's own slots to the leader: through an
// in-process pipe when the leader is this replica (nothing is serialized),
// over the leader's websocket otherwise. The leader comes from the
// replica's watched view: redials during a failover read no etcd.
func dialLeader(ctx context.Context, view *leaderView, self string, hub *workerstream.Hub, token string, dialer *websocket.Dialer) (workerstream.Conn, string, error) {
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

// hubWorkers describes the hub's workers for the cluster endpoint.
func hubWorkers(hub *workerstream.Hub) []apitypes.Worker {
	ws := hub.Workers()
	out := make([]apitypes.Worker, 0, len(ws))
	for _, w := range ws {
		out = append(out, apitypes.Worker{ID: w.ID, Replica: w.Replica, Slots: w.Slots, Labels: w.Labels, Running: w.InFlight,
			Connected: w.Connected, Since: w.Since, Host: w.Host, PID: w.PID})
	}
	return out
}

// remoteLogs returns the stream-connected worker that can serve a log, if it
// is connected to this replica's hub.
func remoteLogs(hub *workerstream.Hub, worker string) executor.Executor {
	if w := hub.Worker(worker); w != nil {
		return w
	}
	return nil
}
