// Package apitypes declares, once, every JSON type of Orion's REST API
// (/api/v1): the requests' answers, the DAG and task views, the cluster
// views, the error body and its codes. The API's handlers (internal/http/api)
// encode them and the Go client (internal/client) decodes them; neither
// declares a copy.
//
// The package is a leaf: it imports nothing that does I/O, so the pure
// scheduling core (internal/core) can build the views it declares
// (go list -deps ./internal/core shows no net/http, os/exec or zap).
//
// The DAG and task views are generic in the type of their statuses. The
// server instantiates them with the core's typed statuses (core.DAGStatus,
// core.Status), which marshal to the spellings below; the client
// instantiates them with string, so that a status a newer server adds
// still decodes. Both encode to the same JSON: the shape is declared here
// and nowhere else.
package apitypes
