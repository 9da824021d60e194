// Package leaderapart keeps etcd's raft leader off the node (machine) that
// runs Orion's leader.
//
// A node lost with both leaders on it costs etcd's election (250-500 ms at
// the default timings) on top of Orion's takeover, which cannot finish
// before etcd has a leader again: 250-550 ms where the loss of either alone
// costs tens of ms (docs: node loss). Nothing else keeps them apart: on
// Kubernetes, three nodes running three etcd members and three replicas
// put an etcd member beside every replica. So while a replica leads, a
// Keeper looks every few seconds for the member that leads etcd's raft
// group and, when it runs on the replica's own node, asks etcd to hand the
// leadership to a member on another node (MoveLeader). The handover takes
// milliseconds; the proposals etcd drops meanwhile are sent again by the
// store's Writer.
//
// Every `orion etcd` member says which node it runs on, at
// etcdmember.NodePath on its client URL. Nothing is moved when the members
// say nothing (an etcd that is not Orion's), when every member runs on the
// leader's node (one machine for everything), or when etcd refuses
// MoveLeader (with etcd auth on, only the root role may ask).
package leaderapart

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/store"
)

// Etcd is what a Keeper asks of etcd (*store.Etcd).
type Etcd interface {
	Endpoints() []string
	Status(ctx context.Context, endpoint string) (store.MemberStatus, error)
	Members(ctx context.Context) ([]store.Member, error)
	// DialMember connects to one member with the client's settings (TLS,
	// credentials): MoveLeader must be asked of the raft leader itself.
	DialMember(endpoint string) (*store.MemberConn, error)
}

var _ Etcd = (*store.Etcd)(nil)

// Config is what a Keeper needs.
type Config struct {
	// Etcd is the replica's store (every endpoint).
	Etcd Etcd
	// Node is the node this replica runs on; empty: the host name.
	Node string
	// HTTP reads the members' NodePath, with etcd's TLS when it has any.
	HTTP *http.Client
	// Every is the pause between two looks (default 2 s); the first comes
	// half a second after the replica begins to lead.
	Every  time.Duration
	Logger *zap.Logger
	// Moved, when set, is told the outcome of every MoveLeader asked:
	// "moved" or "failed".
	Moved func(outcome string)
}

// DefaultEvery is Config.Every's default.
const DefaultEvery = 2 * time.Second

const (
	// firstLook: after a takeover, once its first writes are done.
	firstLook = 500 * time.Millisecond
	// maxPause: a MoveLeader refused again and again (auth) is asked at
	// most this often.
	maxPause = time.Minute
	// lookTimeout bounds one look, MoveLeader included (etcd waits for
	// the transferee to catch up, within its election timeout).
	lookTimeout = 5 * time.Second
	// askTimeout bounds one question to one member.
	askTimeout = time.Second
	// moveTimeout bounds MoveLeader. A handover takes tens of ms; raft
	// gives up one the transferee did not take within an election timeout
	// (or that another request replaced), while etcd answers MoveLeader
	// only when its request timeout (5 s) ends: the next look asks again.
	moveTimeout = time.Second
)

// Outcome is what one look found and did.
type Outcome string

const (
	// Apart: etcd's leader runs on another node; nothing to do.
	Apart Outcome = "apart"
	// Moved: etcd's leader shared this node and was moved off it.
	Moved Outcome = "moved"
	// Unknown: etcd's leader does not say its node (not `orion etcd`).
	Unknown Outcome = "unknown"
	// Nowhere: etcd's leader shares this node and no member that says its
	// node runs elsewhere.
	Nowhere Outcome = "nowhere"
)

// Keeper runs the looks while its replica leads.
type Keeper struct {
	cfg Config
	log *zap.Logger

	mu   sync.Mutex
	stop context.CancelFunc
	wg   sync.WaitGroup
	said map[string]bool // what was logged already in this term
}

// New returns a Keeper that does nothing until Leading(true).
func New(cfg Config) *Keeper {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Node == "" {
		cfg.Node = etcdmember.DefaultNode()
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: askTimeout}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Keeper{cfg: cfg, log: cfg.Logger}
}

// Leading starts the looks (true) or stops them (false). It never blocks:
// the scheduling loop calls it.
func (k *Keeper) Leading(leading bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stop != nil {
		k.stop()
		k.stop = nil
	}
	if !leading {
		return
	}
	k.said = map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.run(ctx)
	}()
}

// Close stops the looks and waits for the one under way.
func (k *Keeper) Close() {
	k.Leading(false)
	k.wg.Wait()
}

func (k *Keeper) run(ctx context.Context) {
	t := time.NewTimer(firstLook)
	defer t.Stop()
	pause := k.cfg.Every
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := k.Look(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			pause = min(2*pause, maxPause)
		default:
			pause = k.cfg.Every
		}
		t.Reset(pause)
	}
}

