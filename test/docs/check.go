package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"mvdan.cc/sh/v3/syntax"
)

// Problem is one thing a page says that the repository contradicts.
type Problem struct {
	Page string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.Page, p.Line, p.Msg) }

// Repo is what the pages are checked against.
type Repo struct {
	Root    string
	Pages   map[string]*page // by path relative to Root
	NewCLI  func() *cobra.Command
	targets map[string]bool // Makefile targets
	top     map[string]bool // top-level entries git tracks
	ignored []string        // root-anchored .gitignore entries: build output
	tests   map[string]bool // Test*, Fuzz*, Benchmark* functions of every _test.go
	source  string          // every non-test Go file under cmd/ and internal/
}

// LoadRepo reads the Makefile, the top-level entries, the tests and the Go
// sources of the repository at root; pages are the Markdown files to check.
func LoadRepo(root string, pages map[string]*page, newCLI func() *cobra.Command) (*Repo, error) {
	r := &Repo{Root: root, Pages: pages, NewCLI: newCLI, targets: map[string]bool{}, top: map[string]bool{}, tests: map[string]bool{}}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	r.targets = makeTargets(mk)
	if gi, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(gi), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") {
				r.ignored = append(r.ignored, strings.Trim(l, "/"))
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() != ".git" && !r.isIgnored(e.Name()) {
			r.top[e.Name()] = true
		}
	}
	testFunc := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)\w*)\(`)
	var src strings.Builder
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" || r.isIgnored(filepath.ToSlash(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, "_test.go") {
			for _, m := range testFunc.FindAllSubmatch(b, -1) {
				r.tests[string(m[1])] = true
			}
		} else if strings.HasPrefix(rel, "internal"+string(filepath.Separator)) || strings.HasPrefix(rel, "cmd"+string(filepath.Separator)) {
			src.Write(b)
		}
		return nil
	})
	r.source = src.String()
	return r, err
}

func (r *Repo) isIgnored(rel string) bool {
	for _, ig := range r.ignored {
		if rel == ig || strings.HasPrefix(rel, ig+"/") {
			return true
		}
	}
	return false
}

// makeTargets lists the targets a Makefile defines by name (not those named
// by a variable).
func makeTargets(mk []byte) map[string]bool {
	rule := regexp.MustCompile(`^([A-Za-z0-9_.][A-Za-z0-9_./ -]*?)\s*:([^=]|$)`)
	t := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(mk))
	for sc.Scan() {
		if m := rule.FindStringSubmatch(sc.Text()); m != nil {
			for _, name := range strings.Fields(m[1]) {
				t[name] = true
			}
		}
	}
	return t
}

func (r *Repo) sortedPages() []*page {
	var ps []*page
	for _, p := range r.Pages {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].path < ps[j].path })
	return ps
}

// CheckLinks resolves every relative link to a file of the repository and
// every #anchor to a heading of the page it names.
func (r *Repo) CheckLinks() []Problem {
	var out []Problem
	for _, p := range r.sortedPages() {
		for _, l := range p.links {
			if msg := r.checkLink(p, l.text); msg != "" {
				out = append(out, Problem{p.path, l.line, msg})
			}
		}
	}
	return out
}

func (r *Repo) checkLink(p *page, dest string) string {
	if dest == "" {
		return "empty link"
	}
	if u, err := url.Parse(dest); err == nil && u.Scheme != "" {
		return "" // http(s), mailto: not the repository's
	}
	file, anchor, _ := strings.Cut(dest, "#")
	file, err := url.PathUnescape(file)
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err)
	}
	target := p.path
	if file != "" {
		if strings.HasPrefix(file, "/") {
			return fmt.Sprintf("link %q: use a path relative to %s", dest, p.path)
		}
		target = path.Clean(path.Join(path.Dir(p.path), file))
		if target == ".." || strings.HasPrefix(target, "../") {
			return fmt.Sprintf("link %q leaves the repository", dest)
		}
		if _, ok := r.Pages[target]; !ok {
			if _, err := os.Stat(filepath.Join(r.Root, filepath.FromSlash(target))); err != nil {
				return fmt.Sprintf("link %q: no file %s", dest, target)
			}
		}
	}
	if anchor == "" {
		return ""
	}
	tp := r.Pages[target]
	if tp == nil {
		if !strings.HasSuffix(target, ".md") {
			return fmt.Sprintf("link %q: an anchor into %s, which is not a Markdown page", dest, target)
		}
		b, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(target)))
		if err != nil {
			return fmt.Sprintf("link %q: %v", dest, err)
		}
		tp = parsePage(target, b)
	}
	if !tp.anchors[anchor] {
		return fmt.Sprintf("link %q: %s has no heading whose anchor is #%s%s", dest, target, anchor, closest(anchor, tp.anchors))
	}
	return ""
}

func closest(anchor string, anchors map[string]bool) string {
	var best []string
	for a := range anchors {
		if strings.Contains(a, anchor) || strings.Contains(anchor, a) {
			best = append(best, "#"+a)
		}
	}
	sort.Strings(best)
	if len(best) == 0 {
		return ""
	}
	return " (did you mean " + strings.Join(best, " or ") + "?)"
}

// CheckLinked requires every page under docs/ to be linked from another
// page: a page nobody links to is a page nobody finds.
func (r *Repo) CheckLinked() []Problem {
	linked := map[string]bool{}
	for _, p := range r.Pages {
		for _, l := range p.links {
			file, _, _ := strings.Cut(l.text, "#")
			if file == "" || strings.Contains(file, ":") {
				continue
			}
			t := path.Clean(path.Join(path.Dir(p.path), file))
			if t != p.path {
				linked[t] = true
				linked[path.Join(t, "README.md")] = true // GitHub shows a directory's README
			}
		}
	}
	var out []Problem
	for _, p := range r.sortedPages() {
		if strings.HasPrefix(p.path, "docs/") && !linked[p.path] {
			out = append(out, Problem{p.path, 1, "no other page links to this page"})
		}
	}
	return out
}

// command is one simple command found in a page: in a fenced sh, bash or
// console block, or in a code span.
type command struct {
	args   []string
	line   int
	fenced bool
}

var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "shell-session": true}

// commands parses the page's shell: whole sh/bash blocks, the "$ " lines
// of console blocks (the rest is output), and code spans that parse as
// shell. A block that does not parse is a problem; a span that does not is
// just not a command.
func (p *page) commands() ([]command, []Problem) {
	var cmds []command
	var probs []Problem
	for _, b := range p.blocks {
		if !shellLangs[b.lang] {
			continue
		}
		if b.lang == "console" || b.lang == "shell-session" {
			for _, c := range consoleCommands(b) {
				got, err := parseShell(c.text, c.line, true)
				if err != nil {
					probs = append(probs, Problem{p.path, c.line, fmt.Sprintf("command does not parse as shell: %v", err)})
				}
				cmds = append(cmds, got...)
			}
			continue
		}
		got, err := parseShell(b.text, b.line, true)
		if err != nil {
			probs = append(probs, Problem{p.path, b.line, fmt.Sprintf("%s block does not parse as shell: %v", b.lang, err)})
		}
		cmds = append(cmds, got...)
	}
	for _, s := range p.spans {
		t := strings.TrimPrefix(strings.TrimSpace(s.text), "$ ")
		// Usage notation in prose: [--wait] marks an optional flag.
		t = strings.NewReplacer("[", " ", "]", " ").Replace(t)
		got, err := parseShell(t, s.line, false)
		if err != nil {
			continue
		}
		for _, c := range got {
			// A span of one word (`orion`, `make`) names the program, not
			// a command line.
			if len(c.args) > 1 {
				cmds = append(cmds, c)
			}
		}
	}
	return cmds, probs
}

// consoleCommands joins each "$ " line of a console block with the lines it
// continues onto (a trailing backslash).
func consoleCommands(b codeBlock) []ref {
	var out []ref
	lines := strings.Split(b.text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "$ ") {
			continue
		}
		start := b.line + i
		cmd := strings.TrimPrefix(l, "$ ")
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd = cmd + "\n" + lines[i]
		}
		out = append(out, ref{cmd, start})
	}
	return out
}

func parseShell(src string, line int, fenced bool) ([]command, error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		return nil, err
	}
	var out []command
	syntax.Walk(f, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		c := command{line: line + int(call.Pos().Line()) - 1, fenced: fenced}
		for _, w := range call.Args {
			c.args = append(c.args, wordString(w))
		}
		out = append(out, c)
		return true
	})
	return out, nil
}

// wordString is a word with its quotes removed; an expansion stays as "$…",
// which names neither a flag nor a path.
func wordString(w *syntax.Word) string {
	var b strings.Builder
	var parts func([]syntax.WordPart)
	parts = func(ps []syntax.WordPart) {
		for _, p := range ps {
			switch p := p.(type) {
			case *syntax.Lit:
				b.WriteString(p.Value)
			case *syntax.SglQuoted:
				b.WriteString(p.Value)
			case *syntax.DblQuoted:
				parts(p.Parts)
			default:
				b.WriteString("$…")
			}
		}
	}
	parts(w.Parts)
	return b.String()
}

// isOrion tells whether a command runs the orion binary: orion on the PATH,
// or bin/orion as built.
func isOrion(prog string) bool { return prog == "orion" || strings.HasSuffix(prog, "bin/orion") }

// CheckCommands runs every orion command line through the CLI's cobra tree
// (command path, flags, and in code blocks the number of arguments) and
// every make command through the Makefile's targets.
func (r *Repo) CheckCommands() []Problem {
	var out []Problem
	for _, p := range r.sortedPages() {
		cmds, probs := p.commands()
		out = append(out, probs...)
		for _, c := range cmds {
			var msg string
			switch {
			case isOrion(c.args[0]):
				msg = checkOrion(r.NewCLI(), c.args[1:], c.fenced)
			case c.args[0] == "make":
				msg = r.checkMake(c.args[1:])
			}
			if msg != "" {
				out = append(out, Problem{p.path, c.line, fmt.Sprintf("`%s`: %s", strings.Join(c.args, " "), msg)})
			}
		}
	}
	return out
}

func (r *Repo) checkMake(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-C" || a == "-f" || a == "-j":
			i++
		case strings.HasPrefix(a, "-"), strings.Contains(a, "="):
		case !r.targets[a]:
			return fmt.Sprintf("the Makefile has no target %q", a)
		}
	}
	return ""
}

// checkOrion walks args down root's tree as cobra would: subcommand names
// (or aliases) first, then flags of the command reached (its own and those
// it inherits) and its arguments. Placeholders such as DAG/TASK are
// arguments like any other.
func checkOrion(root *cobra.Command, args []string, countArgs bool) string {
	cmd := root
	prepare(cmd)
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			var f *pflag.Flag
			var name string
			hasValue := false
			if strings.HasPrefix(a, "--") {
				name, _, hasValue = strings.Cut(a[2:], "=")
				f = cmd.Flags().Lookup(name)
				name = "--" + name
			} else {
				name = a[:2]
				f = cmd.Flags().ShorthandLookup(a[1:2])
				hasValue = len(a) > 2
			}
			if f == nil {
				return fmt.Sprintf("%q has no flag %s", cmd.CommandPath(), name)
			}
			if !hasValue && f.NoOptDefVal == "" {
				i++ // the flag's value
			}
			continue
		}
		if len(positional) == 0 {
			if sub := subcommand(cmd, a); sub != nil {
				cmd = sub
				prepare(cmd)
				continue
			}
			if cmd.HasSubCommands() && !cmd.Runnable() {
				return fmt.Sprintf("%q has no subcommand %q", cmd.CommandPath(), a)
			}
		}
		positional = append(positional, a)
	}
	if cmd.HasSubCommands() && !cmd.Runnable() {
		return fmt.Sprintf("%q needs a subcommand", cmd.CommandPath())
	}
	if countArgs {
		if err := cmd.ValidateArgs(positional); err != nil {
			return fmt.Sprintf("%q: %v", cmd.CommandPath(), err)
		}
	}
	return ""
}

func prepare(cmd *cobra.Command) {
	cmd.InitDefaultHelpFlag()
	cmd.InheritedFlags() // merges the parents' persistent flags into Flags()
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// repoPath reports whether a word names a path inside the repository: it
// starts with a top-level entry git tracks (test/, charts/, internal/, ...)
// and is not build output.
func (r *Repo) repoPath(w string) (string, bool) {
	w = strings.TrimRight(w, ",;:)")
	w = strings.TrimPrefix(w, "./")
	w = strings.TrimSuffix(w, "/...") // a Go package pattern: the directory
	if w == "" || strings.HasPrefix(w, "/") || strings.ContainsAny(w, "$<>{}=`'\"") || strings.Contains(w, "://") {
		return "", false
	}
	first, _, nested := strings.Cut(w, "/")
	if !r.top[first] || (!nested && !strings.Contains(first, ".") && first != "Makefile") {
		// A bare word such as "test" or "internal" is prose; a bare
		// file name such as go.mod or Makefile is a path.
		return "", false
	}
	if r.isIgnored(strings.TrimSuffix(w, "/")) {
		return "", false
	}
	return w, true
}

