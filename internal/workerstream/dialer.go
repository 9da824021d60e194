package workerstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	apiclient "github.com/orion-sched/orion/internal/client"
)

// leaderTimeout bounds one GET /api/v1/leader beyond the wait the dialer
// asks the server to hold it, and handshakeTimeout one websocket handshake.
// Both are short: a frozen leader (SIGSTOP, partition) accepts connections
// and never answers, and a worker must reach the next leader well within the
// orphan grace.
const (
	leaderTimeout    = time.Second
	handshakeTimeout = time.Second
)

// hedgeAfter is how long a question to one server goes unanswered (beyond
// the wait asked for) before the next server is asked as well: a frozen
// server delays a dial by this much, and a healthy cluster is asked once.
const hedgeAfter = 300 * time.Millisecond

// suspectFor is how long after its stream dropped a worker keeps away from
// the leader it lost while replicas still name it: long enough for the
// standbys to depose a frozen leader (stream silence + one etcd round
// trip), shorter than the hub's reconnect grace so a worker whose stream
// only blipped comes back to the same leader in time.
const suspectFor = 1500 * time.Millisecond

// ReconnectBound is how long a standalone worker may take, at worst, to reach
// a new leader after losing the old one: the suspect window it waits out,
// one leader question, one handshake and one backoff between dials. A new
// leader must not take a running attempt for an orphan sooner (orphan_grace),
// or a task whose worker is alive and still reconnecting runs twice.
const ReconnectBound = suspectFor + leaderTimeout + handshakeTimeout + DefaultMaxBackoff

// HTTPDialer dials the leader for a standalone worker: its Dial is the
// agent's Dial, its SetPeers the agent's OnPeers. servers are API base URLs
// ("http://host:port"; "host:port" means http). Each dial:
//
//  1. if the last stream was answered with not_leader naming a URL, dials it;
//  2. else asks one server GET /api/v1/leader, which the server answers from
//     memory, and dials the leader's stream: the server it asked when that
//     one is the leader, else the leader_url of the answer (or a server
//     known by that name from an earlier answer). Another server is asked
//     only when that one fails, refuses (503: no leader known) or does not
//     answer within hedgeAfter, so a failover costs each worker one request
//     and each replica no etcd read.
//
// After losing a stream, the dialer asks the other servers first (the lost
// leader may be frozen) and asks the server to hold the answer until it
// names a leader other than the lost one, for as long as suspectFor lasts:
// the standbys depose the old leader meanwhile, and the worker learns the
// successor in that one request instead of polling for it.
//
// The servers asked are the given ones plus the replicas learned since: from
// leader answers, redirects, and the leader's peer list (SetPeers, which
// replaces what was learned before). So a worker given one address finds the
// others, including replicas that registered after it connected, and can
// reach the next leader when the replica it was given is the one that died.
type HTTPDialer struct {
	token  string
	client *http.Client
	ws     *websocket.Dialer

	mu      sync.Mutex
	given   []string          // normalized base URLs from the command line
	learned []string          // normalized base URLs learned since, not in given
	byName  map[string]string // replica name → base URL
	hint    *Redirect         // from the last not_leader
	current string            // leader of the last stream dialed
	lostAt  time.Time         // when a dial after that stream began
}

// NewHTTPDialer returns a dialer for servers. token, when non-empty, is sent
// as a bearer token. client nil: a default client (each request is bounded
// by its own deadline; a client's Timeout, if set, must leave room for
// suspectFor plus leaderTimeout); its transport's TLS settings and proxy are
// reused for the websocket.
func NewHTTPDialer(servers []string, token string, client *http.Client) *HTTPDialer {
	d := &HTTPDialer{token: token, client: client, byName: make(map[string]string)}
	if d.client == nil {
		d.client = &http.Client{}
	}
	d.ws = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: handshakeTimeout}
	if t, ok := d.client.Transport.(*http.Transport); ok && t != nil {
		d.ws.Proxy = t.Proxy
		d.ws.TLSClientConfig = t.TLSClientConfig
		d.ws.NetDialContext = t.DialContext
	}
	for _, s := range servers {
		if s = apiclient.NormalizeURL(s); s != "" && !slices.Contains(d.given, s) {
			d.given = append(d.given, s)
		}
	}
	return d
}

// SetPeers replaces the learned servers with the leader's list of replicas.
func (d *HTTPDialer) SetPeers(peers []Peer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.learned = d.learned[:0]
	for _, p := range peers {
		u := apiclient.NormalizeURL(p.URL)
		if u == "" {
			continue
		}
		d.learnLocked(u)
		if p.Name != "" {
			d.byName[p.Name] = u
		}
	}
}

