package drill

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/client"
)

func TestParseFault(t *testing.T) {
	for s, want := range map[string]Fault{"kill": FaultKill, " Stop ": FaultStop, "etcd-member": FaultEtcdMember, "Node": FaultNode} {
		if f, err := ParseFault(s); err != nil || f != want {
			t.Errorf("%q: %q %v", s, f, err)
		}
	}
	_, err := ParseFault("partition")
	if err == nil || !strings.Contains(err.Error(), "make drills") || !strings.Contains(err.Error(), "--fault stop") {
		t.Errorf("partition: %v, want a refusal that points to make drills", err)
	}
	if _, err := ParseFault("flood"); err == nil {
		t.Error("flood accepted")
	}
	o := Options{Servers: []string{"http://127.0.0.1:1"}, Count: 1, Tasks: 8, Fault: FaultStop, StopFor: time.Second}
	if err := o.defaults(); err == nil || !strings.Contains(err.Error(), "--stop-for 1s") {
		t.Errorf("a 1 s stop: %v, want refused (the lease is 1 s)", err)
	}
}

func TestIsOrionEtcd(t *testing.T) {
	for argv, want := range map[string]bool{
		"/usr/local/bin/orion etcd --name e1": true,
		"bin/orion --config x etcd":           true,
		"bin/orion server --name n1":          false,
		"etcd --name e1":                      false,
		"/usr/bin/orion-drill etcd":           true, // a name with orion in it, as IsOrionServer
	} {
		if got := IsOrionEtcd(strings.Fields(argv)); got != want {
			t.Errorf("%q: %v, want %v", argv, got, want)
		}
	}
}

func TestPickMember(t *testing.T) {
	cl := &client.Cluster{}
	if _, err := pickMember(cl, "leader"); err == nil || !strings.Contains(err.Error(), "embedded") {
		t.Errorf("no members: %v", err)
	}
	cl.Etcd.Members = []client.EtcdMember{{Name: "e1"}, {Name: "e2", IsLeader: true}}
	if _, err := pickMember(cl, "leader"); err == nil || !strings.Contains(err.Error(), "quorum") {
		t.Errorf("two members: %v, want refused (one down takes the quorum)", err)
	}
	cl.Etcd.Members = append(cl.Etcd.Members, client.EtcdMember{Name: "e3"})
	for which, want := range map[string]string{"leader": "e2", "follower": "e1", "e3": "e3"} {
		if m, err := pickMember(cl, which); err != nil || m.Name != want {
			t.Errorf("%s: %+v %v, want %s", which, m, err, want)
		}
	}
	if _, err := pickMember(cl, "e9"); err == nil || !strings.Contains(err.Error(), "e1, e2, e3") {
		t.Errorf("unknown member: %v", err)
	}
}

// The stall is the longest gap between acknowledgements from the last one
// before the kill on.
func TestTrickleStall(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr := &trickle{ackAt: []time.Time{at(-900), at(-500), at(-20), at(300), at(320), at(340)}}
	if d, ok := tr.stall(t0); !ok || d != 320*time.Millisecond {
		t.Errorf("stall %v %v, want 320ms", d, ok)
	}
	tr = &trickle{ackAt: []time.Time{at(50), at(700)}} // nothing before the kill
	if d, ok := tr.stall(t0); !ok || d != 650*time.Millisecond {
		t.Errorf("stall %v %v, want 650ms (50 ms from the kill, then 650)", d, ok)
	}
	if _, ok := (&trickle{ackAt: []time.Time{at(-5)}}).stall(t0); ok {
		t.Error("a stall measured without an acknowledgement after the kill")
	}
}

// watchClose reports when the server behind a connection goes, and nothing
// while it stays.
func TestWatchClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	url := "http://" + ln.Addr().String()
	if at := <-watchClose(url, 50*time.Millisecond); !at.IsZero() {
		t.Fatalf("an open connection was reported closed at %v", at)
	}
	(<-accepted).Close()
	closes := watchClose(url, 10*time.Second)
	c := <-accepted
	before := time.Now()
	c.Close()
	if at := <-closes; at.IsZero() || at.Before(before) {
		t.Fatalf("closed at %v, want after %v", at, before)
	}
	if at := <-watchClose("http://127.0.0.1:1", time.Second); !at.IsZero() {
		t.Fatalf("a refused connection reported %v", at)
	}
}
