package contract

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

var update = flag.Bool("update", false, "rewrite internal/http/openapi/openapi.json from the Go types and the route table")

// committed is the document the server embeds.
func committed() string { return filepath.Join(Root(), "internal", "http", "openapi", "openapi.json") }

// The committed document is what the types and the route table make: a
// field, a route or an error code changed without `make openapi` fails here.
func TestDocumentUpToDate(t *testing.T) {
	doc, err := Build(NewSource(Root()))
	if err != nil {
		t.Fatal(err)
	}
	got, err := JSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(committed(), got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(committed())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("internal/http/openapi/openapi.json is out of date with the Go types and internal/http/openapi/contract/routes.go: run `make openapi` and commit the result (and the console's src/api.gen.ts)\n%s", firstDiff(want, got))
	}
}

// The document is valid OpenAPI 3.1, as kin-openapi's loader and validator
// read it (every $ref resolves, every schema is well formed).
func TestDocumentValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(mustRead(t, committed()))
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// firstDiff shows the first line where two texts differ, with context.
func firstDiff(a, b []byte) string {
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y []byte
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if !bytes.Equal(x, y) {
			return "line " + itoa(i+1) + ":\n  committed: " + string(x) + "\n  generated: " + string(y)
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }
