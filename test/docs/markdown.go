// Package docs checks Orion's documentation against the repository: README.md
// and docs/**/*.md. Its test resolves every relative link and #anchor, runs
// every orion command line it finds through the CLI's own cobra tree, and
// checks every make target, repository path, test name and metric name the
// pages mention, so that a renamed flag or a moved file breaks `make test`
// instead of a reader.
package docs

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// page is one Markdown file, reduced to what the checks read.
type page struct {
	path     string // slash-separated, relative to the repository root
	lines    int
	src      []byte
	anchors  map[string]bool
	links    []ref
	blocks   []codeBlock
	spans    []ref // inline code spans: text is the span's content
	headings []string
}

// ref is a piece of a page with the line it starts on.
type ref struct {
	text string
	line int
}

type codeBlock struct {
	lang string
	text string
	line int // the line of the first line of content
}

var md = goldmark.New(goldmark.WithExtensions(extension.GFM))

// parsePage reads one Markdown file: headings (as GitHub anchors), links,
// fenced code blocks and code spans.
func parsePage(path string, src []byte) *page {
	p := &page{path: path, src: src, anchors: map[string]bool{}, lines: bytes.Count(src, []byte("\n"))}
	if len(src) > 0 && src[len(src)-1] != '\n' {
		p.lines++
	}
	seen := map[string]int{}
	doc := md.Parser().Parse(text.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			title := plainText(n, src)
			p.headings = append(p.headings, title)
			slug := Slug(title)
			// GitHub suffixes repeated headings: x, x-1, x-2, ...
			if k := seen[slug]; k > 0 {
				seen[slug]++
				slug = slug + "-" + strconv.Itoa(k)
			} else {
				seen[slug] = 1
			}
			p.anchors[slug] = true
		case *ast.Link:
			p.links = append(p.links, ref{string(n.Destination), p.lineOf(n)})
		case *ast.Image:
			p.links = append(p.links, ref{string(n.Destination), p.lineOf(n)})
		case *ast.FencedCodeBlock:
			var b strings.Builder
			lines := n.Lines()
			for i := 0; i < lines.Len(); i++ {
				seg := lines.At(i)
				b.Write(seg.Value(src))
			}
			line := p.lineOf(n)
			if lines.Len() > 0 {
				line = lineAt(src, lines.At(0).Start)
			}
			p.blocks = append(p.blocks, codeBlock{lang: string(n.Language(src)), text: b.String(), line: line})
			return ast.WalkSkipChildren, nil
		case *ast.CodeSpan:
			p.spans = append(p.spans, ref{plainText(n, src), p.lineOf(n)})
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return p
}

// plainText is a node's text as GitHub renders it: text and code spans,
// without the Markdown around them.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	var walk func(ast.Node)
	walk = func(n ast.Node) {
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			switch c := c.(type) {
			case *ast.Text:
				b.Write(c.Segment.Value(src))
				if c.SoftLineBreak() {
					b.WriteByte(' ')
				}
			case *ast.String:
				b.Write(c.Value)
			default:
				walk(c)
			}
		}
	}
	walk(n)
	return b.String()
}

// lineOf finds the line a node starts on: its first text segment, or the
// first line of the nearest block around it.
func (p *page) lineOf(n ast.Node) int {
	for c := n; c != nil; c = c.FirstChild() {
		if t, ok := c.(*ast.Text); ok {
			return lineAt(p.src, t.Segment.Start)
		}
	}
	for c := n; c != nil; c = c.Parent() {
		if c.Type() == ast.TypeBlock && c.Lines().Len() > 0 {
			return lineAt(p.src, c.Lines().At(0).Start)
		}
	}
	return 0
}

func lineAt(src []byte, off int) int {
	return bytes.Count(src[:off], []byte("\n")) + 1
}

// Slug is GitHub's anchor for a heading: lower case, spaces to '-', every
// other character but letters, digits, '-' and '_' dropped.
func Slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(title)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