// CheckPaths requires every repository path in a code span, a command of a
// code block or a link to exist (a glob to match something).
func (r *Repo) CheckPaths() []Problem {
	var out []Problem
	check := func(p *page, line int, w string) {
		rel, ok := r.repoPath(w)
		if !ok {
			return
		}
		full := filepath.Join(r.Root, filepath.FromSlash(rel))
		if strings.ContainsAny(rel, "*?[") {
			if m, _ := filepath.Glob(full); len(m) == 0 {
				out = append(out, Problem{p.path, line, fmt.Sprintf("no file matches %s", rel)})
			}
			return
		}
		if _, err := os.Stat(full); err != nil {
			out = append(out, Problem{p.path, line, fmt.Sprintf("no file %s", rel)})
		}
	}
	for _, p := range r.sortedPages() {
		for _, s := range p.spans {
			for _, w := range strings.Fields(s.text) {
				check(p, s.line, w)
			}
		}
		cmds, _ := p.commands()
		for _, c := range cmds {
			if !c.fenced {
				continue // its words are a span's, checked above
			}
			for _, w := range c.args {
				check(p, c.line, w)
			}
		}
	}
	return out
}

var (
	testName   = regexp.MustCompile(`^(Test|Fuzz|Benchmark)[A-Z]\w*$`)
	metricName = regexp.MustCompile(`^(orion_[a-z0-9_]+)(\{[^}]*\})?$`)
)

