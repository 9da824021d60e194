package api

import (
	"reflect"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
)

// fill sets every field of the struct v points to (recursively, one level
// into structs) to a value that is not its zero value.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int32, reflect.Int64:
			f.SetInt(1)
		case reflect.Uint8:
			f.SetUint(1)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			if p.Elem().Kind() == reflect.Struct && p.Elem().Type() != reflect.TypeFor[time.Time]() {
				fill(t, p.Elem())
			} else if p.Elem().Type() == reflect.TypeFor[time.Time]() {
				p.Elem().Set(reflect.ValueOf(time.Unix(1, 0)))
			} else {
				fillScalar(p.Elem())
			}
			f.Set(p)
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 1, 1)
			if e := s.Index(0); e.Kind() == reflect.Struct {
				fill(t, e)
			} else {
				fillScalar(e)
			}
			f.Set(s)
		case reflect.Map:
			m := reflect.MakeMap(f.Type())
			k, e := reflect.New(f.Type().Key()).Elem(), reflect.New(f.Type().Elem()).Elem()
			fillScalar(k)
			m.SetMapIndex(k, e)
			f.Set(m)
		case reflect.Array:
			fillScalar(f.Index(0))
		case reflect.Struct:
			if f.Type() == reflect.TypeFor[time.Time]() {
				f.Set(reflect.ValueOf(time.Unix(1, 0)))
			} else {
				fill(t, f)
			}
		case reflect.Float32, reflect.Float64:
			f.SetFloat(1)
		case reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(1)
		case reflect.Interface, reflect.Func, reflect.Chan:
			// none in a view; nested specs may hold them: left zero
		default:
			t.Fatalf("fill: field %s of kind %s", v.Type().Field(i).Name, f.Kind())
		}
	}
}

func fillScalar(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	}
}

// zeroFields names the fields of the struct v that hold their zero value.
func zeroFields(v reflect.Value, skip ...string) []string {
	var out []string
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if v.Field(i).IsZero() && !contains(skip, name) {
			out = append(out, name)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The wire views are built from the core's field by field: a field added to
// a core view and its apitypes type, and not copied here, fails this test.
func TestWireViewsCopyEveryField(t *testing.T) {
	var tv core.TaskView
	fill(t, reflect.ValueOf(&tv).Elem())
	tv.Status = core.Succeeded // the zero Status is pending
	if z := zeroFields(reflect.ValueOf(wireTask(&tv)), "Revision"); len(z) > 0 {
		t.Errorf("wireTask leaves %v unset", z)
	}
	if n, m := reflect.TypeFor[core.TaskView]().NumField(), reflect.TypeFor[taskView]().NumField()-1; n != m {
		t.Errorf("core.TaskView has %d fields, apitypes.Task %d besides Revision", n, m)
	}

	var v core.DAGView
	fill(t, reflect.ValueOf(&v).Elem())
	v.Tasks = []core.TaskView{tv}
	w := wireDAG(&v, 7)
	// A head's truncation and shape are set by wireHead (TestBigDAGHead).
	if z := zeroFields(reflect.ValueOf(*w), "TasksTruncated", "Shape"); len(z) > 0 {
		t.Errorf("wireDAG leaves %v unset", z)
	}
	if z := zeroFields(reflect.ValueOf(w.DAGSummary)); len(z) > 0 {
		t.Errorf("wireSummary leaves %v unset", z)
	}
	if n, m := reflect.TypeFor[core.DAGSummary]().NumField(), reflect.TypeFor[dagSummary]().NumField(); n != m {
		t.Errorf("core.DAGSummary has %d fields, apitypes.DAGSummary %d", n, m)
	}
	if n, m := reflect.TypeFor[core.DAGView]().NumField(), reflect.TypeFor[dagView]().NumField()-3; n != m {
		t.Errorf("core.DAGView has %d fields, apitypes.DAG %d besides Revision, TasksTruncated and Shape", n, m)
	}
	if w.Counts["pending"] != 1 || len(w.Counts) != 1 {
		t.Errorf("counts %v, want the statuses counted only", w.Counts)
	}
}
