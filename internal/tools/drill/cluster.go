package drill

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/client"
)

// The drill decodes the cluster endpoints into the client's types but sends
// its own requests: it must address one replica at a time, and the typed
// client fails over between servers, which is right for everything else but
// wrong for "ask n2 whether it leads".

type apiClient struct {
	hc    *http.Client
	token string
}

func newAPIClient(token string, tc *tls.Config) *apiClient {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	t.DialContext = (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConnsPerHost = 8
	return &apiClient{hc: &http.Client{Transport: t}, token: token}
}

func (a *apiClient) close() { a.hc.CloseIdleConnections() }

// get fetches base+path into out within timeout.
func (a *apiClient) get(ctx context.Context, base, path string, timeout time.Duration, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "orion-drill")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s%s: %s: %s", base, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(out)
}

func (a *apiClient) cluster(ctx context.Context, base string) (*client.Cluster, error) {
	var v client.Cluster
	if err := a.get(ctx, base, "/api/v1/cluster", 4*time.Second, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// self asks one replica about itself (GET /api/v1/cluster/self; Reachable
// stays false there).
func (a *apiClient) self(ctx context.Context, base string, timeout time.Duration) (*client.Replica, error) {
	var v client.Replica
	if err := a.get(ctx, base, "/api/v1/cluster/self", timeout, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// standbys are the reachable replicas other than name that can take over.
func standbys(cl *client.Cluster, name string) []client.Replica {
	var out []client.Replica
	for _, r := range cl.Replicas {
		if r.Name != name && r.Reachable && r.Role == "standby" && r.APIURL != "" {
			out = append(out, r)
		}
	}
	return out
}
