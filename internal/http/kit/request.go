package kit

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/orion-sched/orion/internal/dag"
)

// IdempotencyID is the DAG id a submission without an id gets from its
// Idempotency-Key header: the key itself when it is a valid id, otherwise
// "k-" and the first 20 hex digits of its SHA-256, so the same key always
// names the same DAG. The API and the seed API both apply it.
func IdempotencyID(key string) string {
	if dag.ValidID(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "k-" + hex.EncodeToString(sum[:])[:20]
}
