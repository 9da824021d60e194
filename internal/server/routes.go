package server

import "github.com/orion-sched/orion/internal/http/api"

// Routes returns the ServeMux patterns the replica's HTTP server serves:
// the API's, the console's, the event stream's, the demo controls', the
// seed API's and the worker stream's. The OpenAPI contract test compares
// them with the document.
func (s *Server) Routes() []string { return api.Patterns(s.http.Handler) }
