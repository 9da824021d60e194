// Package hijack lets a websocket upgrade work under HTTP middleware.
// gorilla/websocket asserts http.Hijacker on the ResponseWriter it is given,
// while middleware (metrics, logging) wraps that writer; the event stream
// and the worker stream both upgrade under such wrappers.
package hijack

import "net/http"

// Writer returns the first ResponseWriter that can be hijacked, following
// wrappers that expose Unwrap (as http.ResponseController expects), or w
// itself when none can.
func Writer(w http.ResponseWriter) http.ResponseWriter {
	for cur := w; ; {
		if _, ok := cur.(http.Hijacker); ok {
			return cur
		}
		u, ok := cur.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		cur = u.Unwrap()
	}
}
