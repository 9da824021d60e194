package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// The drill reads the cluster endpoints with its own small types: it needs
// pid, api_url, leader_since and first_commit_at, and must address one
// replica at a time (the typed client fails over between servers, which is
// right for everything else but wrong for "ask n2 whether it leads").

type clusterView struct {
	Node      string        `json:"node"`
	Leader    string        `json:"leader"`
	LeaderURL string        `json:"leader_url"`
	Replicas  []replicaView `json:"replicas"`
}

type replicaView struct {
	Name          string     `json:"name"`
	Role          string     `json:"role"`
	APIURL        string     `json:"api_url"`
	LeaderSince   *time.Time `json:"leader_since"`
	FirstCommitAt *time.Time `json:"first_commit_at"`
	PID           int        `json:"pid"`
	Reachable     bool       `json:"reachable"`
}

// selfView answers GET /api/v1/cluster/self.
type selfView struct {
	Name          string     `json:"name"`
	Role          string     `json:"role"`
	APIURL        string     `json:"api_url"`
	LeaderSince   *time.Time `json:"leader_since"`
	FirstCommitAt *time.Time `json:"first_commit_at"`
	PID           int        `json:"pid"`
}

type apiClient struct {
	hc    *http.Client
	token string
}

func newAPIClient(token string) *apiClient {
	t := http.DefaultTransport.(*http.Transport).Clone()
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

func (a *apiClient) cluster(ctx context.Context, base string) (*clusterView, error) {
	var v clusterView
	if err := a.get(ctx, base, "/api/v1/cluster", 4*time.Second, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func (a *apiClient) self(ctx context.Context, base string, timeout time.Duration) (*selfView, error) {
	var v selfView
	if err := a.get(ctx, base, "/api/v1/cluster/self", timeout, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func (v *clusterView) replica(name string) (replicaView, bool) {
	for _, r := range v.Replicas {
		if r.Name == name {
			return r, true
		}
	}
	return replicaView{}, false
}

// standbys are the reachable replicas other than name that can take over.
func (v *clusterView) standbys(name string) []replicaView {
	var out []replicaView
	for _, r := range v.Replicas {
		if r.Name != name && r.Reachable && r.Role == "standby" && r.APIURL != "" {
			out = append(out, r)
		}
	}
	return out
}
