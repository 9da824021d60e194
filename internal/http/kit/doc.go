// Package kit is the HTTP plumbing Orion's HTTP surfaces share: the REST
// API (internal/http/api), the event stream (internal/http/events) and the seed
// compatibility API (internal/http/seedapi). It writes JSON and the API's error
// body, relays a request to another replica (a standby's write forwarded to
// the leader, a demo control sent to the replica it names), and holds the
// small helpers that are not specific to one surface: the cross-origin
// policy of the browser-facing endpoints (Origins), bearer token checks and
// the Idempotency-Key rule.
//
// It serves no route of its own. The Host allow-list and the judgement of
// an Origin against it live in internal/http/guard.
package kit
