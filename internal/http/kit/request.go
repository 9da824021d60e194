package kit

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

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

// Token checks a bearer token. Both sides are hashed before a constant-time
// compare, so that not even the token's length leaks. The zero Token is not
// set and authorizes nothing.
type Token struct {
	sum [sha256.Size]byte
	set bool
}

// NewToken returns a checker for tok ("" gives the zero Token).
func NewToken(tok string) Token {
	if tok == "" {
		return Token{}
	}
	return Token{sum: sha256.Sum256([]byte(tok)), set: true}
}

// Set reports whether a token is configured.
func (t Token) Set() bool { return t.set }

// Authorized reports whether r carries "Authorization: Bearer <token>".
func (t Token) Authorized(r *http.Request) bool {
	if !t.set {
		return false
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1
}
