// Package kube is Orion's client of the Kubernetes API: the few calls a
// worker makes on the pods of pod tasks (create, get, list, watch, read the
// log, delete), on the pod's service account.
//
// It speaks the REST API directly with the Kubernetes API types
// (k8s.io/api) rather than through client-go: client-go's typed core client
// registers every API group's types, which made the orion binary 23 MB
// (80%) larger, for six calls. The same reasoning kept internal/kubelabel,
// which patches one label, without it.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Service-account files mounted into every pod that has a token.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// requestTimeout bounds a request that is not a stream (watch, log).
const requestTimeout = 30 * time.Second

// Client calls the pods API of one namespace.
type Client struct {
	base      string
	namespace string
	token     func() (string, error)
	http      *http.Client // requests, each bounded by requestTimeout
	stream    *http.Client // watches and logs, bounded by their context
}

// InCluster returns a client on the API server of the cluster this process
// runs in, with its pod's service account, for namespace ns (empty: the
// pod's own namespace).
func InCluster(ns string) (*Client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("no in-cluster Kubernetes API (KUBERNETES_SERVICE_HOST/PORT are not set): pod tasks need the worker to run in a pod")
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("service-account CA: %w (does the worker's pod mount its service account token?)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in the service-account CA")
	}
	if ns == "" {
		b, err := os.ReadFile(saDir + "/namespace")
		if err != nil {
			return nil, fmt.Errorf("the pod's namespace: %w", err)
		}
		ns = strings.TrimSpace(string(b))
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true, // one connection carries every watch and log of the worker
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 16,
	}
	return New("https://"+net.JoinHostPort(host, port), ns, fileToken(saDir+"/token"), tr), nil
}

// fileToken reads a projected token, which the kubelet rotates, again
// after a minute.
func fileToken(path string) func() (string, error) {
	var mu sync.Mutex
	var tok string
	var at time.Time
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if tok != "" && time.Since(at) < time.Minute {
			return tok, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("service-account token: %w", err)
		}
		tok, at = strings.TrimSpace(string(b)), time.Now()
		return tok, nil
	}
}

// New returns a client of the API at base (https://host:port) for namespace
// ns. token, when set, gives the bearer token of each request.
func New(base, ns string, token func() (string, error), tr http.RoundTripper) *Client {
	if tr == nil {
		tr = http.DefaultTransport
	}
	return &Client{base: strings.TrimRight(base, "/"), namespace: ns, token: token,
		http: &http.Client{Transport: tr, Timeout: requestTimeout}, stream: &http.Client{Transport: tr}}
}

// Namespace is the namespace the client works in.
func (c *Client) Namespace() string { return c.namespace }

// StatusError is an error the API server answered with (a metav1.Status).
type StatusError struct {
	Code    int
	Reason  metav1.StatusReason
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("Kubernetes API: %d %s", e.Code, e.Reason)
	}
	return e.Message
}

func reasonOf(err error) (int, metav1.StatusReason) {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code, se.Reason
	}
	return 0, ""
}

// IsNotFound reports a 404.
func IsNotFound(err error) bool { code, _ := reasonOf(err); return code == http.StatusNotFound }

// IsAlreadyExists reports a create refused because the name is taken.
func IsAlreadyExists(err error) bool {
	_, r := reasonOf(err)
	return r == metav1.StatusReasonAlreadyExists
}

// IsGone reports a watch whose resource version is too old (410).
func IsGone(err error) bool {
	code, r := reasonOf(err)
	return code == http.StatusGone || r == metav1.StatusReasonExpired || r == metav1.StatusReasonGone
}

// Temporary reports an error that the same request may not meet again: a
// connection error, a timeout, 429 or a 5xx. Anything else the API server
// refused for what was asked (403, 404, 422...) and would refuse again.
func Temporary(err error) bool {
	if err == nil {
		return false
	}
	code, _ := reasonOf(err)
	switch {
	case code == 0:
		return !errors.Is(err, context.Canceled)
	case code == http.StatusTooManyRequests || code >= 500 || code == http.StatusConflict && !IsAlreadyExists(err):
		return true
	}
	return false
}

