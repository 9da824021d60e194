package server

import (
	"errors"

	"github.com/orion-sched/orion/internal/scheduler"
)

// Engine returns the replica's current engine.
func (s *Server) Engine() *scheduler.Engine { return s.ref.Get() }

// runEngine runs an engine; a demo crash is not the process's end.
func (s *Server) runEngine(eng *scheduler.Engine) {
	if err := eng.Run(s.ectx); !errors.Is(err, scheduler.ErrCrashed) {
		s.engineCh <- err
	}
}
