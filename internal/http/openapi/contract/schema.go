package contract

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/orion-sched/orion/internal/model"
)

// mode says which side of the wire a schema describes. The server answers
// normalized values (every field without omitempty is present); a client
// sends what it likes and the server fills defaults, so an input schema
// requires nothing and reads the looser forms the decoders accept.
type mode int

const (
	output mode = iota
	input
)

// Special is how the generator writes a named Go type whose JSON is not
// what its kind says (a custom marshaller, an enum): a component of that
// name, per mode.
type Special struct {
	Name   string
	Output func() (*openapi3.Schema, error)
	Input  func() (*openapi3.Schema, error) // nil: as Output
}

// schemas turns Go types into the document's component schemas, following
// encoding/json: exported fields, json tags, embedded structs flattened,
// omitempty fields optional, pointers without omitempty nullable.
type schemas struct {
	src     *Source
	special map[reflect.Type]Special
	names   map[string]reflect.Type // component name → its type (collisions are errors)
	comps   openapi3.Schemas

	responses openapi3.ResponseBodies // error answers, by the codes they carry
	errStatus map[string]int          // response name → its status
}

func newSchemas(src *Source, special map[reflect.Type]Special) *schemas {
	return &schemas{src: src, special: special, names: map[string]reflect.Type{}, comps: openapi3.Schemas{},
		responses: openapi3.ResponseBodies{}, errStatus: map[string]int{}}
}

var (
	timeType        = reflect.TypeFor[time.Time]()
	rawType         = reflect.TypeFor[json.RawMessage]()
	marshalerType   = reflect.TypeFor[json.Marshaler]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
)

// typeParams matches the sentences of a doc comment about type parameters
// ("S is the type of its status (see the package comment).").
var typeParams = regexp.MustCompile(`\s*[A-Z] is the type of [^.]*\.`)

func ref(name string) *openapi3.SchemaRef {
	return openapi3.NewSchemaRef("#/components/schemas/"+name, nil)
}

func types(ts ...string) *openapi3.Types { t := openapi3.Types(ts); return &t }

// componentName names a named type: generic instantiations by their
// generic name (one instantiation per document); the DAG and task as
// submitted, the seed API's and the event stream's types apart from the
// API's views of the same names.
func componentName(t reflect.Type, m mode) string {
	name, _, _ := strings.Cut(t.Name(), "[")
	switch {
	case t == reflect.TypeFor[model.DAG]() || t == reflect.TypeFor[model.Task]():
		name += "Spec" // as submitted; the API's DAG and Task are the live views
	case strings.HasSuffix(t.PkgPath(), "/seedapi"):
		name = "Seed" + name
	case strings.HasSuffix(t.PkgPath(), "/events") && !strings.HasPrefix(name, "Event"):
		name = "Event" + name
	}
	if m == input {
		name += "Input"
	}
	return name
}

// ref returns the schema of t in mode m: a $ref to a component for named
// structs and special types, inline otherwise.
func (g *schemas) ref(t reflect.Type, m mode) (*openapi3.SchemaRef, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if sp, ok := g.special[t]; ok {
		name := sp.Name
		build := sp.Output
		if m == input && sp.Input != nil {
			name, build = sp.Name+"Input", sp.Input
		}
		if err := g.component(name, t, func() (*openapi3.Schema, error) { return build() }); err != nil {
			return nil, err
		}
		return ref(name), nil
	}
	switch {
	case t == timeType:
		return openapi3.NewSchemaRef("", &openapi3.Schema{Type: types("string"), Format: "date-time"}), nil
	case t == rawType:
		return openapi3.NewSchemaRef("", &openapi3.Schema{Description: "any JSON value"}), nil
	case t.Implements(marshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(textMarshaler):
		return nil, fmt.Errorf("%s has its own JSON form: describe it in the contract's special types", t)
	}
	switch t.Kind() {
	case reflect.Bool:
		return inline("boolean", ""), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return inline("integer", ""), nil
	case reflect.Int64, reflect.Uint64:
		return inline("integer", "int64"), nil
	case reflect.Float32, reflect.Float64:
		return inline("number", ""), nil
	case reflect.String:
		return inline("string", ""), nil
	case reflect.Interface:
		return openapi3.NewSchemaRef("", &openapi3.Schema{}), nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return inline("string", "byte"), nil
		}
		items, err := g.ref(t.Elem(), m)
		if err != nil {
			return nil, err
		}
		return openapi3.NewSchemaRef("", &openapi3.Schema{Type: types("array"), Items: items}), nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: map keys must be strings", t)
		}
		vals, err := g.ref(t.Elem(), m)
		if err != nil {
			return nil, err
		}
		return openapi3.NewSchemaRef("", &openapi3.Schema{Type: types("object"),
			AdditionalProperties: openapi3.AdditionalProperties{Schema: vals}}), nil
	case reflect.Struct:
		if t.Name() == "" {
			s, err := g.object(t, m)
			if err != nil {
				return nil, err
			}
			return openapi3.NewSchemaRef("", s), nil
		}
		name := componentName(t, m)
		if err := g.component(name, t, func() (*openapi3.Schema, error) { return g.object(t, m) }); err != nil {
			return nil, err
		}
		return ref(name), nil
	}
	return nil, fmt.Errorf("%s: no JSON schema for kind %s", t, t.Kind())
}

