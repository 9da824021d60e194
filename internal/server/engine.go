package server

import (
	"errors"

	"github.com/orion-sched/orion/internal/engine"
)

// Engine returns the replica's current engine.
func (s *Server) Engine() *engine.Engine { return s.ref.Get() }

// runEngine runs an engine; a demo crash is not the process's end.
func (s *Server) runEngine(eng *engine.Engine) {
	if err := eng.Run(s.ectx); !errors.Is(err, engine.ErrCrashed) {
		s.engineCh <- err
	}
}
