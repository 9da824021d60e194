package reap

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// comm may contain spaces and parentheses.
	line := "4242 (a) b (c) S 1 4240 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100\n"
	st, err := parseStat([]byte(line))
	if err != nil || st != (Stat{State: 'S', PGrp: 4240, SID: 4200, Start: 987654}) {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := parseStat([]byte("4242 (a) S 1 2")); err == nil {
		t.Error("short line parsed")
	}
}

// The journal's lines merge into the running attempts, and compaction keeps
// them while the ended ones go.
func TestJournal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// os.Getpid() stands for a forked leader: Started reads its stat.
	self, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	keep, err := j.Begin("d/keep#1", "/logs/keep")
	if err != nil {
		t.Fatal(err)
	}
	unforked, err := j.Begin("d/unforked#1", "/logs/unforked")
	if err != nil {
		t.Fatal(err)
	}
	if err := keep.Started(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	for i := range compactAt + 10 {
		p, err := j.Begin(fmt.Sprintf("d/t#%d", i), "")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Started(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		p.Done()
	}
	want := []Record{
		{Seq: 1, Mark: filepath.Base(dir) + "/1", Attempt: "d/keep#1", Log: "/logs/keep", PGID: os.Getpid(), SID: self.SID, Start: self.Start},
		{Seq: 2, Mark: filepath.Base(dir) + "/2", Attempt: "d/unforked#1", Log: "/logs/unforked"},
	}
	got, err := Running(dir)
	slices.SortFunc(got, func(a, b Record) int { return int(a.Seq - b.Seq) })
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("running %+v %v, want %+v", got, err, want)
	}
	b, _ := os.ReadFile(filepath.Join(dir, JournalName))
	if n := bytes.Count(b, []byte("\n")); n > compactAt {
		t.Errorf("journal of %d lines: not compacted", n)
	}
	keep.Done()
	unforked.Done()
	if got, err := Running(dir); err != nil || len(got) != 0 {
		t.Errorf("running after Done: %+v %v", got, err)
	}
}

// What the journal costs an attempt: its three lines and the /proc read.
//
//	go test ./internal/worker/executor/reap -run '^$' -bench Journal
func BenchmarkJournalAttempt(b *testing.B) {
	j, err := OpenJournal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	for range b.N {
		p, err := j.Begin("dag/task#1", "/var/lib/orion/logs/dag/task/1.log")
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Started(os.Getpid()); err != nil {
			b.Fatal(err)
		}
		p.Done()
	}
}

// The note goes after the output when there is a log, and makes one (and
// its dir) for an attempt that had written nothing.
func TestNoteInLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	some := filepath.Join(dir, "some.log")
	if err := os.WriteFile(some, []byte("output\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(dir, "d", "t", "1.log")
	for _, p := range []string{some, none} {
		NoteInLog(p, "orion: note")
	}
	for p, want := range map[string]string{some: "output\norion: note\n", none: "orion: note\n"} {
		if b, err := os.ReadFile(p); string(b) != want {
			t.Errorf("%s: %q %v, want %q", p, b, err, want)
		}
	}
}
