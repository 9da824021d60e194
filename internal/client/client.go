// Package client is a typed Go client for Orion's HTTP API (/api/v1).
//
// A Client holds one or more base URLs. A request goes to the server that
// last answered; when that one cannot be reached the next URL is tried at
// once, so a client given every node of a cluster keeps working while one is
// down. Calls that are safe to repeat (GETs, and a submission that carries a
// DAG id) are also retried with backoff on 503 and 429, honouring
// Retry-After, and on connection errors, within the bounds of Client.Retries
// and the caller's context. A request that never reached a server (the
// connection was refused) is retried whatever the method, since nothing can
// have happened.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/http/apitypes"
)

// RetryPolicy bounds the retries of one call.
type RetryPolicy struct {
	MaxAttempts int           // tries in all, the first included; 1 disables retries
	MaxElapsed  time.Duration // no retry starts after this much time in the call
	BaseDelay   time.Duration // first backoff; doubles per retry, with jitter
	MaxDelay    time.Duration // backoff cap (a longer Retry-After is still honoured)
}

// DefaultRetry is the policy New installs.
var DefaultRetry = RetryPolicy{MaxAttempts: 10, MaxElapsed: 15 * time.Second, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second}

// Client talks to an Orion server. Its exported fields may be changed before
// first use; it is safe for concurrent use afterwards.
type Client struct {
	HTTPClient *http.Client
	Retries    RetryPolicy
	UserAgent  string

	bases     []string
	token     string
	preferred atomic.Int64 // index into bases of the server that last answered
}

// New returns a client for the given base URLs (such as
// "http://127.0.0.1:8080"; a URL without a scheme gets http://). token, if
// not empty, is sent as a bearer token.
func New(baseURLs []string, token string) *Client {
	c := &Client{
		HTTPClient: &http.Client{Transport: newTransport()},
		Retries:    DefaultRetry,
		UserAgent:  "orion-client",
		token:      token,
	}
	for _, u := range baseURLs {
		if u = NormalizeURL(u); u != "" {
			c.bases = append(c.bases, u)
		}
	}
	return c
}

// NormalizeURL trims u, adds http:// when it has no scheme and drops
// trailing slashes: "host:port" and "http://host:port/" both become
// "http://host:port"; https, ws and wss URLs keep their scheme. It returns
// "" for an empty string. It is Orion's one normalizer of server URLs: the
// client, the commands and the worker stream's dialer all use it.
func NormalizeURL(u string) string {
	u = strings.TrimSpace(u)
	if u == "" {
		return ""
	}
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return strings.TrimRight(u, "/")
}

// BaseURLs returns the servers the client uses, in order.
func (c *Client) BaseURLs() []string { return append([]string(nil), c.bases...) }

// SetTLS makes the client verify https:// servers with cfg (its CAs, and
// the certificate it presents to a server that asks for one).
func (c *Client) SetTLS(cfg *tls.Config) {
	if t, ok := c.HTTPClient.Transport.(*http.Transport); ok {
		t.TLSClientConfig = cfg
	}
}

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// A dead node must not stall a call: fail over quickly. There is no
	// overall timeout because logs stream; callers bound calls with ctx.
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = 30 * time.Second
	return t
}

// APIError is an error response from the server.
type APIError struct {
	Status     int           // HTTP status code
	Code       apitypes.Code // machine-readable code, such as apitypes.CodeNotFound; "" if the body was not the API's
	Message    string        // human-readable message
	Details    []string      // one line per problem, if the server listed them
	RetryAfter time.Duration // from the Retry-After header, 0 if absent
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	if e.Code != "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
	}
	return fmt.Sprintf("server returned %d %s", e.Status, http.StatusText(e.Status))
}

// ConnError is a failure to get any response from a server.
type ConnError struct {
	URL string // the base URL tried last
	Err error
}

func (e *ConnError) Error() string { return fmt.Sprintf("cannot reach %s: %v", e.URL, e.Err) }
func (e *ConnError) Unwrap() error { return e.Err }

