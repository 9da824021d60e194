// Package testkit holds the few helpers every test package needs: loopback
// ports that are never handed out twice, and a bounded wait for a
// condition. It has no dependencies, so any test may import it.
package testkit

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// portsGiven are the ports FreePort has returned in this test binary. The
// kernel may offer a port that was just closed again; two processes given
// the same one would fight over it (seen: two replicas on one API port).
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// FreePort returns a port of 127.0.0.1 that is free now and that no other
// call in this test binary has returned.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		portsMu.Lock()
		seen := portsGiven[port]
		portsGiven[port] = true
		portsMu.Unlock()
		if !seen {
			return port
		}
	}
	t.Fatal("no loopback port left that was not handed out already")
	return 0
}

// FreeURL is FreePort as an http URL.
func FreeURL(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
}

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test when it does not within d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
