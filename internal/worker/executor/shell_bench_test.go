package executor

import (
	"os/exec"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

// The cost of one shell step through the executor against the floor it
// cannot beat, a bare `sh -c true`. Issue 11 allows the executor at most
// 1 ms per step above the floor; compare the two ns/op figures:
//
//	go test ./internal/worker/executor -run '^$' -bench 'Shell' -benchtime 200x -count 5
func BenchmarkShellTrueBare(b *testing.B) {
	for range b.N {
		if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// One attempt at a time, as a chain runs its steps.
func BenchmarkShellTrueLocal(b *testing.B) {
	l, err := NewLocal(LocalConfig{ID: "bench", Slots: 1, LogDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	spec := model.Task{ID: "t", Kind: model.KindShell, Command: "true"}
	b.ResetTimer()
	for i := range b.N {
		l.Start(model.Attempt{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: i + 1}, Spec: spec})
		if r := <-l.Results(); r.Outcome != model.Succeeded {
			b.Fatalf("%+v", r)
		}
	}
}