// IsNotFound reports whether err is a 404 from the server.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// IsTemporary reports whether err is likely to go away by itself: a
// connection failure, or a 429, 502, 503 or 504 response. Pollers use it to
// ride out a leader change.
func IsTemporary(err error) bool {
	var ce *ConnError
	if errors.As(err, &ce) {
		return true
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

type request struct {
	method      string
	path        string // starting with /, query included
	body        []byte
	contentType string
	accept      string
	idempotent  bool
}

// do sends r, failing over and retrying as the package comment says. A
// response is returned only for a status below 400; the caller closes it.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	n := len(c.bases)
	if n == 0 {
		return nil, errors.New("no server URL configured")
	}
	p := c.Retries
	if p.MaxAttempts < 1 {
		p.MaxAttempts = 1
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultRetry.BaseDelay
	}
	if p.MaxDelay < p.BaseDelay {
		p.MaxDelay = p.BaseDelay
	}
	start := time.Now()
	idx := int(c.preferred.Load()) % n
	delay := p.BaseDelay
	failedInRound, tlsFailures := 0, 0
	var lastErr error
	for attempt := 1; ; attempt++ {
		base := c.bases[idx]
		resp, err := c.send(ctx, base, r)
		var retryAfter time.Duration
		failOverNow := false
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctxError(ctx, lastErr)
			}
			lastErr = &ConnError{URL: base, Err: err}
			if IsTLSError(err) {
				// A certificate that does not verify (or none where one is
				// required) fails the same way on every attempt: the
				// other servers are tried once each, then it is said.
				if tlsFailures++; tlsFailures >= n {
					return nil, lastErr
				}
				idx = (idx + 1) % n
				continue
			}
			// A refused connection never delivered the request, so even a
			// non-idempotent call may go elsewhere.
			if !r.idempotent && !isDialError(err) {
				return nil, lastErr
			}
			failOverNow = true
		case resp.StatusCode >= 400:
			ae := readAPIError(resp)
			lastErr = ae
			if !r.idempotent || (ae.Status != http.StatusServiceUnavailable && ae.Status != http.StatusTooManyRequests) {
				return nil, ae
			}
			retryAfter = ae.RetryAfter
		default:
			c.preferred.Store(int64(idx))
			return resp, nil
		}

		if attempt >= p.MaxAttempts {
			return nil, lastErr
		}
		idx = (idx + 1) % n
		failedInRound++
		if failOverNow && failedInRound < n {
			continue // another server may be up: try it without waiting
		}
		failedInRound = 0
		wait := delay/2 + rand.N(delay/2+1)
		delay = min(2*delay, p.MaxDelay)
		if retryAfter > wait {
			wait = retryAfter
		}
		if p.MaxElapsed > 0 && time.Since(start)+wait > p.MaxElapsed {
			return nil, lastErr
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctxError(ctx, lastErr)
		case <-t.C:
		}
	}
}

// IsTLSError reports whether err is a TLS handshake's refusal: a
// certificate that does not verify, one the server requires and did not
// get, or TLS spoken to a plain HTTP server. Retrying changes none of them.
func IsTLSError(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		record   tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
	)
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &record) ||
		errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname)
}

func ctxError(ctx context.Context, last error) error {
	if last != nil {
		return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
	}
	return ctx.Err()
}

func (c *Client) send(ctx context.Context, base string, r request) (*http.Response, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, body)
	if err != nil {
		return nil, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", r.contentType)
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

func readAPIError(resp *http.Response) *APIError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &APIError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var env struct {
		Error *apitypes.ErrorInfo `json:"error"` // apitypes.ErrorBody, nil when absent
	}
	if json.Unmarshal(b, &env) == nil && env.Error != nil {
		ae.Code, ae.Message, ae.Details = env.Error.Code, env.Error.Message, env.Error.Details
		return ae
	}
	// Not our envelope: a proxy's page, or plain text. Keep a readable start.
	text := strings.TrimSpace(string(b))
	if i := strings.IndexByte(text, '\n'); i >= 0 {
		text = strings.TrimSpace(text[:i])
	}
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	if text != "" && !strings.HasPrefix(text, "<") {
		ae.Message = fmt.Sprintf("server returned %d %s: %s", resp.StatusCode, http.StatusText(resp.StatusCode), text)
	}
	return ae
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(min(secs, 3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), time.Hour)
	}
	return 0
}