func inline(typ, format string) *openapi3.SchemaRef {
	return openapi3.NewSchemaRef("", &openapi3.Schema{Type: types(typ), Format: format})
}

// component builds the component name for t once; two Go types under one
// name are an error, not a silent overwrite.
func (g *schemas) component(name string, t reflect.Type, build func() (*openapi3.Schema, error)) error {
	if prev, ok := g.names[name]; ok {
		if prev != t {
			return fmt.Errorf("component %s would describe both %s and %s", name, prev, t)
		}
		return nil
	}
	g.names[name] = t // before building: a type that contains itself refers to its component
	s, err := build()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if s.Description == "" && t.Name() != "" {
		base, _, _ := strings.Cut(t.Name(), "[")
		// A generic type's doc explains its type parameters, which the
		// wire does not have.
		s.Description = typeParams.ReplaceAllString(g.src.TypeDoc(t.PkgPath(), base), "")
	}
	g.comps[name] = openapi3.NewSchemaRef("", s)
	return nil
}

// object is a struct's schema: its JSON fields in declaration order.
func (g *schemas) object(t reflect.Type, m mode) (*openapi3.Schema, error) {
	s := &openapi3.Schema{Type: types("object"), Properties: openapi3.Schemas{}}
	if err := g.fields(s, t, m); err != nil {
		return nil, err
	}
	if m == input {
		s.Required = nil
	}
	return s, nil
}

func (g *schemas) fields(s *openapi3.Schema, t reflect.Type, m mode) error {
	base, _, _ := strings.Cut(t.Name(), "[")
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := g.fields(s, ft, m); err != nil { // flattened, as encoding/json does
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !hasTag {
			return fmt.Errorf("%s.%s has no json tag: name its wire field", t, f.Name)
		}
		if strings.Contains(opts, "string") {
			return fmt.Errorf("%s.%s: the ,string option is not described", t, f.Name)
		}
		omitempty := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		fr, err := g.ref(f.Type, m)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t, f.Name, err)
		}
		if f.Type.Kind() == reflect.Pointer && !omitempty {
			fr = nullable(fr)
		}
		if doc := g.src.FieldDoc(t.PkgPath(), base, f.Name); doc != "" {
			fr = describe(fr, doc)
		}
		s.Properties[name] = fr
		if !omitempty {
			s.Required = append(s.Required, name)
		}
	}
	return nil
}

// nullable lets a schema be null too: a pointer field without omitempty.
func nullable(r *openapi3.SchemaRef) *openapi3.SchemaRef {
	if r.Ref != "" {
		return openapi3.NewSchemaRef("", &openapi3.Schema{AnyOf: openapi3.SchemaRefs{r, inline("null", "")}})
	}
	c := *r.Value
	if c.Type != nil {
		c.Type = types(append(c.Type.Slice(), "null")...)
	}
	return openapi3.NewSchemaRef("", &c)
}

// describe gives a field its doc comment. A $ref is wrapped in an allOf
// of one, so the description annotates the field, not the component.
func describe(r *openapi3.SchemaRef, doc string) *openapi3.SchemaRef {
	if r.Ref != "" {
		return openapi3.NewSchemaRef("", &openapi3.Schema{AllOf: openapi3.SchemaRefs{r}, Description: doc})
	}
	c := *r.Value
	c.Description = doc
	return openapi3.NewSchemaRef("", &c)
}