func (c *Client) podsURL(name, sub string, q url.Values) string {
	u := c.base + "/api/v1/namespaces/" + url.PathEscape(c.namespace) + "/pods"
	if name != "" {
		u += "/" + url.PathEscape(name)
	}
	if sub != "" {
		u += "/" + sub
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *Client) do(ctx context.Context, hc *http.Client, method, u string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != nil {
		tok, err := c.token()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, statusError(resp)
	}
	return resp, nil
}

// statusError reads the metav1.Status of a failed request.
func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Kind == "Status" {
		code := int(st.Code)
		if code == 0 {
			code = resp.StatusCode
		}
		return &StatusError{Code: code, Reason: st.Reason, Message: st.Message}
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return &StatusError{Code: resp.StatusCode, Message: fmt.Sprintf("Kubernetes API: %s: %s", resp.Status, msg)}
}

func (c *Client) call(ctx context.Context, method, u string, body, out any) error {
	resp, err := c.do(ctx, c.http, method, u, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// CreatePod creates pod in the client's namespace.
func (c *Client) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var out corev1.Pod
	if err := c.call(ctx, http.MethodPost, c.podsURL("", "", nil), pod, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPod reads a pod.
func (c *Client) GetPod(ctx context.Context, name string) (*corev1.Pod, error) {
	var out corev1.Pod
	if err := c.call(ctx, http.MethodGet, c.podsURL(name, "", nil), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListPods lists the pods a label selector selects.
func (c *Client) ListPods(ctx context.Context, selector string) (*corev1.PodList, error) {
	var out corev1.PodList
	if err := c.call(ctx, http.MethodGet, c.podsURL("", "", url.Values{"labelSelector": {selector}}), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePod deletes a pod, giving its containers grace seconds (nil: the
// pod's own terminationGracePeriodSeconds; 0: at once, forced). A pod that
// is already gone is no error.
func (c *Client) DeletePod(ctx context.Context, name string, grace *int64) error {
	q := url.Values{}
	if grace != nil {
		q.Set("gracePeriodSeconds", strconv.FormatInt(*grace, 10))
	}
	err := c.call(ctx, http.MethodDelete, c.podsURL(name, "", q), nil, nil)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// Event is one event of a watch.
type Event struct {
	Type string // ADDED, MODIFIED, DELETED (ERROR and BOOKMARK are not passed on)
	Pod  *corev1.Pod
}

// Watch is a watch of one pod.
type Watch struct {
	body io.ReadCloser
	dec  *json.Decoder
}

// WatchPod watches the pod named name from resourceVersion on; the server
// ends the watch after timeout (then watch again from the last version
// seen).
func (c *Client) WatchPod(ctx context.Context, name, resourceVersion string, timeout time.Duration) (*Watch, error) {
	q := url.Values{"watch": {"true"}, "fieldSelector": {"metadata.name=" + name},
		"timeoutSeconds": {strconv.Itoa(int(timeout / time.Second))}}
	if resourceVersion != "" {
		q.Set("resourceVersion", resourceVersion)
	}
	resp, err := c.do(ctx, c.stream, http.MethodGet, c.podsURL("", "", q), nil)
	if err != nil {
		return nil, err
	}
	return &Watch{body: resp.Body, dec: json.NewDecoder(resp.Body)}, nil
}

// Next returns the next event; io.EOF when the server ended the watch. A
// watch the server ended with an error (an expired resource version: a
// *StatusError with IsGone) returns that error.
func (w *Watch) Next() (Event, error) {
	for {
		var raw struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := w.dec.Decode(&raw); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			return Event{}, err
		}
		switch raw.Type {
		case "ADDED", "MODIFIED", "DELETED":
			var p corev1.Pod
			if err := json.Unmarshal(raw.Object, &p); err != nil {
				return Event{}, fmt.Errorf("watch: %w", err)
			}
			return Event{Type: raw.Type, Pod: &p}, nil
		case "ERROR":
			var st metav1.Status
			_ = json.Unmarshal(raw.Object, &st)
			return Event{}, &StatusError{Code: int(st.Code), Reason: st.Reason, Message: st.Message}
		}
	}
}

// Close ends the watch.
func (w *Watch) Close() error { return w.body.Close() }

// LogOptions says which part of a container's log to read.
type LogOptions struct {
	Container string
	Follow    bool       // stream it as it grows, until the container ends
	Since     *time.Time // only lines after this time
}

// Logs opens a container's log. Each line starts with its RFC 3339 time
// and a space (timestamps=true), so that a follower that reconnects can
// skip the lines it has.
func (c *Client) Logs(ctx context.Context, name string, o LogOptions) (io.ReadCloser, error) {
	q := url.Values{"timestamps": {"true"}}
	if o.Container != "" {
		q.Set("container", o.Container)
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	if o.Since != nil {
		q.Set("sinceTime", o.Since.UTC().Format(time.RFC3339Nano))
	}
	resp, err := c.do(ctx, c.stream, http.MethodGet, c.podsURL(name, "log", q), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
