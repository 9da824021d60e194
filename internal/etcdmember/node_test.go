package etcdmember

import (
	"encoding/json"
	"net/http"
	"testing"
)

// A member says on its client URL which node it runs on, beside serving
// etcd's gRPC API there: the given node, or the host name.
func TestMemberSaysItsNode(t *testing.T) {
	t.Parallel()
	for _, node := range []string{"node-b", ""} {
		name := map[string]string{"node-b": "given", "": "hostname"}[node]
		cfg := testConfig(t, name)
		cfg.Node = node
		m := startMember(t, cfg)
		resp, err := http.Get(m.ClientURL() + NodePath)
		if err != nil {
			t.Fatal(err)
		}
		var got NodeInfo
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		want := NodeInfo{Member: cfg.Name, Node: node}
		if node == "" {
			want.Node = DefaultNode()
		}
		if err != nil || resp.StatusCode != 200 || got != want || want.Node == "" {
			t.Errorf("GET %s: %d %+v %v, want %+v", NodePath, resp.StatusCode, got, err, want)
		}
		// etcd's API still answers there.
		if _, err := newClient(t, m.ClientURL()).Put(ctxT(t), "/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
}
