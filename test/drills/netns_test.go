package drills

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// netLab is the network the isolation drill runs on, all of it created by
// the test and deleted in t.Cleanup: one namespace per replica, each linked
// by a veth pair to a router namespace, which is linked by one more pair to
// the root namespace, where the etcd members, the workers and the test run
// on the root end's address. Cutting a replica's link in the router (link
// down) isolates it from everything at once, without closing a socket: a
// partition, not a crash.
//
//	root  odNr 10.213.254.1 ── odNc 10.213.254.2  router  odNc<i> 10.213.<i>.1 ── odNn<i> 10.213.<i>.2  replica i
type netLab struct {
	t      *testing.T
	tag    string // prefix of every name, unique per test process
	router string
	ns     []string // the replicas' namespaces
}

const labNet = "10.213."

// newNetLab builds the network, or says why it cannot (not root, no ip,
// the kernel refuses) so the drill can be skipped with that message.
func newNetLab(t *testing.T, replicas int) (*netLab, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("network isolation needs root (network namespaces and veth pairs)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("network isolation needs iproute2 (apt-get install -y iproute2): %v", err)
	}
	if out, _ := exec.Command("ip", "-4", "route", "show").CombinedOutput(); strings.Contains(string(out), labNet) {
		return nil, fmt.Errorf("the host already routes %s0.0/16, which the drill would use:\n%s", labNet, out)
	}
	l := &netLab{t: t, tag: fmt.Sprintf("od%d", os.Getpid()%100000)}
	l.router = l.tag + "-router"
	t.Cleanup(l.remove)
	cmds := [][]string{
		{"netns", "add", l.router},
		{"-n", l.router, "link", "set", "lo", "up"},
		{"link", "add", l.tag + "r", "type", "veth", "peer", "name", l.tag + "c", "netns", l.router},
		{"addr", "add", labNet + "254.1/30", "dev", l.tag + "r"},
		{"link", "set", l.tag + "r", "up"},
		{"-n", l.router, "addr", "add", labNet + "254.2/30", "dev", l.tag + "c"},
		{"-n", l.router, "link", "set", l.tag + "c", "up"},
		{"route", "add", labNet + "0.0/16", "via", labNet + "254.2"},
	}
	for i := 1; i <= replicas; i++ {
		ns := fmt.Sprintf("%s-n%d", l.tag, i)
		l.ns = append(l.ns, ns)
		c, n := fmt.Sprintf("%sc%d", l.tag, i), fmt.Sprintf("%sn%d", l.tag, i)
		cmds = append(cmds,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", l.router, "link", "add", c, "type", "veth", "peer", "name", n, "netns", ns},
			[]string{"-n", l.router, "addr", "add", fmt.Sprintf("%s%d.1/30", labNet, i), "dev", c},
			[]string{"-n", l.router, "link", "set", c, "up"},
			[]string{"-n", ns, "addr", "add", fmt.Sprintf("%s%d.2/30", labNet, i), "dev", n},
			[]string{"-n", ns, "link", "set", n, "up"},
			[]string{"-n", ns, "route", "add", "default", "via", fmt.Sprintf("%s%d.1", labNet, i)},
		)
	}
	for _, c := range cmds {
		if err := l.ip(c...); err != nil {
			return nil, err
		}
	}
	// The router forwards between its links (its own sysctl, not the host's).
	if out, err := exec.Command("ip", "netns", "exec", l.router, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip_forward in %s: %v: %s", l.router, err, out)
	}
	return l, nil
}

func (l *netLab) ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// clientAddrs gives the root namespace n more addresses, 10.213.253.1 and
// on, on its end of the link to the router (routed back by the router), so
// that the test can be n more clients of the replicas, each with an
// address of its own: the rate limit and the connection cap are per
// address. They go with the link when the lab is removed.
func (l *netLab) clientAddrs(n int) ([]string, error) {
	if err := l.ip("-n", l.router, "route", "add", labNet+"253.0/24", "via", labNet+"254.1"); err != nil {
		return nil, err
	}
	var out []string
	for i := 1; i <= n; i++ {
		a := fmt.Sprintf("%s253.%d", labNet, i)
		if err := l.ip("addr", "add", a+"/32", "dev", l.tag+"r"); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// etcdHost is where the root namespace's processes listen.
func (l *netLab) etcdHost() string { return labNet + "254.1" }

// placements puts replica i in its namespace, on its address.
func (l *netLab) placements() []cluster.Placement {
	var out []cluster.Placement
	for i, ns := range l.ns {
		out = append(out, cluster.Placement{Host: fmt.Sprintf("%s%d.2", labNet, i+1), Wrap: []string{"ip", "netns", "exec", ns}})
	}
	return out
}

// cut isolates replica i (0-based); heal undoes it.
func (l *netLab) cut(i int) error {
	return l.ip("-n", l.router, "link", "set", fmt.Sprintf("%sc%d", l.tag, i+1), "down")
}

func (l *netLab) heal(i int) error {
	return l.ip("-n", l.router, "link", "set", fmt.Sprintf("%sc%d", l.tag, i+1), "up")
}

// remove deletes the namespaces (their veth ends, and so the pairs and the
// root's route, go with them).
func (l *netLab) remove() {
	for _, ns := range append([]string{l.router}, l.ns...) {
		if err := exec.Command("ip", "netns", "del", ns).Run(); err != nil {
			continue // not created
		}
	}
	_ = exec.Command("ip", "link", "del", l.tag+"r").Run() // gone with the router already, unless it never moved there
}

// isolateLeader cuts the leader replica off the network for 3 s (three
// times its lease), then heals the link: a standby takes over, and the old
// leader, back, finds its term fenced and follows as a standby.
func isolateLeader(d *drill) {
	old, _ := d.c.Leader()
	i := -1
	for k, s := range d.c.Servers {
		if s == old {
			i = k
		}
	}
	t0 := time.Now()
	if err := d.lab.cut(i); err != nil {
		d.t.Fatal(err)
	}
	d.paused[old.Name] = true   // unreachable: polling it would only time out
	time.Sleep(3 * time.Second) // the fault: partitioned for three leases
	_, me := d.awaitTerm(t0, 30*time.Second)
	d.res.takeover = me.FirstCommitAt.Sub(t0)
	if err := d.lab.heal(i); err != nil {
		d.t.Fatal(err)
	}
	delete(d.paused, old.Name)
	d.c.WaitFor(old.Name+" a standby after the partition healed", 30*time.Second, func() (bool, string) {
		d.c.MustRun(old.Proc)
		me, err := d.c.Self(old)
		return err == nil && me.Role == "standby", fmt.Sprintf("%+v %v", me, err)
	})
}
