package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/cli"
)

const (
	readmeMaxLines   = 400
	readmeFirstLines = 30
)

// repoRoot is the directory of go.mod above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// loadPages reads README.md and every Markdown file under docs/.
func loadPages(t *testing.T, root string) map[string]*page {
	t.Helper()
	pages := map[string]*page{}
	add := func(rel string) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		pages[rel] = parsePage(rel, b)
	}
	add("README.md")
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			add(filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

func loadRepo(t *testing.T, pages map[string]*page) *Repo {
	t.Helper()
	root := repoRoot(t)
	if pages == nil {
		pages = loadPages(t, root)
	}
	r, err := LoadRepo(root, pages, cli.NewRoot)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func report(t *testing.T, what string, probs []Problem) {
	t.Helper()
	for _, p := range probs {
		t.Errorf("%s: %s", what, p)
	}
}

func TestLinksResolve(t *testing.T) {
	r := loadRepo(t, nil)
	if len(r.Pages) < 2 {
		t.Fatalf("found %d pages; expected README.md and docs/", len(r.Pages))
	}
	report(t, "link", r.CheckLinks())
	report(t, "orphan", r.CheckLinked())
}

func TestCommandsExist(t *testing.T) {
	r := loadRepo(t, nil)
	n := 0
	for _, p := range r.Pages {
		cmds, _ := p.commands()
		for _, c := range cmds {
			if isOrion(c.args[0]) && c.fenced {
				n++
			}
		}
	}
	// The pages are full of orion commands; finding none means the
	// extraction broke, not that the pages are right.
	if n < 20 {
		t.Fatalf("found %d orion commands in code blocks; the extraction is broken", n)
	}
	report(t, "command", r.CheckCommands())
}

func TestPathsExist(t *testing.T) {
	report(t, "path", loadRepo(t, nil).CheckPaths())
}

func TestNamesExist(t *testing.T) {
	report(t, "name", loadRepo(t, nil).CheckNames())
}

func TestREADMEIsShortAndStartsWithTheCommands(t *testing.T) {
	r := loadRepo(t, nil)
	report(t, "README", CheckREADME(r.Pages["README.md"], readmeMaxLines, readmeFirstLines))
}

// TestChecksCatchMistakes feeds the checks a page with one mistake of each
// kind, beside the real pages, and requires each to be reported: a check
// that cannot fail proves nothing.
func TestChecksCatchMistakes(t *testing.T) {
	root := repoRoot(t)
	pages := loadPages(t, root)
	// Each line of a page nobody links to, with the problems it must
	// raise ("|" separates several); "" means none.
	lines := []struct{ text, want string }{
		{"# Broken", "no other page links to this page"},
		{"", ""},
		{"[gone](no-such-page.md)", "no file docs/no-such-page.md"},
		{"[bad anchor](../README.md#no-such-heading)", "no heading whose anchor is #no-such-heading"},
		{"[self](#broken) [self bad](#nope)", "#nope"},
		{"", ""},
		{"```sh", ""},
		{"orion submitt -f x.yaml", `has no subcommand "submitt"`},
		{"bin/orion submit --no-such-flag -f x.yaml", "has no flag --no-such-flag"},
		{"make no-such-target", `no target "no-such-target"`},
		{"orion get dag", "accepts 1 arg"},
		{"orion get", "needs a subcommand"},
		{"cat test/fixtures/no-such.yaml", "no file test/fixtures/no-such.yaml"},
		{"```", ""},
		{"", ""},
		{"```console", ""},
		{"$ bin/orion --server http://x cluster -z", "has no flag -z"},
		{"some output --that-is-not-a-flag", ""},
		{"```", ""},
		{"", ""},
		{"Run `orion drill --fault kill --no-flag`,", "has no flag --no-flag"},
		{"`TestNoSuchThing`, `orion_no_such_metric`,", "no test function TestNoSuchThing|no metric orion_no_such_metric"},
		{"`internal/nowhere/x.go` and `make nothing`.", `no file internal/nowhere/x.go|no target "nothing"`},
		{"`orion submit -f FILE [--wait] [--id ID]` is fine, and so are `test/cluster.sh`,", ""},
		{"`internal/engine/testdata/*.txt`, `TestChecksCatchMistakes` and `orion_is_leader`.", ""},
	}
	var src strings.Builder
	for _, l := range lines {
		src.WriteString(l.text + "\n")
	}
	bad := "docs/zz-broken.md"
	pages[bad] = parsePage(bad, []byte(src.String()))
	r := loadRepo(t, pages)

	var all []Problem
	all = append(all, r.CheckLinks()...)
	all = append(all, r.CheckLinked()...)
	all = append(all, r.CheckCommands()...)
	all = append(all, r.CheckPaths()...)
	all = append(all, r.CheckNames()...)
	got := map[int][]string{}
	for _, p := range all {
		if p.Page == bad {
			got[p.Line] = append(got[p.Line], p.Msg)
		}
	}
	for i, l := range lines {
		line := i + 1
		if l.want == "" {
			if len(got[line]) > 0 {
				t.Errorf("line %d %q: unexpected problems %q", line, l.text, got[line])
			}
			continue
		}
		for _, part := range strings.Split(l.want, "|") {
			found := false
			for _, msg := range got[line] {
				found = found || strings.Contains(msg, part)
			}
			if !found {
				t.Errorf("line %d %q: want a problem containing %q, got %q", line, l.text, part, got[line])
			}
		}
	}

	short := parsePage("README.md", []byte("# Orion\n\nNothing to run here.\n"))
	if probs := CheckREADME(short, readmeMaxLines, readmeFirstLines); len(probs) != 2 {
		t.Errorf("a README without the commands: want 2 problems, got %v", probs)
	}
	long := parsePage("README.md", []byte("make run\nmake test\n"+strings.Repeat("text\n", 500)))
	if probs := CheckREADME(long, readmeMaxLines, readmeFirstLines); len(probs) != 1 {
		t.Errorf("a 502-line README: want 1 problem, got %v", probs)
	}
}

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"etcd: TLS and auth":                  "etcd-tls-and-auth",
		"On a real cluster: make kube-test":   "on-a-real-cluster-make-kube-test",
		"Worker pools and limits":             "worker-pools-and-limits",
		"kill -9 → takeover (p99)":            "kill--9--takeover-p99",
		"What `orion_bench` measures, 2 × 16": "what-orion_bench-measures-2--16",
	} {
		if got := Slug(title); got != want {
			t.Errorf("Slug(%q) = %q, want %q", title, got, want)
		}
	}
}
