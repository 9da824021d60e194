package procfs

import (
	"os"
	"strings"
	"testing"
)

// The state, CPU and start time are counted from the last ')', so that a
// command name with spaces and parentheses does not shift them.
func TestParseStat(t *testing.T) {
	line := "4242 (orion (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 12 0 987654 100000 200 18446744073709551615\n"
	st, err := ParseStat(line)
	if err != nil || st.State != 'S' || st.StartTime != 987654 || st.CPUTicks != 3 || st.RSSPages != 200 {
		t.Fatalf("ParseStat = %+v %v", st, err)
	}
	line = "4242 (orion (w) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 12 0 987654 1000000 500 18446744073709551615"
	if st, err := ParseStat(line); err != nil || st.CPUSeconds() != 3.25 || st.StartTime != 987654 {
		t.Fatalf("ParseStat = %+v, %v; want 3.25 s (250+75 ticks), start 987654", st, err)
	}
	if _, err := ParseStat("4242 (x) S 1"); err == nil {
		t.Error("a short line parsed")
	}
}

// This test process: its stat and its command line read back.
func TestReadSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil || st.StartTime == 0 {
		t.Fatalf("ReadStat(self) = %+v, %v", st, err)
	}
	argv, err := Argv(os.Getpid())
	if err != nil || strings.Join(argv, " ") != strings.Join(os.Args, " ") {
		t.Fatalf("Argv(self) = %q, %v", argv, err)
	}
}

func TestIsOrionCommand(t *testing.T) {
	for argv, want := range map[string]bool{
		"/repo/bin/orion worker --server http://x:1":  true,
		"orion --config w.yaml worker":                true,
		"/repo/bin/orion server --name n1":            false,
		"/repo/bin/orion bench --server x --tasks 10": false,
		"/usr/bin/python3 worker.py orion":            false,
	} {
		if got := IsOrionCommand(strings.Fields(argv), "worker"); got != want {
			t.Errorf("IsOrionCommand(%q, worker) = %v, want %v", argv, got, want)
		}
	}
}

// The resident set is read from the status file's kB lines; this process
// has one, and a file without VmRSS is an error, not zeros.
func TestReadMemory(t *testing.T) {
	m, err := ParseStatusMemory("Name:\torion\nVmRSS:\t  2048 kB\nRssAnon:\t  1536 kB\nRssFile:\t   512 kB\n")
	if err != nil || m != (Memory{RSS: 2 << 20, Anon: 1536 << 10, File: 512 << 10}) {
		t.Fatalf("ParseStatusMemory = %+v, %v", m, err)
	}
	if _, err := ParseStatusMemory("Name:\tkthreadd\n"); err == nil {
		t.Error("a status without VmRSS parsed")
	}
	if m, err := ReadMemory(os.Getpid()); err != nil || m.RSS <= 0 || m.Anon <= 0 {
		t.Fatalf("ReadMemory(self) = %+v, %v", m, err)
	}
}
