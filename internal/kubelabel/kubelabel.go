// Package kubelabel keeps a label on this replica's own pod that says
// whether it leads ("leader") or not ("standby"), so that a Kubernetes
// Service selecting <label>=leader (the chart's -active Service) reaches the
// leader. It speaks to the Kubernetes API directly with the pod's service
// account (one JSON merge patch per change): no client library is needed
// for one request.
package kubelabel

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Service-account files mounted into every pod that has a token.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Labeler patches pods' labels. Create it with FromEnv (in a pod) or New.
type Labeler struct {
	key       string
	namespace string
	self      string
	apiBase   string
	token     func() (string, error)
	client    *http.Client
	log       *zap.Logger
	onError   func()

	mu   sync.Mutex
	want map[string]string // pod → value still to write
	wake chan struct{}
}

// FromEnv configures a Labeler for the pod it runs in: POD_NAME and
// POD_NAMESPACE (the downward API), the API server from
// KUBERNETES_SERVICE_HOST/PORT, and the mounted service-account token and CA.
func FromEnv(key string, log *zap.Logger, onError func()) (*Labeler, error) {
	pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if pod == "" || ns == "" || host == "" || port == "" {
		return nil, errors.New("kube_leader_label needs POD_NAME, POD_NAMESPACE and an in-cluster API (KUBERNETES_SERVICE_HOST/PORT)")
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("kube_leader_label: service-account CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("kube_leader_label: no certificate in the service-account CA")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	token := func() (string, error) { // re-read: projected tokens rotate
		b, err := os.ReadFile(saDir + "/token")
		return strings.TrimSpace(string(b)), err
	}
	return New(key, ns, pod, "https://"+net.JoinHostPort(host, port), token, client, log, onError), nil
}

// New returns a Labeler for pod self in namespace ns on the API at apiBase.
func New(key, ns, self, apiBase string, token func() (string, error), client *http.Client, log *zap.Logger, onError func()) *Labeler {
	if log == nil {
		log = zap.NewNop()
	}
	if onError == nil {
		onError = func() {}
	}
	return &Labeler{key: key, namespace: ns, self: self, apiBase: strings.TrimRight(apiBase, "/"), token: token,
		client: client, log: log, onError: onError, want: map[string]string{}, wake: make(chan struct{}, 1)}
}

// Self is this pod's name.
func (l *Labeler) Self() string { return l.self }

// Leading records this replica's role; previous, when set, is the pod that
// led before (it may be frozen or gone): it is marked standby so the
// -active Service never keeps two pods. Non-blocking; Run writes it.
func (l *Labeler) Leading(leading bool, previous string) {
	l.mu.Lock()
	if leading {
		l.want[l.self] = "leader"
		if previous != "" && previous != l.self {
			l.want[previous] = "standby"
		}
	} else {
		l.want[l.self] = "standby"
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run writes the wanted labels until ctx ends, retrying failures with a
// backoff; the latest wish for a pod wins. This pod's own label is written
// first: a new leader is selected by the -active Service one API round trip
// after it takes over, and the previous leader is relabelled after that.
func (l *Labeler) Run(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for {
		l.mu.Lock()
		todo := l.want
		l.want = map[string]string{}
		l.mu.Unlock()
		pods := slices.Sorted(maps.Keys(todo))
		if i := slices.Index(pods, l.self); i > 0 {
			pods = slices.Insert(slices.Delete(pods, i, i+1), 0, l.self)
		}
		failed := false
		for _, pod := range pods {
			value := todo[pod]
			if err := l.patch(ctx, pod, value); err != nil {
				failed = true
				l.onError()
				l.log.Warn("labelling pod failed; will retry", zap.String("pod", pod), zap.String("value", value), zap.Error(err))
				l.mu.Lock()
				if _, newer := l.want[pod]; !newer {
					l.want[pod] = value
				}
				l.mu.Unlock()
			}
		}
		wait := time.Duration(1<<62 - 1)
		if failed {
			wait, backoff = backoff, min(backoff*2, 10*time.Second)
		} else {
			backoff = 200 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-time.After(wait):
		}
	}
}

func (l *Labeler) patch(ctx context.Context, pod, value string) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{l.key: value}}})
	url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s", l.apiBase, l.namespace, pod)
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	if l.token != nil {
		tok, err := l.token()
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusNotFound && pod != l.self:
		return nil // the previous leader's pod is gone: nothing to relabel
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("PATCH %s: %s: %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}
	l.log.Info("pod labelled", zap.String("pod", pod), zap.String(l.key, value))
	return nil
}