// serversLocked lists the servers the next dial asks: the given ones, then
// the learned ones.
func (d *HTTPDialer) serversLocked() []string {
	return slices.Concat(d.given, d.learned)
}

// StreamURL is the worker stream's URL on the server at base.
func StreamURL(base string) (string, error) {
	u, err := url.Parse(apiclient.NormalizeURL(base))
	if err != nil {
		return "", fmt.Errorf("server URL %q: %w", base, err)
	}
	switch u.Scheme {
	case "ws", "wss":
		return u.String(), nil
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("server URL %q: want http, https, ws or wss", base)
	}
	u.Path = strings.TrimRight(u.Path, "/") + Path
	return u.String(), nil
}

// learnLocked adds a normalized base URL to the learned servers.
func (d *HTTPDialer) learnLocked(s string) {
	if s == "" || slices.Contains(d.given, s) || slices.Contains(d.learned, s) {
		return
	}
	d.learned = append(d.learned, s)
}

// Dial opens a stream to the leader and names it (see HTTPDialer).
func (d *HTTPDialer) Dial(ctx context.Context) (Conn, string, error) {
	d.mu.Lock()
	hint := d.hint
	d.hint = nil
	servers := d.serversLocked()
	suspect := d.current
	if suspect != "" && d.lostAt.IsZero() {
		d.lostAt = time.Now()
	}
	suspectUntil := d.lostAt.Add(suspectFor)
	if u := d.byName[suspect]; suspect != "" && u != "" {
		// The lost leader last: it may be frozen, and it is the one
		// server sure to name itself.
		if i := slices.Index(servers, u); i >= 0 {
			servers = append(slices.Delete(servers, i, i+1), u)
		}
	}
	d.mu.Unlock()
	if len(servers) == 0 {
		return nil, "", fmt.Errorf("workerstream: no server to dial")
	}

	var errs []string
	if hint != nil && hint.URL != "" {
		c, err := d.dialStream(ctx, hint.URL)
		if err == nil {
			d.connected(hint.Leader)
			return c, hint.Leader, nil
		}
		errs = append(errs, err.Error())
	}
	q := leaderQuestion{suspect: suspect, until: suspectUntil}
	if suspect != "" {
		q.wait = max(0, time.Until(suspectUntil))
	}
	r, more := d.ask(ctx, servers, q)
	errs = append(errs, more...)
	if r == nil {
		return nil, "", fmt.Errorf("workerstream: no server reachable: %s", strings.Join(errs, "; "))
	}
	target := d.learn(r.base, r.ans)
	c, err := d.dialStream(ctx, target)
	if err != nil {
		errs = append(errs, err.Error())
		return nil, "", fmt.Errorf("workerstream: leader %s named by %s not reachable: %s", r.ans.Leader, r.base, strings.Join(errs, "; "))
	}
	d.connected(r.ans.Leader)
	return c, r.ans.Leader, nil
}

// leaderQuestion is what a dial asks: the leader, and when it just lost
// suspect, one other than suspect, held for up to wait; an answer naming
// suspect before until is stale.
type leaderQuestion struct {
	suspect string
	wait    time.Duration
	until   time.Time
}

// leaderReply is one server's answer to GET /api/v1/leader.
type leaderReply struct {
	base string
	ans  apiclient.Leader
	err  error
}

// ask asks servers in turn, the next one as soon as the last failed or
// gave a stale answer, or hedgeAfter past the wait asked for without an
// answer, and returns the first usable answer (nil if none) and what went
// wrong with the others. The questions still out are cancelled on return.
func (d *HTTPDialer) ask(ctx context.Context, servers []string, q leaderQuestion) (*leaderReply, []string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replies := make(chan leaderReply, len(servers))
	next, pending := 0, 0
	hedge := time.NewTimer(time.Hour)
	defer hedge.Stop()
	askNext := func() {
		base := servers[next]
		next++
		pending++
		go func() {
			ans, err := d.leader(ctx, base, q)
			replies <- leaderReply{base, ans, err}
		}()
		hedge.Reset(q.wait + hedgeAfter)
	}
	askNext()
	var errs []string
	stale := false
	for pending > 0 {
		select {
		case r := <-replies:
			pending--
			switch {
			case r.err != nil:
				errs = append(errs, r.err.Error())
			case q.suspect != "" && r.ans.Leader == q.suspect && time.Now().Before(q.until):
				// Right after a takeover some replicas may not know
				// yet (or do not hold the answer): ask another.
				stale = true
			default:
				return &r, errs
			}
			if next < len(servers) {
				askNext()
			}
		case <-hedge.C:
			if next < len(servers) {
				askNext()
			}
		case <-ctx.Done():
			return nil, append(errs, ctx.Err().Error())
		}
	}
	if stale {
		errs = append(errs, fmt.Sprintf("leader %s went silent and is still named; waiting for its successor", q.suspect))
	}
	return nil, errs
}

