package model

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Labels are a worker's key=value pairs; a task's requirement (Task.Requires)
// matches a worker whose labels include every required pair.
type Labels map[string]string

// labelPattern is the syntax of label keys and values: short, and free of the
// ',' and '=' that the --labels form uses as separators.
var labelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)

// ValidLabel reports whether s may be a label key or value.
func ValidLabel(s string) bool { return labelPattern.MatchString(s) }

// LabelRule says what ValidLabel accepts, for error messages.
const LabelRule = "1-63 letters, digits, '.', '_', '/' or '-', starting with a letter or digit"

// MaxLabels bounds the labels of a worker and the requirements of a task.
const MaxLabels = 32

// ParseLabels reads "k=v,k2=v2" (the --labels form; spaces around items are
// ignored, an empty string is no labels).
func ParseLabels(s string) (Labels, error) {
	out := Labels{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", item)
		}
		if err := checkLabel(k, v); err != nil {
			return nil, err
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = v
	}
	if len(out) > MaxLabels {
		return nil, fmt.Errorf("%d labels; at most %d", len(out), MaxLabels)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// CheckLabels validates a map of labels (from a config file, say).
func CheckLabels(l map[string]string) error {
	if len(l) > MaxLabels {
		return fmt.Errorf("%d labels; at most %d", len(l), MaxLabels)
	}
	for _, k := range sortedKeys(l) {
		if err := checkLabel(k, l[k]); err != nil {
			return err
		}
	}
	return nil
}

func checkLabel(k, v string) error {
	if !ValidLabel(k) {
		return fmt.Errorf("label key %q is invalid: want %s", k, LabelRule)
	}
	if !ValidLabel(v) {
		return fmt.Errorf("label %s=%q: value is invalid: want %s", k, v, LabelRule)
	}
	return nil
}

// Matches reports whether labels include every pair of req.
func (l Labels) Matches(req map[string]string) bool {
	for k, v := range req {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// String is FormatLabels(l).
func (l Labels) String() string { return FormatLabels(l) }

// FormatLabels renders labels as "k=v,k2=v2", keys sorted: the --labels form
// and a canonical key for a set of requirements.
func FormatLabels(l map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(l) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return b.String()
}

func sortedKeys(l map[string]string) []string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
