package kit

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
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

// Hints a standby sends with a forwarded write, so that the leader answers
// a write sent again (after the first leader froze) as it answered the
// first send. The leader reads them only on forwarded requests.
const (
	// IDAssignedHeader ("1") marks a write whose id the standby chose (a
	// DAG's, given as its Idempotency-Key, or a manual run's, through
	// TriggerAtHeader): nobody else can have used it, so finding it taken
	// means an earlier send of this write created it.
	IDAssignedHeader = "X-Orion-Id-Assigned"
	// ExistedHeader, on a write sent again, says whether what it deletes or
	// creates existed at the standby before the first send ("1" or "0").
	ExistedHeader = "X-Orion-Existed"
	// TriggerAtHeader names the time (Unix seconds) after which a forwarded
	// trigger's manual run is named.
	TriggerAtHeader = "X-Orion-Trigger-At"
)

// RevisionHeader carries, on the answer to a write, the etcd revision the
// answering replica had applied when it answered (the write included).
const RevisionHeader = "X-Orion-Revision"

// awaitRevBound bounds how long a relayed write's answer waits for this
// replica to apply the write. A standby applies within milliseconds; one
// that lags by more answers without the guarantee rather than stall.
const awaitRevBound = 3 * time.Second

// relayedResponseHeaders are copied from the other replica's answer.
var relayedResponseHeaders = []string{"Content-Type", "Location", "Retry-After", RevisionHeader}

// Revisioner says which revision a replica has applied (*engine.Engine).
type Revisioner interface {
	Rev() int64
}

// MarkRevision sets RevisionHeader on w to the revision b has applied. Write
// handlers call it once their change is applied.
func MarkRevision(b Revisioner, w http.ResponseWriter) {
	if rev := b.Rev(); rev > 0 {
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
	resp, err := rl.send(ctx, r, body, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rl.answer(w, r, resp)
	return nil
}

// send sends r's method and request URI, with body, the headers rl names,
// set and query (added to the URI's own) to the other replica.
func (rl Relay) send(ctx context.Context, r *http.Request, body []byte, set map[string]string, query url.Values) (*http.Response, error) {
	var reqBody io.Reader
	if len(body) > 0 {
		reqBody = bytes.NewReader(body)
	}
	uri := r.URL.RequestURI()
	if len(query) > 0 {
		u := *r.URL
		q := u.Query()
		for k, vs := range query {
			q[k] = vs
		}
		u.RawQuery = q.Encode()
		uri = u.RequestURI()
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, strings.TrimRight(rl.To, "/")+uri, reqBody)
	if err != nil {
		return nil, err
	}
	for _, h := range rl.Headers {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	for k, v := range set {
		req.Header.Set(k, v)
	}
	if rl.Token != "" {
		req.Header.Set("Authorization", "Bearer "+rl.Token)
	}
	req.Header.Set(ForwardedHeader, rl.From)
	client := rl.Client
	if client == nil {
		client = http.DefaultClient
	}
	return client.Do(req)
}

// answer copies the other replica's answer to w, once this replica has
// applied a successful write (AwaitRev).
func (rl Relay) answer(w http.ResponseWriter, r *http.Request, resp *http.Response) {
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
}
