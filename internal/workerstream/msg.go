// Package workerstream connects remote executors to the leader. Every worker
// (a standalone `orion worker` process, or a replica's own slots) keeps one
// long-lived, bidirectional stream to the leader replica; the leader
// dispatches attempts over it and the worker sends results back.
//
// The leader side is a Hub: it accepts streams (a websocket via Handler, or an
// in-process Pipe via Accept), turns each connected worker into a
// *RemoteWorker that implements executor.Executor, and reports workers
// joining, disconnecting and leaving as Events. The worker side is an Agent:
// it dials the leader (following it across leader changes), announces its
// in-flight attempts in its hello so a new leader adopts them instead of
// running them again, runs what it is dispatched on a local executor and
// sends the results back.
//
// Protocol: JSON messages (Msg), one per websocket text frame; over a Pipe the
// Msg values themselves travel, unserialized.
//
//	worker → leader   hello (first), joined (after the welcome), result,
//	                  heartbeat, log_chunk
//	leader → worker   welcome (answers hello), dispatch, cancel, ack,
//	                  heartbeat, log_request, peers, not_leader or refused
//	                  (then the leader closes)
//
// Both sides send a heartbeat every heartbeat interval and drop a stream on
// which nothing arrived for the stale timeout. Results are acknowledged
// (ack) once the leader has committed them to etcd (or found them moot): a
// worker keeps a result and sends it again after every reconnect, to
// whichever replica leads, until then. A leader that took a result and died
// or resynchronised before committing it loses nothing. The scheduler's
// core tells current results from stale or repeated ones by attempt
// identity, so repeats are harmless.
//
// Terms: a welcome names the leader's term (keyspace incarnation and fence
// revision). A worker refuses the welcome of a leader older than one it has
// joined, in the same incarnation, and answers the others with joined: from
// then on, a deposed leader that does not know it yet can send it nothing.
// A new leader counts on it: attempts may be sent before their dispatch is
// committed, and the new leader dispatches nothing until the workers the
// term before listed have joined, having listed in their hellos everything
// an older leader sent them.
package workerstream

import "github.com/orion-sched/orion/internal/model"

// ProtocolVersion is sent in Hello.Version. A hub refuses a hello with a
// different non-zero version. 2: an ack means committed (1 acknowledged on
// receipt, and its workers replayed acknowledged results for a while).
const ProtocolVersion = 2

// Path is where a replica serves the worker stream (behind the API's auth).
const Path = "/internal/v1/worker"

// Message types (Msg.Type).
const (
	TypeHello      = "hello"       // worker → leader, first message: Hello
	TypeWelcome    = "welcome"     // leader → worker, answers hello: Welcome
	TypeDispatch   = "dispatch"    // leader → worker: Attempt
	TypeCancel     = "cancel"      // leader → worker: ID
	TypeResult     = "result"      // worker → leader: Result
	TypeAck        = "ack"         // leader → worker: ID of a result now committed (or moot)
	TypeHeartbeat  = "heartbeat"   // both ways, no payload
	TypeLogRequest = "log_request" // leader → worker: LogReq (open, more credit, or close)
	TypeLogChunk   = "log_chunk"   // worker → leader: Log
	TypeNotLeader  = "not_leader"  // leader → worker: Redirect; the stream is then closed
	TypePeers      = "peers"       // leader → worker: Peers, after welcome and whenever they change
	TypeJoined     = "joined"      // worker → leader: Term, the welcome's, now the oldest it accepts
	TypeRefused    = "refused"     // leader → worker: Refusal; the stream is then closed
)

// Msg is one message of the stream. Type says which payload field is set.
type Msg struct {
	Type     string           `json:"type"`
	Hello    *Hello           `json:"hello,omitempty"`
	Welcome  *Welcome         `json:"welcome,omitempty"`
	Attempt  *model.Attempt   `json:"attempt,omitempty"`
	ID       *model.AttemptID `json:"id,omitempty"`
	Result   *model.Result    `json:"result,omitempty"`
	Log      *LogChunk        `json:"log,omitempty"`
	LogReq   *LogRequest      `json:"log_req,omitempty"`
	Redirect *Redirect        `json:"redirect,omitempty"`
	Peers    []Peer           `json:"peers,omitempty"`
	Term     *Term            `json:"term,omitempty"`
	Refusal  *Refusal         `json:"refusal,omitempty"`
}

// Refusal says why the leader closes a stream: its hello (a worker id,
// slots or labels out of bounds), or messages beyond the stream's rate
// limit. Final marks a refusal of the worker's own settings, which a new
// stream would send again identically: the worker stops instead of
// reconnecting for ever. A worker of an earlier version ignores the
// message and sees the stream close.
type Refusal struct {
	Reason  string `json:"reason"` // one of the Refused* reasons
	Message string `json:"message"`
	Final   bool   `json:"final,omitempty"`
}

