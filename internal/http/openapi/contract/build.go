// Package contract builds the OpenAPI 3.1 document of Orion's HTTP API
// (internal/http/openapi/openapi.json) from the Go wire types and the route
// table in routes.go, and its tests hold the server to it: the document is
// what Build makes of the types (`make openapi` rewrites it), every route
// the server's mux serves is described and every described route is
// served, every error code of apitypes is named, and real answers of a
// real server validate against the document.
//
// It is used by tests only: the server embeds the generated file
// (package openapi) and links none of this.
package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/kube/podspec"
	"github.com/orion-sched/orion/internal/model"
)

// rawObjects are the json.RawMessage fields that hold an object of known
// fields, by "package.Type.Field".
var rawObjects = map[string]RawObject{
	"model.Task.Pod": {Name: "PodTaskSpec", Type: reflect.TypeFor[podspec.Spec](),
		Doc: "A pod task's pod (docs/dag-file.md#pod-tasks): a Kubernetes container's and pod's fields, " +
			"spelled as in a Pod manifest, in one object; nested objects are Kubernetes' own (core/v1)."},
}

// Build returns the document, reading comments and enums through src.
func Build(src *Source) (*openapi3.T, error) {
	sp, err := specials(src)
	if err != nil {
		return nil, err
	}
	g := newSchemas(src, sp)
	doc := &openapi3.T{
		OpenAPI: "3.1.0",
		Info: &openapi3.Info{
			Title:       "Orion",
			Version:     "v1",
			Description: description,
			License:     &openapi3.License{Name: "see the repository"},
		},
		Tags: openapi3.Tags{
			{Name: "dags", Description: "submit, read, cancel, retry and delete DAGs"},
			{Name: "schedules", Description: "cron schedules of DAGs (docs/schedules.md)"},
			{Name: "cluster", Description: "replicas, leader, workers, etcd"},
			{Name: "events", Description: "the live event stream"},
			{Name: "demo", Description: "demo mode's crash and recover controls (orion server --demo)"},
			{Name: "meta", Description: "this document"},
			{Name: "probes", Description: "liveness, readiness, Prometheus metrics"},
			{Name: "seed", Description: "the seed project's API (OrionScheduler), kept compatible: its flat error shape"},
		},
		Paths: openapi3.NewPaths(),
		Components: &openapi3.Components{
			Schemas:   g.comps,
			Responses: g.responses,
			SecuritySchemes: openapi3.SecuritySchemes{
				"bearer": &openapi3.SecuritySchemeRef{Value: &openapi3.SecurityScheme{
					Type: "http", Scheme: "bearer",
					Description: "the server's api_token, when it has one (docs/security.md); without one, no token is asked",
				}},
			},
		},
		// The token is asked only by a server that has one.
		Security: openapi3.SecurityRequirements{{"bearer": []string{}}, {}},
	}
	for _, v := range Extra {
		if _, err := g.ref(reflect.TypeOf(v), output); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	for i := range Routes {
		r := &Routes[i]
		key := r.Method + " " + r.Path
		if seen[key] || seen[r.ID] {
			return nil, fmt.Errorf("%s (%s) is described twice", key, r.ID)
		}
		seen[key], seen[r.ID] = true, true
		op, err := g.operation(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		item := doc.Paths.Value(r.Path)
		if item == nil {
			item = &openapi3.PathItem{}
			doc.Paths.Set(r.Path, item)
		}
		item.SetOperation(r.Method, op)
	}
	return doc, nil
}

// JSON is the document as committed: indented, keys sorted, a final newline.
func JSON(doc *openapi3.T) ([]byte, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

const description = `Orion's HTTP API: submit DAGs of tasks, follow them, and operate the cluster. Any replica answers;
writes on a standby are forwarded to the leader. See docs/api.md.

**Errors.** Every error of /api/v1 is ` + "`" + `{"error": {"code", "message", "details"}}` + "`" + ` (ErrorBody), with
a code from ErrorCode; each response lists the codes it may carry. The seed-compatible routes (tag
seed) answer their own errors in the seed's flat shape ` + "`" + `{"error": "message", "code"}` + "`" + ` (SeedErrorBody).
Every route may answer 421 host_not_allowed (a Host outside the allow-list) and 500 internal; all but
the probes 401 unauthorized (when the server has a token) and 429 rate_limited (a client beyond
loopback over its rate); writes 403 cross_origin (a browser write from another origin). A path no
route serves answers 404 not_found, a method a path does not serve 405 method_not_allowed.

**Revisions.** Reads carry the etcd revision they reflect; a write answers with ` + "`X-Orion-Revision`" + `,
the revision the answering replica had applied, the write included: read-your-writes through any
replica. 429, 503 and 507 carry Retry-After.

**Status spellings.** TaskStatus and DAGStatus may grow: a client should show a status it does not
know rather than fail.`

// headerDocs describes the response headers routes name.
var headerDocs = map[string]*openapi3.Schema{
	hdrRevision:   {Type: types("integer"), Description: "the etcd revision the answering replica had applied, this write included"},
	hdrLocation:   {Type: types("string"), Description: "the path of what the request created or named"},
	"ETag":        {Type: types("string"), Description: "the document's version"},
	"Retry-After": {Type: types("integer"), Description: "seconds to wait before trying again"},
}

func (g *schemas) operation(r *Route) (*openapi3.Operation, error) {
	op := &openapi3.Operation{
		OperationID: r.ID, Summary: r.Summary, Description: r.Description, Tags: []string{r.Tag},
		Responses: openapi3.NewResponses(),
	}
	if r.Open {
		op.Security = &openapi3.SecurityRequirements{}
	}
	for _, p := range r.Params {
		s, err := g.ref(reflect.TypeOf(p.Type), output)
		if err != nil {
			return nil, err
		}
		op.Parameters = append(op.Parameters, &openapi3.ParameterRef{Value: &openapi3.Parameter{
			Name: p.Name, In: p.In, Required: p.Required, Description: p.Description, Schema: s,
		}})
	}
	if b := r.Body; b != nil {
		s, err := g.ref(reflect.TypeOf(b.Type), input)
		if err != nil {
			return nil, err
		}
		content := openapi3.Content{}
		for _, m := range b.Media {
			content[m] = &openapi3.MediaType{Schema: s}
		}
		op.RequestBody = &openapi3.RequestBodyRef{Value: &openapi3.RequestBody{
			Required: true, Description: b.Description, Content: content,
		}}
	}
	replied := map[int]bool{}
	for _, rep := range r.Replies {
		if rep.Status < 100 || replied[rep.Status] {
			return nil, fmt.Errorf("reply status %d twice or invalid", rep.Status)
		}
		replied[rep.Status] = true
		resp := &openapi3.Response{Description: &rep.Description, Headers: headers(rep.Status, rep.Headers)}
		switch {
		case rep.Type != nil:
			s, err := g.ref(reflect.TypeOf(rep.Type), output)
			if err != nil {
				return nil, err
			}
			resp.Content = openapi3.Content{rep.Media: &openapi3.MediaType{Schema: s}}
		case rep.Media == "application/json": // this document
			resp.Content = openapi3.Content{rep.Media: &openapi3.MediaType{Schema: inline("object", "")}}
		case rep.Media != "":
			resp.Content = openapi3.Content{rep.Media: &openapi3.MediaType{Schema: inline("string", "")}}
		}
		op.Responses.Set(strconv.Itoa(rep.Status), &openapi3.ResponseRef{Value: resp})
	}
	own := codesByStatus(r.Errors)
	mw := codesByStatus(middleware(r))
	statuses := map[int]bool{}
	for s := range own {
		statuses[s] = true
	}
	for s := range mw {
		statuses[s] = true
	}
	for _, status := range sortedKeys(statuses) {
		if replied[status] {
			return nil, fmt.Errorf("status %d is both a reply and an error", status)
		}
		api, seed := mw[status], []apitypes.Code(nil)
		if r.Shape == Seed {
			seed = own[status]
		} else {
			api = union(api, own[status])
		}
		ref, err := g.errorResponse(status, api, seed)
		if err != nil {
			return nil, err
		}
		op.Responses.Set(strconv.Itoa(status), ref)
	}
	return op, nil
}

// errorResponse is an error answer whose code is one of api (in the API's
// shape) or of seed (in the seed's): a response component named after its
// codes, shared by every route that answers them.
func (g *schemas) errorResponse(status int, api, seed []apitypes.Code) (*openapi3.ResponseRef, error) {
	var (
		variants openapi3.SchemaRefs
		names    []string
	)
	if len(api) > 0 {
		variants = append(variants, narrowed("ErrorBody", codeAt(true), api))
		names = append(names, pascal(api, ""))
	}
	if len(seed) > 0 {
		variants = append(variants, narrowed("SeedErrorBody", codeAt(false), seed))
		names = append(names, pascal(seed, "Seed"))
	}
	name := strings.Join(names, "_")
	if prev, ok := g.errStatus[name]; ok {
		if prev != status {
			return nil, fmt.Errorf("the codes of response %s come with status %d and %d", name, prev, status)
		}
		return &openapi3.ResponseRef{Ref: "#/components/responses/" + name}, nil
	}
	s := variants[0]
	if len(variants) > 1 {
		s = openapi3.NewSchemaRef("", &openapi3.Schema{OneOf: variants})
	}
	desc := strconv.Itoa(status) + " " + http.StatusText(status) + ": " + strings.Join(quoted(union(api, seed)), ", ")
	g.errStatus[name] = status
	g.responses[name] = &openapi3.ResponseRef{Value: &openapi3.Response{
		Description: &desc, Headers: headers(status, nil),
		Content: openapi3.Content{"application/json": &openapi3.MediaType{Schema: s}},
	}}
	return &openapi3.ResponseRef{Ref: "#/components/responses/" + name}, nil
}

// pascal names a set of codes: rate_limited, not_found → NotFoundOrRateLimited.
func pascal(codes []apitypes.Code, prefix string) string {
	parts := make([]string, len(codes))
	for i, c := range codes {
		var b strings.Builder
		for _, w := range strings.Split(string(c), "_") {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
		parts[i] = b.String()
	}
	return prefix + strings.Join(parts, "Or")
}

// codeAt builds the object that holds the code: error.code in the API's
// shape, code in the seed's.
func codeAt(nested bool) func(*openapi3.Schema) *openapi3.Schema {
	return func(code *openapi3.Schema) *openapi3.Schema {
		s := &openapi3.Schema{Type: types("object"), Properties: openapi3.Schemas{"code": openapi3.NewSchemaRef("", code)}}
		if !nested {
			return s
		}
		return &openapi3.Schema{Type: types("object"), Properties: openapi3.Schemas{"error": openapi3.NewSchemaRef("", s)}}
	}
}

// narrowed is an error body whose code is one of codes.
func narrowed(component string, wrap func(*openapi3.Schema) *openapi3.Schema, codes []apitypes.Code) *openapi3.SchemaRef {
	enum := make([]any, len(codes))
	for i, c := range codes {
		enum[i] = string(c)
	}
	return openapi3.NewSchemaRef("", &openapi3.Schema{AllOf: openapi3.SchemaRefs{
		ref(component),
		openapi3.NewSchemaRef("", wrap(&openapi3.Schema{Type: types("string"), Enum: enum})),
	}})
}

func headers(status int, names []string) openapi3.Headers {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == http.StatusInsufficientStorage {
		names = append(slices.Clone(names), "Retry-After")
	}
	if len(names) == 0 {
		return nil
	}
	out := openapi3.Headers{}
	for _, n := range names {
		s := headerDocs[n]
		out[n] = &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
			Description: s.Description, Schema: openapi3.NewSchemaRef("", &openapi3.Schema{Type: s.Type}),
		}}}
	}
	return out
}

func codesByStatus(fs []Failure) map[int][]apitypes.Code {
	out := map[int][]apitypes.Code{}
	for _, f := range fs {
		out[f.Status] = union(out[f.Status], f.Codes)
	}
	return out
}

func union(a, b []apitypes.Code) []apitypes.Code {
	out := slices.Clone(a)
	for _, c := range b {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

func quoted(cs []apitypes.Code) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = "`" + string(c) + "`"
	}
	return out
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// specials are the named types whose JSON their Go kind does not tell:
// enums (from their constants in the source) and custom marshallers.
func specials(src *Source) (map[reflect.Type]Special, error) {
	enum := func(values []EnumValue, doc string) func() (*openapi3.Schema, error) {
		return func() (*openapi3.Schema, error) {
			s := &openapi3.Schema{Type: types("string"), Description: doc}
			var lines []string
			for _, v := range values {
				s.Enum = append(s.Enum, v.Value)
				line := "- `" + v.Value + "`"
				if v.Doc != "" {
					line += ": " + v.Doc
				}
				lines = append(lines, line)
			}
			if slices.ContainsFunc(values, func(v EnumValue) bool { return v.Doc != "" }) {
				s.Description = strings.TrimSpace(s.Description + "\n\n" + strings.Join(lines, "\n"))
			}
			return s, nil
		}
	}
	fromSource := func(t reflect.Type) ([]EnumValue, error) { return src.Enum(t.PkgPath(), t.Name()) }

	var taskStatuses []EnumValue
	for i := range 256 {
		b, err := core.Status(i).MarshalText()
		if err != nil {
			break
		}
		taskStatuses = append(taskStatuses, EnumValue{Value: string(b)})
	}
	codeT, dagT, kindT := reflect.TypeFor[apitypes.Code](), reflect.TypeFor[core.DAGStatus](), reflect.TypeFor[model.Kind]()
	codes, err := fromSource(codeT)
	if err != nil {
		return nil, err
	}
	dagStatuses, err := fromSource(dagT)
	if err != nil {
		return nil, err
	}
	kinds, err := fromSource(kindT)
	if err != nil {
		return nil, err
	}
	ruleT := reflect.TypeFor[model.TriggerRule]()
	rules, err := fromSource(ruleT)
	if err != nil {
		return nil, err
	}
	return map[reflect.Type]Special{
		codeT: {Name: "ErrorCode", Output: enum(codes, "An error's machine-readable code: stable for clients to switch on.")},
		dagT:  {Name: "DAGStatus", Output: enum(dagStatuses, "A DAG's status: running until it ends in one of the others.")},
		reflect.TypeFor[core.Status](): {Name: "TaskStatus", Output: enum(taskStatuses,
			"A task's status (docs/architecture.md#the-core): pending waits on dependencies, ready is queued, "+
				"retrying waits for its backoff; succeeded, failed, upstream_failed, skipped and cancelled are final until a retry.")},
		ruleT: {Name: "TriggerRule", Output: enum(rules, "Which outcomes of a task's dependencies let it run (docs/dag-file.md#trigger-rules-and-conditions)."),
			Input: enum(rules, "Which outcomes of a task's dependencies let it run (case and surrounding spaces are ignored; absent: all_success).")},
		kindT: {Name: "TaskKind", Output: enum(kinds, "What a task runs."),
			Input: enum(kinds, "What a task runs (case and surrounding spaces are ignored; absent: shell with a command, noop otherwise).")},
		reflect.TypeFor[model.Duration](): {
			Name: "Duration",
			Output: func() (*openapi3.Schema, error) {
				return &openapi3.Schema{Type: types("string"), Description: `A duration in Go syntax: "30s", "1m30s", "1h".`}, nil
			},
			Input: func() (*openapi3.Schema, error) {
				return &openapi3.Schema{Type: types("string", "number"),
					Description: `A duration: Go syntax ("30s", "1m30s") or a number of seconds.`}, nil
			},
		},
		reflect.TypeFor[model.Params](): {
			Name: "Params",
			Output: func() (*openapi3.Schema, error) {
				return &openapi3.Schema{Type: types("object"), AdditionalProperties: openapi3.AdditionalProperties{Schema: openapi3.NewSchemaRef("", &openapi3.Schema{})},
					Description: "A DAG's parameters: name → JSON value (null: required, no default). Templates read them as params.NAME."}, nil
			},
		},
		reflect.TypeFor[model.ForEach](): {
			Name: "ForEach",
			Output: func() (*openapi3.Schema, error) {
				return &openapi3.Schema{Type: types("array", "string"), Items: openapi3.NewSchemaRef("", &openapi3.Schema{}),
					Description: "A map group's items: a JSON array, or a string holding one {{ expression }} that yields an array " +
						"(a param, an upstream task's output); one instance runs per item."}, nil
			},
		},
		reflect.TypeFor[model.Probability](): {
			Name: "Probability",
			Output: func() (*openapi3.Schema, error) {
				return &openapi3.Schema{Type: types("number"), Description: "A probability between 0 and 1."}, nil
			},
			Input: func() (*openapi3.Schema, error) {
				return &openapi3.Schema{Type: types("number", "boolean"),
					Description: "A probability between 0 and 1; true means 1, false 0."}, nil
			},
		},
	}, nil
}
