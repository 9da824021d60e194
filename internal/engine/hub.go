package engine

import (
	"context"

	"github.com/orion-sched/orion/internal/workerstream"
)

// HubWorkers turns a worker hub's events into the engine's Config.Workers
// until ctx ends. Every attempt runs on a worker that joined this way: a
// remote `orion worker`, or a replica's own slots through an in-process
// pipe (workerstream.Hub.DialSelf).
func HubWorkers(ctx context.Context, in <-chan workerstream.Event) <-chan WorkerEvent {
	out := make(chan WorkerEvent, 256)
	go func() {
		for {
			var ev workerstream.Event
			select {
			case <-ctx.Done():
				return
			case ev = <-in:
			}
			we := WorkerEvent{ID: ev.ID, InFlight: ev.InFlight}
			if ev.Worker != nil {
				we.Exec = ev.Worker
				we.Standalone = ev.Worker.Replica() == ""
			}
			switch ev.Kind {
			case workerstream.Joined:
				we.Kind = WorkerJoined
			case workerstream.Confirmed:
				we.Kind = WorkerConfirmed
			case workerstream.Disconnected:
				we.Kind = WorkerDisconnected
			case workerstream.Left:
				we.Kind = WorkerLeft
			default:
				continue
			}
			select {
			case out <- we:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