func (c *Client) getJSON(ctx context.Context, path string, out any) error {
	return c.doJSON(ctx, request{method: http.MethodGet, path: path, idempotent: true}, out)
}

func (c *Client) doJSON(ctx context.Context, r request, out any) error {
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding response: %w", r.method, r.path, err)
	}
	return nil
}

func dagPath(id string) string { return "/api/v1/dags/" + url.PathEscape(id) }

func taskPath(dagID, taskID string) string {
	return dagPath(dagID) + "/tasks/" + url.PathEscape(taskID)
}

func need(what, v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("%s is required", what)
	}
	return nil
}

// Submit posts a DAG definition. contentType is "application/json" or
// "application/yaml" (empty lets the server sniff). The call is retried
// only when the body carries a DAG id, which makes a repeat harmless: the
// server answers Created=false for the same id and content.
//
// params are parameter overrides, each name=value (orion submit -p): the
// server sets them on the DAG's declared params (?param=).
func (c *Client) Submit(ctx context.Context, body []byte, contentType string, params ...string) (SubmitResponse, error) {
	var out SubmitResponse
	path := "/api/v1/dags"
	if len(params) > 0 {
		q := url.Values{"param": params}
		path += "?" + q.Encode()
	}
	r := request{method: http.MethodPost, path: path, body: body, contentType: contentType,
		idempotent: hasID(body, contentType)}
	if r.contentType == "" {
		r.contentType = "application/octet-stream"
	}
	err := c.doJSON(ctx, r, &out)
	return out, err
}

// hasID reports whether a DAG body names its id.
func hasID(body []byte, contentType string) bool {
	d, err := dag.Parse(body, contentType)
	return err == nil && d.ID != ""
}

