package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/orion-sched/orion/internal/model"
)

// Bounds of the tokens file, checked as it is read.
const (
	MaxFileBytes      = 1 << 20
	MaxTokens         = 10000
	MaxWorkerPatterns = 32
)

// Token is one entry of the tokens file.
type Token struct {
	Name      string       `yaml:"name"`
	Role      string       `yaml:"role"`
	SHA256    string       `yaml:"sha256"`
	WorkerIDs []string     `yaml:"worker_ids,omitempty"`
	Labels    model.Labels `yaml:"labels,omitempty"`

	role   Role
	digest [sha256.Size]byte
}

type file struct {
	// A pointer: a file without the key (empty, or caught half-written)
	// is refused, where `tokens: []` revokes every token on purpose.
	Tokens *[]Token `yaml:"tokens"`
}

// Parse reads a tokens file: every problem named, with the entry's name or
// index, none of them a token (the file holds none).
func Parse(b []byte) ([]Token, error) {
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("tokens file is %d bytes; at most %d", len(b), MaxFileBytes)
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	if f.Tokens == nil {
		return nil, errors.New("tokens file has no tokens: key (write `tokens: []` to revoke every token)")
	}
	tokens := *f.Tokens
	if len(tokens) > MaxTokens {
		return nil, fmt.Errorf("tokens file has %d tokens; at most %d", len(tokens), MaxTokens)
	}
	var errs []error
	names := make(map[string]bool, len(tokens))
	digests := make(map[[sha256.Size]byte]string, len(tokens))
	for i := range tokens {
		t := &tokens[i]
		where := fmt.Sprintf("tokens[%d] (%s)", i, t.Name)
		if !model.ValidLabel(t.Name) {
			errs = append(errs, fmt.Errorf("%s: name %q is invalid: want %s", where, t.Name, model.LabelRule))
		} else if t.Name == "cluster" || t.Name == Anonymous.Name {
			errs = append(errs, fmt.Errorf("%s: name %q is Orion's own (the cluster token, no token)", where, t.Name))
		} else if names[t.Name] {
			errs = append(errs, fmt.Errorf("%s: name %q is given twice", where, t.Name))
		}
		names[t.Name] = true
		var ok bool
		if t.role, ok = ParseRole(t.Role); !ok {
			errs = append(errs, fmt.Errorf("%s: role %q is invalid: want viewer, operator, admin or worker", where, t.Role))
		}
		d, err := hex.DecodeString(t.SHA256)
		if err != nil || len(d) != sha256.Size {
			errs = append(errs, fmt.Errorf("%s: sha256 must be 64 hex digits, the SHA-256 of the token (orion token new prints it)", where))
		} else {
			copy(t.digest[:], d)
			if other, dup := digests[t.digest]; dup {
				errs = append(errs, fmt.Errorf("%s: the same token as %s", where, other))
			}
			digests[t.digest] = t.Name
		}
		switch {
		case t.role != Worker && (len(t.WorkerIDs) > 0 || len(t.Labels) > 0):
			errs = append(errs, fmt.Errorf("%s: worker_ids and labels are for worker tokens", where))
		case t.role == Worker && len(t.WorkerIDs) == 0:
			errs = append(errs, fmt.Errorf("%s: a worker token needs worker_ids, the ids (or patterns such as gpu-*) its workers may take", where))
		case len(t.WorkerIDs) > MaxWorkerPatterns:
			errs = append(errs, fmt.Errorf("%s: %d worker_ids; at most %d", where, len(t.WorkerIDs), MaxWorkerPatterns))
		case len(t.Labels) > model.MaxLabels:
			errs = append(errs, fmt.Errorf("%s: %d labels; at most %d", where, len(t.Labels), model.MaxLabels))
		}
		for _, p := range t.WorkerIDs {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				errs = append(errs, fmt.Errorf("%s: worker_ids pattern %q is invalid", where, p))
			}
		}
		for k, v := range t.Labels {
			if !model.ValidLabel(k) || !model.ValidLabel(v) {
				errs = append(errs, fmt.Errorf("%s: label %s=%s is invalid: want %s", where, k, v, model.LabelRule))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return tokens, nil
}

// Load reads the tokens file at p into k.
func Load(k *Keyring, p string) error {
	b, err := readBounded(p)
	if err != nil {
		return err
	}
	tokens, err := Parse(b)
	if err != nil {
		return err
	}
	k.Set(tokens)
	k.loaded.Store(sha256.Sum256(b))
	return nil
}

func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", p, err)
	}
	return b, nil
}

// Watch reads the file at p every interval and, when its content changed,
// loads it into k. A file that no longer parses (a half-written edit, a
// mistake) keeps the tokens loaded before, and says why once per content:
// locking everyone out for a typo would be worse. reloaded, when set, is
// called with each outcome.
func Watch(ctx context.Context, k *Keyring, p string, every time.Duration, log *zap.Logger, reloaded func(error)) {
	// What was read last, a content or an error, judged once each; at
	// first, what Load loaded.
	last, _ := k.loaded.Load().([sha256.Size]byte)
	lastErr := ""
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := readBounded(p)
		sum, msg := sha256.Sum256(b), ""
		if err != nil {
			msg = err.Error()
		}
		if sum == last && msg == lastErr {
			continue
		}
		last, lastErr = sum, msg
		var tokens []Token
		if err == nil {
			tokens, err = Parse(b)
		}
		if err != nil {
			log.Error("tokens file not reloaded: the tokens loaded before stay", zap.String("file", p), zap.Error(err))
		} else {
			k.Set(tokens)
			k.loaded.Store(sum)
			log.Info("tokens file reloaded", zap.String("file", p), zap.Int("tokens", len(tokens)))
		}
		if reloaded != nil {
			reloaded(err)
		}
	}
}