// CheckNames requires every test a page names (TestX in a code span) to be
// a test function of the repository, and every metric (orion_x) to be
// registered by Orion's code under that name.
func (r *Repo) CheckNames() []Problem {
	var out []Problem
	for _, p := range r.sortedPages() {
		for _, s := range p.spans {
			t := strings.TrimSpace(s.text)
			if testName.MatchString(t) && !r.tests[t] {
				out = append(out, Problem{p.path, s.line, fmt.Sprintf("no test function %s in the repository", t)})
			}
			if m := metricName.FindStringSubmatch(t); m != nil && !strings.Contains(r.source, `"`+m[1]+`"`) {
				out = append(out, Problem{p.path, s.line, fmt.Sprintf("no metric %s in internal/ or cmd/", m[1])})
			}
		}
	}
	return out
}

// CheckREADME holds the README to what a newcomer reads: the two commands
// for a fresh machine on the first screen, and a page short enough to
// finish.
func CheckREADME(p *page, maxLines, firstScreen int) []Problem {
	var out []Problem
	if p.lines >= maxLines {
		out = append(out, Problem{p.path, p.lines, fmt.Sprintf("%d lines: keep the README under %d, and move detail into docs/", p.lines, maxLines)})
	}
	head := strings.Join(strings.SplitN(string(p.src), "\n", firstScreen+1)[:min(firstScreen, p.lines)], "\n")
	for _, want := range []string{"make run", "make test"} {
		if !strings.Contains(head, want) {
			out = append(out, Problem{p.path, 1, fmt.Sprintf("%q is not in the first %d lines", want, firstScreen)})
		}
	}
	return out
}
