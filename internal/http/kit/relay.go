package kit

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/core"
)

// Relay sends one request a replica received on to another replica (the
// leader, or the replica a demo control names) and copies the answer back.
// The standby's write forwarding and the demo controls' relay share it, so
// both send the same headers and mark the request as forwarded the same way.
type Relay struct {
	Client  *http.Client  // nil: http.DefaultClient
	To      string        // the other replica's API URL
	From    string        // this replica's name, sent in ForwardedHeader
	Token   string        // bearer token for the other replica ("" for none)
	Timeout time.Duration // for the whole exchange; 0: the request's own context only
	// Headers are the request headers copied to the other replica.
	Headers []string
	// Set are response headers this replica adds to the answer.
	Set map[string]string
	// AwaitRev, when set, is called with the RevisionHeader of a successful
	// answer before it is passed on (a forwarded write: this replica
	// answers once it has applied the write, so its client can read it
	// here at once). It is bounded by awaitRevBound; a replica that lags
	// further answers anyway.
	AwaitRev func(ctx context.Context, rev int64) error
}

// ForwardedHeader marks a request one replica relayed to another (a write
// forwarded to the leader, a demo control sent to the replica it names); a
// request carrying it is never relayed again.
const ForwardedHeader = "X-Orion-Forwarded-By"

// LeaderHeader names the leader on an answer a standby relayed from it.
const LeaderHeader = "X-Orion-Leader"

// RevisionHeader carries, on the answer to a write, the etcd revision the
// answering replica had applied when it answered (the write included).
const RevisionHeader = "X-Orion-Revision"

// awaitRevBound bounds how long a relayed write's answer waits for this
// replica to apply the write. A standby applies within milliseconds; one
// that lags by more answers without the guarantee rather than stall.
const awaitRevBound = 3 * time.Second

// relayedResponseHeaders are copied from the other replica's answer.
var relayedResponseHeaders = []string{"Content-Type", "Location", "Retry-After", RevisionHeader}

// MarkRevision sets RevisionHeader on w to the revision b has applied. Write
// handlers call it once their change is applied.
func MarkRevision(ctx context.Context, b interface {
	Query(context.Context, func(*core.Core)) error
}, w http.ResponseWriter) {
	var rev int64
	if err := b.Query(ctx, func(c *core.Core) { rev = c.Rev() }); err == nil && rev > 0 {
		w.Header().Set(RevisionHeader, strconv.FormatInt(rev, 10))
	}
}

// Do sends r's method and request URI, with body (nil: none), and writes
// the other replica's status, headers and body to w. An error means the
// other replica did not answer and nothing was written to w.
func (rl Relay) Do(w http.ResponseWriter, r *http.Request, body []byte) error {
	ctx := r.Context()
	if rl.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rl.Timeout)
		defer cancel()
	}
	var reqBody io.Reader
	if len(body) > 0 {
		reqBody = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, strings.TrimRight(rl.To, "/")+r.URL.RequestURI(), reqBody)
	if err != nil {
		return err
	}
	for _, h := range rl.Headers {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	if rl.Token != "" {
		req.Header.Set("Authorization", "Bearer "+rl.Token)
	}
	req.Header.Set(ForwardedHeader, rl.From)
	client := rl.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if rl.AwaitRev != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if rev, err := strconv.ParseInt(resp.Header.Get(RevisionHeader), 10, 64); err == nil && rev > 0 {
			actx, cancel := context.WithTimeout(r.Context(), awaitRevBound)
			_ = rl.AwaitRev(actx, rev)
			cancel()
		}
	}
	for _, h := range relayedResponseHeaders {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	for k, v := range rl.Set {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return nil
}
