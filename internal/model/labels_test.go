package model

import (
	"strings"
	"testing"
)

func TestParseLabels(t *testing.T) {
	l, err := ParseLabels(" pool=gpu, zone=a ,")
	if err != nil || FormatLabels(l) != "pool=gpu,zone=a" {
		t.Fatalf("got %v, %v", l, err)
	}
	if l, err := ParseLabels(""); err != nil || l != nil {
		t.Fatalf("empty: %v, %v", l, err)
	}
	for in, want := range map[string]string{
		"pool":           "want key=value",
		"pool=":          "value is invalid",
		"=gpu":           "key \"\" is invalid",
		"pool=a,pool=b":  "given twice",
		"pool=g p":       "value is invalid",
		"pool=gpu=extra": "value is invalid",
	} {
		if _, err := ParseLabels(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
}

func TestLabelsMatch(t *testing.T) {
	w := Labels{"pool": "gpu", "zone": "a"}
	for _, c := range []struct {
		req  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"pool": "gpu"}, true},
		{map[string]string{"pool": "gpu", "zone": "a"}, true},
		{map[string]string{"pool": "gpu", "zone": "b"}, false},
		{map[string]string{"disk": "ssd"}, false},
	} {
		if got := w.Matches(c.req); got != c.want {
			t.Errorf("%v matches %v = %v", w, c.req, got)
		}
	}
	if (Labels(nil)).Matches(map[string]string{"pool": "gpu"}) {
		t.Error("a worker without labels matched a requirement")
	}
	task := Task{Pool: "gpu", Selector: map[string]string{"zone": "a"}}
	if FormatLabels(task.Requires()) != "pool=gpu,zone=a" || task.Selector["pool"] != "" {
		t.Errorf("requires %v (selector must not be modified: %v)", task.Requires(), task.Selector)
	}
}
