package guard

import (
	"net"
	"net/netip"
	"sync"
)

// ClientKey groups client addresses the way per-client limits count them:
// an IPv4 address, or an IPv6 /64 (one host usually owns a whole /64).
// limited is false for loopback clients, which are local processes and
// never limited by the rate and connection limits.
func ClientKey(remoteAddr string) (key string, limited bool) {
	key, loopback := addrKey(remoteAddr)
	if loopback {
		return "", false
	}
	return key, true
}

// AddrKey is ClientKey's grouping for limits that count loopback clients
// too (event-stream subscribers: a local process can open as many as a
// remote one).
func AddrKey(remoteAddr string) string {
	key, _ := addrKey(remoteAddr)
	return key
}

func addrKey(remoteAddr string) (key string, loopback bool) {
	host := remoteAddr
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return "?" + remoteAddr, false
	}
	a = a.Unmap().WithZone("")
	if a.Is6() && !a.IsLoopback() {
		p, _ := a.Prefix(64)
		return p.String(), false
	}
	return a.String(), a.IsLoopback()
}

// LimitPerClient returns a listener that closes, at once, a connection from
// a client (ClientKey) that already holds max open connections, so that one
// address cannot hold every goroutine and file descriptor of the server
// with idle or slow connections. Loopback clients are not limited. refused,
// if not nil, is called for each connection closed this way.
func LimitPerClient(ln net.Listener, max int, refused func()) net.Listener {
	return &perClient{Listener: ln, max: max, open: map[string]int{}, refused: refused}
}

type perClient struct {
	net.Listener
	max     int
	refused func()

	mu   sync.Mutex
	open map[string]int
}

func (l *perClient) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, limited := ClientKey(c.RemoteAddr().String())
		if !limited {
			return c, nil
		}
		l.mu.Lock()
		full := l.open[key] >= l.max
		if !full {
			l.open[key]++
		}
		l.mu.Unlock()
		if full {
			_ = c.Close()
			if l.refused != nil {
				l.refused()
			}
			continue
		}
		return &countedConn{Conn: c, release: func() { l.release(key) }}, nil
	}
}

func (l *perClient) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// Open reports how many connections key holds (for tests and metrics).
func (l *perClient) Open(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[key]
}

// countedConn gives its slot back once, on the first Close (net/http and a
// websocket library may both close a hijacked connection).
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn returns the connection counted (hijack.SetSendBuffer reaches the
// socket through it).
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
