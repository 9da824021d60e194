package dag

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

// wideDAG is the shape of issue 31's acceptance DAG in JSON or YAML: a
// wide fan-out of n noop tasks after a start task, a fan-in task, then a
// short chain. Ids are as long as ordinary ones (fan-00012345).
func wideDAG(n int, yaml bool) []byte {
	var b bytes.Buffer
	if yaml {
		b.WriteString("name: wide\ntasks:\n  - {id: start, kind: noop}\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "  - {id: fan-%08d, kind: noop, depends_on: [start]}\n", i)
		}
		b.WriteString("  - id: join\n    kind: noop\n    depends_on:\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "      - fan-%08d\n", i)
		}
		b.WriteString("  - {id: chain-1, kind: noop, depends_on: [join]}\n  - {id: chain-2, kind: noop, depends_on: [chain-1]}\n")
		return b.Bytes()
	}
	b.WriteString(`{"name":"wide","tasks":[{"id":"start","kind":"noop"}`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"id":"fan-%08d","kind":"noop","depends_on":["start"]}`, i)
	}
	b.WriteString(`,{"id":"join","kind":"noop","depends_on":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"fan-%08d"`, i)
	}
	b.WriteString(`]},{"id":"chain-1","kind":"noop","depends_on":["join"]},{"id":"chain-2","kind":"noop","depends_on":["chain-1"]}]}`)
	return b.Bytes()
}

// parseValidate is what POST /api/v1/dags does with a body before the
// engine: count, parse, apply defaults, validate.
func parseValidate(body []byte, ct string) (*model.DAG, error) {
	if err := CheckTaskCount(body, ct, 200_000); err != nil {
		return nil, err
	}
	d, err := Parse(body, ct)
	if err != nil {
		return nil, err
	}
	d.Normalize()
	return d, Validate(d, Limits{MaxTasks: 200_000, MaxDecodedBytes: 2 * int64(len(body))})
}

var scaleFormats = []struct {
	name string
	yaml bool
	ct   string
}{{"json", false, "application/json"}, {"yaml", true, "application/yaml"}}

// BenchmarkParseValidate100k measures a 100,000-task DAG (issue 31) from
// its body to a validated spec, in JSON and in YAML. Reported besides
// time and allocations: bytes allocated per byte of body.
//
//	go test ./internal/dag -run '^$' -bench ParseValidate100k -benchmem
func BenchmarkParseValidate100k(b *testing.B) {
	for _, f := range scaleFormats {
		body := wideDAG(100_000, f.yaml)
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			for i := 0; i < b.N; i++ {
				if _, err := parseValidate(body, f.ct); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/float64(len(body)), "alloc-bytes/body-byte")
		})
	}
}

// Parsing and validation grow linearly with a DAG: ten times the tasks
// (and the fan-in's ten times the dependencies) allocate about ten times
// as much, and what the parsed DAG keeps is a small multiple of its body.
// Counted, not timed, so a loaded machine cannot fail it.
func TestParseValidateIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("parses 110,000 tasks")
	}
	for _, f := range scaleFormats {
		t.Run(f.name, func(t *testing.T) {
			measure := func(n int) (allocs, bytes, live float64, body int) {
				in := wideDAG(n, f.yaml)
				var ms0, ms1, ms2 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				d, err := parseValidate(in, f.ct)
				runtime.ReadMemStats(&ms1)
				runtime.GC()
				runtime.ReadMemStats(&ms2)
				if err != nil || len(d.Tasks) != n+4 {
					t.Fatalf("%d tasks: %v", n, err)
				}
				runtime.KeepAlive(d)
				return float64(ms1.Mallocs - ms0.Mallocs), float64(ms1.TotalAlloc - ms0.TotalAlloc),
					float64(ms2.HeapAlloc) - float64(ms0.HeapAlloc), len(in)
			}
			a1, b1, _, _ := measure(10_000)
			a2, b2, live, body := measure(100_000)
			t.Logf("10k: %.0f allocs %.1f MB; 100k: %.0f allocs %.1f MB, %.1f MB kept, for a body of %.1f MB",
				a1, b1/1e6, a2, b2/1e6, live/1e6, float64(body)/1e6)
			// Slices grow by doubling: the bytes of 10x the tasks may take
			// up to twice 10x.
			if a2 > 12*a1 || b2 > 20*b1 {
				t.Errorf("10x the tasks cost %.1fx the allocations and %.1fx the bytes: not linear", a2/a1, b2/b1)
			}
			if live > 12*float64(body) {
				t.Errorf("the parsed DAG of 100,000 tasks keeps %.1f bytes per byte of body", live/float64(body))
			}
		})
	}
}