// Look finds etcd's raft leader and, if it runs on this replica's node,
// moves etcd's leadership to a member on another node. An error is a look
// that could not finish or a MoveLeader that failed.
func (k *Keeper) Look(ctx context.Context) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, lookTimeout)
	defer cancel()
	lead, others, err := k.members(ctx)
	if err != nil {
		return "", err
	}
	node, err := k.nodeOf(ctx, lead)
	if err != nil {
		k.once("unknown "+lead.Name, "etcd's raft leader does not say which node it runs on (an etcd that is not `orion etcd`?): it is not kept off this replica's node",
			zap.String("member", lead.Name), zap.Error(err))
		return Unknown, nil
	}
	if node != k.cfg.Node {
		return Apart, nil
	}
	var to *store.Member
	var toNode string
	for i := range others {
		if n, err := k.nodeOf(ctx, &others[i]); err == nil && n != "" && n != k.cfg.Node {
			to, toNode = &others[i], n
			break
		}
	}
	if to == nil {
		k.once("nowhere "+lead.Name, "etcd's raft leader runs on this replica's node and no member runs on another: losing this node costs etcd's election on top of the takeover",
			zap.String("member", lead.Name), zap.String("node", node))
		return Nowhere, nil
	}
	began := time.Now()
	err = k.move(ctx, lead, to)
	if k.cfg.Moved != nil {
		k.cfg.Moved(map[bool]string{true: "moved", false: "failed"}[err == nil])
	}
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "permission denied") {
			hint = " (with etcd auth on, MoveLeader needs the root role)"
		}
		k.log.Warn("could not move etcd's raft leadership off this replica's node"+hint,
			zap.String("from", lead.Name), zap.String("to", to.Name), zap.String("node", node), zap.Error(err))
		return "", err
	}
	k.log.Info("moved etcd's raft leadership off this replica's node", zap.String("from", lead.Name), zap.String("to", to.Name),
		zap.String("node", node), zap.String("to_node", toNode), zap.Duration("took", time.Since(began)))
	return Moved, nil
}

// members returns the member that leads etcd's raft group and the other
// voting members that publish a client URL, by name.
func (k *Keeper) members(ctx context.Context) (*store.Member, []store.Member, error) {
	var leader uint64
	var last error
	for _, ep := range k.cfg.Etcd.Endpoints() {
		actx, cancel := context.WithTimeout(ctx, askTimeout)
		st, err := k.cfg.Etcd.Status(actx, ep)
		cancel()
		if err == nil && st.Leader != 0 {
			leader = st.Leader
			break
		}
		last = err
	}
	if leader == 0 {
		return nil, nil, fmt.Errorf("no member names etcd's leader: %v", last)
	}
	ml, err := k.cfg.Etcd.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	var lead *store.Member
	var others []store.Member
	for i, m := range ml {
		switch {
		case m.ID == leader:
			lead = &ml[i]
		case !m.IsLearner && len(m.ClientURLs) > 0:
			others = append(others, m)
		}
	}
	if lead == nil || len(lead.ClientURLs) == 0 {
		return nil, nil, fmt.Errorf("etcd's leader %x is not a member with a client URL", leader)
	}
	slices.SortFunc(others, func(a, b store.Member) int { return strings.Compare(a.Name, b.Name) })
	return lead, others, nil
}

// nodeOf asks a member which node it runs on (etcdmember.NodePath).
func (k *Keeper) nodeOf(ctx context.Context, m *store.Member) (string, error) {
	if len(m.ClientURLs) == 0 {
		return "", errors.New("no client URL")
	}
	actx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, strings.TrimRight(m.ClientURLs[0], "/")+etcdmember.NodePath, nil)
	if err != nil {
		return "", err
	}
	resp, err := k.cfg.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", etcdmember.NodePath, resp.Status)
	}
	var info etcdmember.NodeInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&info); err != nil {
		return "", fmt.Errorf("GET %s: %w", etcdmember.NodePath, err)
	}
	return info.Node, nil
}

// move asks lead, through a connection of its own, to hand its leadership
// to to.
func (k *Keeper) move(ctx context.Context, lead, to *store.Member) error {
	c, err := k.cfg.Etcd.DialMember(lead.ClientURLs[0])
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	return c.MoveLeader(ctx, to.ID)
}

// once logs msg at info, once per key and term.
func (k *Keeper) once(key, msg string, fields ...zap.Field) {
	k.mu.Lock()
	said := k.said[key]
	if k.said != nil {
		k.said[key] = true
	}
	k.mu.Unlock()
	if !said {
		k.log.Info(msg, fields...)
	}
}
