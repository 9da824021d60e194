// Package auth says who a request comes from and what it may do.
//
// Orion has one cluster token (auth_token): the replicas' own credential,
// which they forward writes and relay requests with, and which may do
// anything. Besides it, a tokens file (auth_tokens_file) gives people,
// programs and workers tokens of their own, each with one role:
//
//   - viewer: reads, event streams, logs, metrics;
//   - operator: a viewer that also submits, cancels and retries DAGs and
//     triggers, pauses and resumes schedules;
//   - admin: an operator that also deletes DAGs, creates, changes and
//     deletes schedules, and uses the demo controls;
//   - worker: opens the worker stream, and nothing else, as a worker whose
//     id matches the token's worker_ids and whose labels are among the
//     token's labels.
//
// The file holds SHA-256 digests of the tokens, never the tokens, and is
// read again when it changes, so tokens are added, rotated and revoked
// without a restart.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/orion-sched/orion/internal/model"
)

// Role is what a token may do. Viewer < Operator < Admin; Worker stands
// apart.
type Role int

const (
	None Role = iota
	Viewer
	Operator
	Admin
	Worker
)

var roleNames = [...]string{None: "none", Viewer: "viewer", Operator: "operator", Admin: "admin", Worker: "worker"}

func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return fmt.Sprintf("role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, bool) {
	for r, n := range roleNames {
		if Role(r) != None && n == s {
			return Role(r), true
		}
	}
	return None, false
}

// Allows reports whether a holder of r may do what needs want.
func (r Role) Allows(want Role) bool {
	if want == Worker || r == Worker {
		return r == want
	}
	return r >= want
}

// Principal is who a request comes from.
type Principal struct {
	Name string
	Role Role
	// Cluster is the cluster token's holder (a replica, or whoever was
	// given it): any role, any worker id.
	Cluster bool
	// WorkerIDs (patterns of worker names, path.Match syntax) and Labels
	// bound what a worker token's holder may claim at its hello.
	WorkerIDs []string
	Labels    model.Labels

	digest [sha256.Size]byte // its token's: Keyring.Still looks it up again
}

// Anonymous is the principal of a server without authentication: loopback
// only (config refuses a network bind without a token), where every local
// process may do everything.
var Anonymous = Principal{Name: "anonymous", Role: Admin, Cluster: true}

// MayBeWorker says why p may not say hello as worker id with labels, or ""
// when it may.
func (p Principal) MayBeWorker(id string, labels model.Labels) string {
	if p.Cluster {
		return ""
	}
	if p.Role != Worker {
		return fmt.Sprintf("token %q has role %s: the worker stream needs a worker token (auth_tokens_file) or the cluster token", p.Name, p.Role)
	}
	// A worker's id is its --name, then what makes each process its own
	// ("gpu-1/4242-9f3a1c"); the token names the former.
	name, _, _ := strings.Cut(id, "/")
	matched := false
	for _, pat := range p.WorkerIDs {
		if ok, _ := path.Match(pat, name); ok {
			matched = true
			break
		}
	}
	if !matched {
		return fmt.Sprintf("worker token %q may not run a worker named %q: its worker_ids are %s", p.Name, name, strings.Join(p.WorkerIDs, ", "))
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := p.Labels[k]; !ok || v != labels[k] {
			return fmt.Sprintf("worker token %q may not claim label %s=%s: it grants %s", p.Name, k, labels[k], p.Labels)
		}
	}
	return ""
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// From returns the principal the middleware put in ctx; Anonymous when it
// put none (a server without authentication, or an in-process caller).
func From(ctx context.Context) Principal {
	if p, ok := ctx.Value(principalKey{}).(Principal); ok {
		return p
	}
	return Anonymous
}

// Keyring maps token digests to principals. Its tokens are replaced whole
// (Set), by the file watcher, while requests read it.
type Keyring struct {
	cluster [sha256.Size]byte
	hasCl   bool
	tokens  atomic.Pointer[map[[sha256.Size]byte]Principal]
	loaded  atomic.Value // [sha256.Size]byte: the digest of the file content loaded

	mu      sync.Mutex
	changed []func() // OnChange's
}

// OnChange has fn called after every Set: the holders of long-lived
// streams then drop those whose principal is no longer Still.
func (k *Keyring) OnChange(fn func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.changed = append(k.changed, fn)
}

// Still reports whether p is still what its token gives: a stream opened
// with a token since revoked, or narrowed (another role, other worker ids
// or labels), is not.
func (k *Keyring) Still(p Principal) bool {
	if p.Cluster {
		return true // the cluster token changes only with a restart
	}
	q, ok := (*k.tokens.Load())[p.digest]
	return ok && q.Name == p.Name && q.Role == p.Role && slices.Equal(q.WorkerIDs, p.WorkerIDs) && maps.Equal(q.Labels, p.Labels)
}

// NewKeyring returns a keyring with the cluster token (empty: none).
func NewKeyring(clusterToken string) *Keyring {
	k := &Keyring{}
	if clusterToken != "" {
		k.cluster, k.hasCl = sha256.Sum256([]byte(clusterToken)), true
	}
	empty := map[[sha256.Size]byte]Principal{}
	k.tokens.Store(&empty)
	return k
}

// Enabled reports whether requests must authenticate.
func (k *Keyring) Enabled() bool { return k.hasCl || len(*k.tokens.Load()) > 0 }

// Set replaces the file's tokens.
func (k *Keyring) Set(tokens []Token) {
	m := make(map[[sha256.Size]byte]Principal, len(tokens))
	for _, t := range tokens {
		m[t.digest] = Principal{Name: t.Name, Role: t.role, WorkerIDs: t.WorkerIDs, Labels: t.Labels, digest: t.digest}
	}
	k.tokens.Store(&m)
	k.mu.Lock()
	fns := slices.Clone(k.changed)
	k.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Count is how many tokens the file gave.
func (k *Keyring) Count() int { return len(*k.tokens.Load()) }

// Authenticate finds the principal of r's bearer token. A map keyed by the
// token's digest: what a lookup's timing could tell is about the digest of
// the caller's own guess, which reveals nothing of any token.
func (k *Keyring) Authenticate(r *http.Request) (Principal, bool) {
	tok, ok := Bearer(r)
	if !ok {
		return Principal{}, false
	}
	sum := sha256.Sum256([]byte(tok))
	if k.hasCl && subtle.ConstantTimeCompare(sum[:], k.cluster[:]) == 1 {
		return Principal{Name: "cluster", Role: Admin, Cluster: true}, true
	}
	p, ok := (*k.tokens.Load())[sum]
	return p, ok
}

// Bearer returns the token of r's "Authorization: Bearer <token>".
func Bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Digest is the hex SHA-256 of a token, as the tokens file holds it.
func Digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