// Term identifies a leader's term: the incarnation of the keyspace it
// leads (the term record's; a wiped etcd starts a new one) and its fence
// revision. Within one incarnation a later term has a higher fence.
type Term struct {
	Incarnation string `json:"incarnation"`
	Fence       int64  `json:"fence"`
}

// Older reports whether t is a term before u in the same incarnation.
func (t Term) Older(u Term) bool { return t.Incarnation == u.Incarnation && t.Fence < u.Fence }

// Hello introduces a worker. InFlight lists the attempts it is running or
// has finished without a leader acknowledging the result yet: the leader
// adopts them rather than running them again.
type Hello struct {
	Worker   string            `json:"worker"`
	Slots    int               `json:"slots"`
	InFlight []model.AttemptID `json:"in_flight,omitempty"`
	// Replica is set when the worker is a replica's own slots (its name).
	Replica string `json:"replica,omitempty"`
	Version int    `json:"version"`
	// Labels are the worker's key=value labels (--labels); the leader
	// dispatches a task that requires labels only to a worker that has
	// them. Absent (a worker of an earlier version): no labels. A hub of an
	// earlier version ignores them, so the field needs no new version.
	Labels model.Labels `json:"labels,omitempty"`
	// Host and PID say where the worker runs (its hostname, its process),
	// for operators reading the cluster endpoint and for a benchmark
	// reading the CPU of the workers on its own host. A worker of an
	// earlier version sends neither.
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// Instance is random to each agent, so to each worker process: it
	// tells a stream that comes back from the same process from one of a
	// restarted process under the same id. The hub resends a reconnecting
	// worker what it dispatched and the worker did not report; to a new
	// process that would be a new run, which only the leader's committed
	// state may decide (the old process's attempts died with it and are
	// re-queued through the log, fenced). Without it a deposed leader
	// that has not noticed yet could hand a restarted worker, which
	// remembers no term it joined, attempts that the next leader runs
	// elsewhere. An agent's instance never changes, so any other value,
	// empty included (a worker of an earlier version), is another process;
	// two empty ones (an earlier version, restarted or not) are taken as
	// the same process, as before.
	Instance string `json:"instance,omitempty"`
}

// Welcome accepts a worker. The worker sends heartbeats at least every
// HeartbeatMs; the leader drops it after StaleAfterMs of silence.
type Welcome struct {
	Leader       string `json:"leader"`
	HeartbeatMs  int    `json:"heartbeat_ms"`
	StaleAfterMs int    `json:"stale_after_ms,omitempty"`
	// Term is the leader's term; absent from a hub of an earlier version
	// (or one not told its term), which then gets no joined.
	Term *Term `json:"term,omitempty"`
}

// LogRequest asks a worker for the full log of an attempt, flow-controlled by
// credit: the first request (with ID) opens the log and allows Credit chunks;
// later requests with the same Req grant more credit, or end the transfer
// (Close). Req is chosen by the leader, unique per stream.
type LogRequest struct {
	Req    uint64          `json:"req"`
	ID     model.AttemptID `json:"id"`
	Credit int             `json:"credit,omitempty"`
	Close  bool            `json:"close,omitempty"`
}

// LogChunk is one piece (≤ MaxChunk bytes) of a log. The last chunk of a
// transfer has EOF set; Err, when set, says why the transfer ended early,
// and NotExist that the worker has no log for the attempt (os.ErrNotExist).
type LogChunk struct {
	Req      uint64 `json:"req"`
	Data     []byte `json:"data,omitempty"`
	EOF      bool   `json:"eof,omitempty"`
	Err      string `json:"err,omitempty"`
	NotExist bool   `json:"not_exist,omitempty"`
}

// MaxChunk is the largest LogChunk.Data.
const MaxChunk = 64 << 10

// Redirect names the current leader, if known, and its API base URL
// ("http://host:port"; a ws:// or wss:// URL is used as the stream URL as is).
type Redirect struct {
	Leader string `json:"leader,omitempty"`
	URL    string `json:"url,omitempty"`
}

// Peer is a registered replica: a worker that loses its leader asks the
// peers it knows who leads next, so a worker given one address (which may
// be the replica that just died) still finds the others.
type Peer struct {
	Name string `json:"name"`
	URL  string `json:"url"` // API base URL
}

// Conn is one stream. Send is safe for concurrent use; Recv is called by one
// goroutine at a time; Close may be called at any time, from any goroutine,
// more than once, and unblocks a pending Send or Recv. After the peer
// closes, Recv returns io.EOF once the messages sent before are received.
type Conn interface {
	Send(Msg) error
	Recv() (Msg, error)
	Close() error
}