// connected records the leader of a new stream.
func (d *HTTPDialer) connected(leader string) {
	d.mu.Lock()
	d.current, d.lostAt = leader, time.Time{}
	d.mu.Unlock()
}

// learn records what a leader answer from base says and returns the base
// URL to dial: the leader's if known, else base itself (whose not_leader
// redirect leads on).
func (d *HTTPDialer) learn(base string, ans apiclient.Leader) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ans.Node != "" {
		d.byName[ans.Node] = base
	}
	for _, r := range ans.Replicas {
		if r.APIURL == "" {
			continue
		}
		u := apiclient.NormalizeURL(r.APIURL)
		d.learnLocked(u)
		if r.Name != "" {
			d.byName[r.Name] = u
		}
	}
	if u := apiclient.NormalizeURL(ans.LeaderURL); u != "" && ans.Leader != "" {
		d.learnLocked(u)
		d.byName[ans.Leader] = u
	}
	switch {
	case ans.Leader == "":
		return base
	case ans.Leader == ans.Node:
		return base
	case d.byName[ans.Leader] != "":
		return d.byName[ans.Leader]
	}
	return base
}

// leader asks base GET /api/v1/leader (holding for a successor of
// q.suspect when q.wait is set).
func (d *HTTPDialer) leader(ctx context.Context, base string, q leaderQuestion) (apiclient.Leader, error) {
	var ans apiclient.Leader
	if u, err := url.Parse(base); err == nil && (u.Scheme == "ws" || u.Scheme == "wss") {
		return ans, nil // a stream URL given directly: nothing to ask
	}
	ctx, cancel := context.WithTimeout(ctx, q.wait+leaderTimeout)
	defer cancel()
	u := base + "/api/v1/leader"
	if q.suspect != "" && q.wait > 0 {
		u += "?" + url.Values{"suspect": {q.suspect}, "wait": {q.wait.Round(time.Millisecond).String()}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ans, err
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return ans, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return ans, fmt.Errorf("%s: %w", req.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &HTTPStatusError{URL: req.URL.String(), Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
		if len(e.Body) > 200 {
			e.Body = e.Body[:200]
		}
		return ans, e
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return ans, fmt.Errorf("%s: %w", req.URL, err)
	}
	return ans, nil
}

func (d *HTTPDialer) dialStream(ctx context.Context, base string) (Conn, error) {
	u, err := StreamURL(base)
	if err != nil {
		return nil, err
	}
	c, err := DialWebsocket(ctx, u, d.token, d.ws)
	if err != nil {
		return nil, err
	}
	return &redirectConn{Conn: c, d: d}, nil
}

// redirectConn notes a not_leader answer for the next dial.
type redirectConn struct {
	Conn
	d *HTTPDialer
}

// SendBatch keeps the wrapped connection's batching (sendAll).
func (c *redirectConn) SendBatch(ms []Msg) error { return sendAll(c.Conn, ms) }

func (c *redirectConn) Recv() (Msg, error) {
	m, err := c.Conn.Recv()
	if err == nil && m.Type == TypeNotLeader && m.Redirect != nil {
		rd := *m.Redirect
		c.d.mu.Lock()
		if rd.URL == "" && rd.Leader != "" {
			rd.URL = c.d.byName[rd.Leader]
		}
		if rd.URL != "" {
			c.d.learnLocked(apiclient.NormalizeURL(rd.URL))
			if rd.Leader != "" {
				c.d.byName[rd.Leader] = apiclient.NormalizeURL(rd.URL)
			}
			c.d.hint = &rd
		}
		// Redirected, not lost: the server was simply not the leader.
		c.d.current, c.d.lostAt = "", time.Time{}
		c.d.mu.Unlock()
	}
	if err == nil && m.Type == TypeRefused {
		// Refused by a live leader: the next dial asks for it as usual
		// rather than suspecting it gone.
		c.d.mu.Lock()
		c.d.current, c.d.lostAt = "", time.Time{}
		c.d.mu.Unlock()
	}
	return m, err
}
