package contract

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// module is the Go module whose packages the source reader maps to folders.
const module = "github.com/orion-sched/orion/"

// Root returns the repository's root folder: the contract is built from
// the source tree (the comments of the wire types and the constants of
// their enums), which reflection cannot see.
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("contract: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// EnumValue is one constant of a string enum, with its comment.
type EnumValue struct {
	Value, Doc string
}

// pkgSource is what the generator reads from one package's Go files (tests
// excluded): the doc comments of its types and their fields, and its
// string constants by type.
type pkgSource struct {
	typeDocs  map[string]string            // type name → doc
	fieldDocs map[string]string            // "Type.Field" → doc
	consts    map[string][]EnumValue       // type name → constants, in source order
	errs      map[string]error             // type name → why its constants are not an enum
	seen      map[string]map[string]string // type name → value → constant (duplicates)
}

// Source reads Go packages of the module, each once.
type Source struct {
	root string
	mu   sync.Mutex
	pkgs map[string]*pkgSource
}

// NewSource reads packages under root (the repository).
func NewSource(root string) *Source { return &Source{root: root, pkgs: map[string]*pkgSource{}} }

func (s *Source) pkg(path string) (*pkgSource, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pkgs[path]; ok {
		return p, nil
	}
	rel, ok := strings.CutPrefix(path, module)
	if !ok {
		return nil, fmt.Errorf("package %s is not in %s", path, module)
	}
	files, err := filepath.Glob(filepath.Join(s.root, filepath.FromSlash(rel), "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	p := &pkgSource{typeDocs: map[string]string{}, fieldDocs: map[string]string{}, consts: map[string][]EnumValue{},
		errs: map[string]error{}, seen: map[string]map[string]string{}}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			switch gd.Tok {
			case token.TYPE:
				p.readTypes(gd)
			case token.CONST:
				p.readConsts(gd)
			}
		}
	}
	s.pkgs[path] = p
	return p, nil
}

func (p *pkgSource) readTypes(gd *ast.GenDecl) {
	for _, spec := range gd.Specs {
		ts := spec.(*ast.TypeSpec)
		doc := ts.Doc
		if doc == nil && len(gd.Specs) == 1 {
			doc = gd.Doc
		}
		p.typeDocs[ts.Name.Name] = clean(doc, nil)
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, f := range st.Fields.List {
			for _, n := range f.Names {
				p.fieldDocs[ts.Name.Name+"."+n.Name] = clean(f.Doc, f.Comment)
			}
		}
	}
}

// readConsts collects the constants declared with an explicit named type
// and a string literal value: the enums of the wire (a constant of such a
// type in any other form is reported when the enum is asked for).
func (p *pkgSource) readConsts(gd *ast.GenDecl) {
	for _, spec := range gd.Specs {
		vs := spec.(*ast.ValueSpec)
		id, ok := vs.Type.(*ast.Ident)
		if !ok {
			continue
		}
		for i, n := range vs.Names {
			if i >= len(vs.Values) {
				p.errs[id.Name] = fmt.Errorf("constant %s of type %s has no value of its own", n.Name, id.Name)
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				p.errs[id.Name] = fmt.Errorf("constant %s of type %s is not a string literal", n.Name, id.Name)
				continue
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				p.errs[id.Name] = err
				continue
			}
			if p.seen[id.Name] == nil {
				p.seen[id.Name] = map[string]string{}
			}
			if _, dup := p.seen[id.Name][v]; dup {
				continue // two names for one value: one enum value
			}
			p.seen[id.Name][v] = n.Name
			p.consts[id.Name] = append(p.consts[id.Name], EnumValue{Value: v, Doc: clean(vs.Doc, vs.Comment)})
		}
	}
}

// Enum returns the string constants of type name in package path, in
// source order.
func (s *Source) Enum(path, name string) ([]EnumValue, error) {
	p, err := s.pkg(path)
	if err != nil {
		return nil, err
	}
	if err := p.errs[name]; err != nil {
		return nil, fmt.Errorf("%s.%s: %w", path, name, err)
	}
	if len(p.consts[name]) == 0 {
		return nil, fmt.Errorf("%s.%s: no string constants", path, name)
	}
	return p.consts[name], nil
}

// TypeDoc returns the doc comment of a type ("" if none).
func (s *Source) TypeDoc(path, name string) string {
	p, err := s.pkg(path)
	if err != nil {
		return ""
	}
	return p.typeDocs[name]
}

// FieldDoc returns the doc (or line) comment of a struct field ("" if none).
func (s *Source) FieldDoc(path, typeName, field string) string {
	p, err := s.pkg(path)
	if err != nil {
		return ""
	}
	return p.fieldDocs[typeName+"."+field]
}

// clean joins comment groups into one paragraph of prose: Go comment
// markers gone, lines joined, indented blocks (code, lists) kept as lines.
func clean(groups ...*ast.CommentGroup) string {
	var parts []string
	for _, g := range groups {
		if g == nil {
			continue
		}
		if t := strings.TrimSpace(g.Text()); t != "" {
			parts = append(parts, t)
		}
	}
	text := strings.Join(parts, " ")
	var b strings.Builder
	for i, line := range strings.Split(text, "\n") {
		switch {
		case i == 0:
		case strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") || line == "":
			b.WriteString("\n")
		default:
			b.WriteString(" ")
		}
		b.WriteString(line)
	}
	return strings.TrimSpace(b.String())
}