// ListDAGs lists DAGs, newest first. status filters by DAG status and limit
// bounds the count; zero values mean no filter and the server's default.
func (c *Client) ListDAGs(ctx context.Context, status string, limit int) (*DAGList, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/api/v1/dags"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out DAGList
	if err := c.getJSON(ctx, path, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetDAG returns a DAG with its tasks: every one for a DAG of up to
// apitypes.MaxViewTasks tasks, the first ones of a bigger one (see
// GetDAGHead, ListTasks).
func (c *Client) GetDAG(ctx context.Context, id string) (*DAG, error) {
	if err := need("dag id", id); err != nil {
		return nil, err
	}
	var out DAG
	if err := c.getJSON(ctx, dagPath(id), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetDAGHead returns a DAG with at most taskLimit of its tasks (the
// server's bound, apitypes.MaxViewTasks, when taskLimit is below 0 or
// above it). A DAG with more says TasksTruncated and gives its Shape.
func (c *Client) GetDAGHead(ctx context.Context, id string, taskLimit int) (*DAG, error) {
	if err := need("dag id", id); err != nil {
		return nil, err
	}
	path := dagPath(id)
	if taskLimit >= 0 {
		path += "?task_limit=" + strconv.Itoa(taskLimit)
	}
	var out DAG
	if err := c.getJSON(ctx, path, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TaskQuery selects a page of a DAG's tasks (ListTasks).
type TaskQuery struct {
	Statuses []string // only these statuses; none: every one
	Group    string   // a map group's id, or a shape node's
	Limit    int      // 0: the server's default page
	Cursor   string   // the Next of the page before
}

// ListTasks returns a page of a DAG's tasks. A page may hold fewer than
// its limit, even none, and have a Next: the walk ends when Next is "".
func (c *Client) ListTasks(ctx context.Context, dagID string, q TaskQuery) (*TaskPage, error) {
	if err := need("dag id", dagID); err != nil {
		return nil, err
	}
	v := url.Values{}
	if len(q.Statuses) > 0 {
		v.Set("status", strings.Join(q.Statuses, ","))
	}
	if q.Group != "" {
		v.Set("group", q.Group)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	path := dagPath(dagID) + "/tasks"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out TaskPage
	if err := c.getJSON(ctx, path, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EachTask calls fn with every task q selects (q.Cursor onwards), a page
// at a time, until fn returns false or the walk ends.
func (c *Client) EachTask(ctx context.Context, dagID string, q TaskQuery, fn func(*Task) bool) error {
	for {
		p, err := c.ListTasks(ctx, dagID, q)
		if err != nil {
			return err
		}
		for i := range p.Tasks {
			if !fn(&p.Tasks[i]) {
				return nil
			}
		}
		if p.Next == "" {
			return nil
		}
		q.Cursor = p.Next
	}
}

// GetTask returns one task of a DAG.
func (c *Client) GetTask(ctx context.Context, dagID, taskID string) (*Task, error) {
	if err := errors.Join(need("dag id", dagID), need("task id", taskID)); err != nil {
		return nil, err
	}
	var out Task
	if err := c.getJSON(ctx, taskPath(dagID, taskID), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Instances returns a page of a map group's instances, from offset, at
// most limit (0: the server's default page).
func (c *Client) Instances(ctx context.Context, dagID, taskID string, offset, limit int) (*InstanceList, error) {
	if err := errors.Join(need("dag id", dagID), need("task id", taskID)); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("offset", strconv.Itoa(offset))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out InstanceList
	if err := c.getJSON(ctx, taskPath(dagID, taskID)+"/instances?"+q.Encode(), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TaskLog copies a task's log to w. attempt 0 means the latest attempt.
// Retries happen only until the log starts streaming.
func (c *Client) TaskLog(ctx context.Context, dagID, taskID string, attempt int, w io.Writer) error {
	if err := errors.Join(need("dag id", dagID), need("task id", taskID)); err != nil {
		return err
	}
	path := taskPath(dagID, taskID) + "/log"
	if attempt > 0 {
		path += "?attempt=" + strconv.Itoa(attempt)
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: path, accept: "text/plain", idempotent: true})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("reading log: %w", err)
	}
	return nil
}

// Cancel cancels a DAG: tasks not yet finished end as cancelled.
func (c *Client) Cancel(ctx context.Context, id string) (ActionResponse, error) {
	return c.action(ctx, id, "cancel")
}

// Retry starts a new run of a failed or cancelled DAG: tasks that did not
// succeed run again.
func (c *Client) Retry(ctx context.Context, id string) (ActionResponse, error) {
	return c.action(ctx, id, "retry")
}

// Delete deletes a finished DAG with all its tasks. A running DAG must be
// cancelled first.
func (c *Client) Delete(ctx context.Context, id string) (ActionResponse, error) {
	var out ActionResponse
	if err := need("dag id", id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{method: http.MethodDelete, path: dagPath(id)}, &out)
	return out, err
}

func (c *Client) action(ctx context.Context, id, verb string) (ActionResponse, error) {
	var out ActionResponse
	if err := need("dag id", id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{method: http.MethodPost, path: dagPath(id) + "/" + verb}, &out)
	return out, err
}

// Cluster describes the scheduler nodes, workers and etcd.
func (c *Client) Cluster(ctx context.Context) (*Cluster, error) {
	var out Cluster
	if err := c.getJSON(ctx, "/api/v1/cluster", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Leader names the leader and lists the replicas, as the replica asked has
// them in memory: the cheap question (no etcd read, no fan-out) to ask when
// only the leader's address matters.
func (c *Client) Leader(ctx context.Context) (*Leader, error) {
	var out Leader
	if err := c.getJSON(ctx, "/api/v1/leader", &out); err != nil {
		return nil, err
	}
	return &out, nil
}
