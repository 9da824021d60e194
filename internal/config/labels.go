package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/orion-sched/orion/internal/model"
)

// Labels and pool limits are maps. A flag or an environment variable gives
// them as "k=v,k2=v2"; a config file may give that string too, or a YAML
// mapping ({pool: gpu}). Either way they decode to the same map.

// parseLabels reads a labels setting (a "k=v,..." string or a mapping).
func parseLabels(raw any) (model.Labels, error) {
	switch v := raw.(type) {
	case nil:
		return nil, nil
	case string:
		return model.ParseLabels(v)
	case map[string]any:
		out := model.Labels{}
		for k, x := range v {
			out[k] = strings.TrimSpace(fmt.Sprint(x))
		}
		if err := model.CheckLabels(out); err != nil {
			return nil, err
		}
		if len(out) == 0 {
			return nil, nil
		}
		return out, nil
	}
	return nil, fmt.Errorf("want key=value,... or a mapping, got %T", raw)
}

// parseLimits reads a pool_limits setting ("gpu=2,db=4" or a mapping of pool
// to a count ≥ 0; 0 means no limit).
func parseLimits(raw any) (map[string]int, error) {
	pairs := map[string]string{}
	switch v := raw.(type) {
	case nil:
	case string:
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			k, n, ok := strings.Cut(item, "=")
			if !ok {
				return nil, fmt.Errorf("%q: want pool=count", item)
			}
			pairs[strings.TrimSpace(k)] = strings.TrimSpace(n)
		}
	case map[string]any:
		for k, x := range v {
			pairs[k] = strings.TrimSpace(fmt.Sprint(x))
		}
	default:
		return nil, fmt.Errorf("want pool=count,... or a mapping, got %T", raw)
	}
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]int, len(pairs))
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !model.ValidLabel(k) {
			return nil, fmt.Errorf("pool %q is invalid: want %s", k, model.LabelRule)
		}
		n, err := strconv.Atoi(pairs[k])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("pool %s: limit %q must be a whole number ≥ 0 (0: no limit)", k, pairs[k])
		}
		out[k] = n
	}
	return out, nil
}
