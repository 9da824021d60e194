package model

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseOutputs(t *testing.T) {
	for name, c := range map[string]struct {
		in   string
		want string // the outputs as JSON
	}{
		"lines":             {"rows=42\nday=2026-11-27\n", `{"day":"2026-11-27","rows":"42"}`},
		"crlf and blanks":   {"a=1\r\n\r\nb=x=y\r\n", `{"a":"1","b":"x=y"}`},
		"empty value":       {"a=\n", `{"a":""}`},
		"last wins":         {"a=1\na=2\n", `{"a":"2"}`},
		"heredoc":           {"files<<EOF\na.csv\nb.csv\nEOF\nn=2\n", `{"files":"a.csv\nb.csv","n":"2"}`},
		"json object":       {` {"rows": 42, "parts": ["a", "b"], "meta": {"k": null}} `, `{"meta":{"k":null},"parts":["a","b"],"rows":42}`},
		"nothing":           {"", `null`},
		"only blank":        {"\n\n  \n", `null`},
		"html kept as is":   {"a=<b>&</b>\n", `{"a":"<b>&</b>"}`},
		"quotes escaped":    {`q="x"` + "\n", `{"q":"\"x\""}`},
		"unicode preserved": {"u=é😀\n", `{"u":"é😀"}`},
	} {
		o, err := ParseOutputs([]byte(c.in), 0)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got := encodeOutputs(t, o)
		if got != c.want {
			t.Errorf("%s: got %s, want %s", name, got, c.want)
		}
		if o != nil && OutputsBytes(o) != len(got) {
			t.Errorf("%s: OutputsBytes %d, encoded %d", name, OutputsBytes(o), len(got))
		}
	}
}

