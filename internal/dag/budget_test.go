package dag

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

// aliasBomb is a small YAML body whose tasks all alias one anchored command:
// each alias is one node, so the parser's alias-ratio guard does not see it,
// but the decoded DAG holds tasks × len(command) bytes of text.
func aliasBomb(tasks, commandBytes int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: bomb\ncommon: &c %q\ntasks:\n", strings.Repeat("x", commandBytes))
	for i := 0; i < tasks; i++ {
		fmt.Fprintf(&b, "  - {id: t%d, command: *c}\n", i)
	}
	return b.String()
}

func TestAliasAmplificationRefusedByTheBudget(t *testing.T) {
	// A 60 KB command (under the per-field limit) anchored in the first task
	// and aliased by 999 more: a 75 KB body that decodes to 60 MB of text.
	var b strings.Builder
	b.WriteString("name: bomb\ntasks:\n")
	fmt.Fprintf(&b, "  - {id: t0, command: &c %q}\n", strings.Repeat("x", 60<<10))
	for i := 1; i < 1000; i++ {
		fmt.Fprintf(&b, "  - {id: t%d, command: *c}\n", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Load([]byte(b.String()), "application/yaml", Limits{MaxDecodedBytes: 2 << 20})
	runtime.ReadMemStats(&after)
	ve := asVE(t, err)
	if ve.Code != CodeTooLarge || !strings.Contains(ve.Message, "the limit is 2097152") {
		t.Fatalf("got %s: %s", ve.Code, ve.Message)
	}
	// Decoding shares the anchored string; nothing copies it 1000 times.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Fatalf("refusing a %d-byte body allocated %d MB", b.Len(), grew>>20)
	}
}

func TestPerFieldLimits(t *testing.T) {
	big := func(n int) string { return strings.Repeat("a", n) }
	env := map[string]string{}
	for i := 0; i < 40; i++ {
		env[fmt.Sprintf("V%d", i)] = big(2 << 10)
	}
	for _, c := range []struct {
		name string
		task model.Task
		want string
	}{
		{"command", model.Task{ID: "a", Kind: model.KindShell, Command: big(MaxCommandBytes + 1)}, "command is 65537 bytes; the limit is 65536"},
		{"env", model.Task{ID: "a", Kind: model.KindShell, Command: "true", Env: env}, "env is"},
		{"url", model.Task{ID: "a", Kind: model.KindHTTP, URL: "http://x/" + big(MaxURLBytes)}, "url is"},
		{"workdir", model.Task{ID: "a", Kind: model.KindShell, Command: "true", Workdir: "/" + big(MaxPathBytes)}, "workdir is"},
	} {
		d := &model.DAG{Name: "x", Tasks: []model.Task{c.task}}
		d.Normalize()
		ve := asVE(t, Validate(d, Limits{}))
		if ve.Code != CodeInvalid || !strings.Contains(ve.Message, c.want) {
			t.Errorf("%s: %s: %s", c.name, ve.Code, ve.Message)
		}
		// Records already stored are not judged by today's field limits.
		if err := Validate(d, Limits{Stored: true, MaxDecodedBytes: 1 << 30}); err != nil {
			t.Errorf("%s: stored record refused: %v", c.name, err)
		}
	}
	// At the limit is fine.
	d := &model.DAG{Name: "x", Tasks: []model.Task{{ID: "a", Kind: model.KindShell, Command: big(MaxCommandBytes)}}}
	d.Normalize()
	if err := Validate(d, Limits{}); err != nil {
		t.Fatal(err)
	}
}

func TestDecodedBytesCountsEveryString(t *testing.T) {
	d := &model.DAG{ID: "id", Name: "nm", Tasks: []model.Task{{ID: "t", Name: "n", Kind: "shell", Command: "cmd", Interpreter: "sh",
		Env: map[string]string{"K": "V"}, Workdir: "/w", URL: "u", Method: "GET", DependsOn: []string{"dep"}}}}
	// id 2 + name 2 + t 1 + n 1 + shell 5 + cmd 3 + sh 2 + "K=V\0" 4 + /w 2 + u 1 + GET 3 + dep 3
	if got := d.DecodedBytes(); got != 29 {
		t.Fatalf("DecodedBytes = %d, want 29", got)
	}
}