func encodeOutputs(t *testing.T, o Outputs) string {
	t.Helper()
	b, err := marshalJSON(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseOutputsErrors(t *testing.T) {
	for in, want := range map[string]string{
		"no equals sign\n":   "line 1: want name=value",
		"ok=1\n9lives=1\n":   `line 2: name "9lives" is invalid`,
		"a-b=1\n":            `name "a-b" is invalid`,
		"=1\n":               "line 1: want name=value",
		"x<<EOF\nunclosed\n": "is not closed by a line EOF",
		"x<<\n":              "needs a delimiter",
		`{"a": 1} {"b": 2}`:  "more than one JSON object",
		`{"a": }`:            "not a JSON object",
		`["a"]`:              "want name=value",
		`{"bad name": 1}`:    `output name "bad name" is invalid`,
		`{"deep": ` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}`: "levels deep",
	} {
		_, err := ParseOutputs([]byte(in), 0)
		var oe *OutputsError
		if err == nil || !errors.As(err, &oe) || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: error %v, want an OutputsError saying %q", in, err, want)
		}
	}
}

// Outputs are never cut: over the bound, as written or as encoded, they
// are refused with a message that says so.
func TestOutputsBound(t *testing.T) {
	const max = 100
	if _, err := ParseOutputs([]byte("a="+strings.Repeat("x", 200)), max); err == nil || !strings.Contains(err.Error(), "exceeds max_output_bytes (100)") {
		t.Errorf("a file over the bound: %v", err)
	}
	// 60 bytes written, but each quote encodes as two bytes.
	if _, err := ParseOutputs([]byte("a="+strings.Repeat(`"`, 58)), max); err == nil || !strings.Contains(err.Error(), "exceed max_output_bytes (100)") {
		t.Errorf("outputs encoding over the bound: %v", err)
	}
	o, err := ParseOutputs([]byte("a="+strings.Repeat("x", 80)), max)
	if err != nil || OutputsBytes(o) > max {
		t.Errorf("within the bound: %v, %d bytes", err, OutputsBytes(o))
	}
}

// The leader's check: names, JSON, depth, size; values compacted so that
// the record writes them as counted.
func TestCheckOutputs(t *testing.T) {
	o, err := CheckOutputs(Outputs{"b": json.RawMessage(` [1, 2] `), "a": json.RawMessage(`"x"`)}, 0)
	if err != nil || string(o["b"]) != "[1,2]" || string(o["a"]) != `"x"` {
		t.Fatalf("got %v, %v", o, err)
	}
	for name, c := range map[string]struct {
		in   Outputs
		want string
	}{
		"not JSON":    {Outputs{"a": json.RawMessage(`{`)}, "output a is not a JSON value"},
		"two values":  {Outputs{"a": json.RawMessage(`1 2`)}, "output a is not a JSON value"},
		"bad UTF-8":   {Outputs{"a": json.RawMessage("\"\xff\"")}, "not valid UTF-8"},
		"bad name":    {Outputs{"a.b": json.RawMessage(`1`)}, `output name "a.b" is invalid`},
		"too large":   {Outputs{"a": json.RawMessage(`"` + strings.Repeat("x", 200) + `"`)}, "exceed max_output_bytes (100)"},
		"empty value": {Outputs{"a": json.RawMessage(``)}, "output a is not a JSON value"},
	} {
		if _, err := CheckOutputs(c.in, 100); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestJSONPath(t *testing.T) {
	var doc any
	_ = json.Unmarshal([]byte(`{"items": [{"name": "a"}, {"name": "b"}], "content-type": "x", "n": 3}`), &doc)
	for path, want := range map[string]string{
		".":                 `{"content-type":"x","items":[{"name":"a"},{"name":"b"}],"n":3}`,
		".items[1].name":    `"b"`,
		"items[0].name":     `"a"`,
		`.["content-type"]`: `"x"`,
		`["content-type"]`:  `"x"`,
		".items":            `[{"name":"a"},{"name":"b"}]`,
		".n":                `3`,
	} {
		p, err := ParseJSONPath(path)
		if err != nil {
			t.Errorf("%q: %v", path, err)
			continue
		}
		v, err := p.Find(doc)
		if err != nil {
			t.Errorf("%q: %v", path, err)
			continue
		}
		if got := encodeAny(t, v); got != want {
			t.Errorf("%q: %s, want %s", path, got, want)
		}
	}
	for path, want := range map[string]string{
		"":           "empty path",
		"..a":        "an empty key",
		".a[x]":      "not an index",
		".a[1":       "without its ]",
		`.["a]`:      "not closed",
		".a]b.c[0]x": "want .key or [index]",
	} {
		if _, err := ParseJSONPath(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", path, err, want)
		}
	}
	for path, want := range map[string]string{
		".items[5]":    ".items has 2 items, no [5]",
		".items.name":  ".items is a list, not an object",
		".n[0]":        ".n is not an object or a list",
		".missing":     `the body has no key "missing"`,
		".items[0][1]": ".items[0] is an object, not a list",
	} {
		p, err := ParseJSONPath(path)
		if err != nil {
			t.Errorf("%q: %v", path, err)
			continue
		}
		if _, err := p.Find(doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", path, err, want)
		}
	}
}

func encodeAny(t *testing.T, v any) string {
	t.Helper()
	b, err := marshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParams(t *testing.T) {
	var p Params
	if err := json.Unmarshal([]byte(`{"region": "eu", "n": 3, "list": [ 1, 2 ], "day": null}`), &p); err != nil {
		t.Fatal(err)
	}
	if string(p["list"]) != "[1,2]" || !IsNull(p["day"]) || string(p["region"]) != `"eu"` {
		t.Fatalf("decoded %v", p)
	}
	for _, c := range []struct{ declared, text, want string }{
		{`"1.0"`, "1.10", `"1.10"`}, // a string default keeps the text
		{`3`, "4", `4`},             // a number default takes JSON
		{`null`, "true", `true`},    // required: JSON when it parses
		{`null`, "eu", `"eu"`},      // else a string
		{`null`, `["a","b"]`, `["a","b"]`},
		{`null`, ` {"a": 1} `, `{"a":1}`},
		{`[]`, "a,b", `"a,b"`},
	} {
		if got := ParamValue(json.RawMessage(c.declared), c.text); string(got) != c.want {
			t.Errorf("ParamValue(%s, %q) = %s, want %s", c.declared, c.text, got, c.want)
		}
	}
	for s, ok := range map[string]bool{"a": true, "_x1": true, "region_2": true, "1a": false, "a-b": false, "": false, "é": false, strings.Repeat("a", 129): false} {
		if ValidName(s) != ok {
			t.Errorf("ValidName(%q) = %v", s, !ok)
		}
	}
}
