package store

import (
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcd refuses a transaction whole, applying none of it, for its number of
// operations or its bytes. The store says so in its own terms, so that the
// engine knows the outcome without reading etcd's or gRPC's errors.
var (
	// ErrTooManyOps: more operations than the members' --max-txn-ops.
	ErrTooManyOps = errors.New("etcd refused the transaction: too many operations (--max-txn-ops)")
	// ErrRequestTooLarge: more bytes than the members' --max-request-bytes,
	// or than gRPC's own message limits.
	ErrRequestTooLarge = errors.New("etcd refused the transaction: request too large (--max-request-bytes)")
)

// refusedError is one of the sentinels above with etcd's own error.
type refusedError struct {
	kind  error
	cause error
}

// Error is etcd's own words: the messages built on it quote what etcd said.
func (e *refusedError) Error() string        { return e.cause.Error() }
func (e *refusedError) Is(target error) bool { return target == e.kind }
func (e *refusedError) Unwrap() error        { return e.cause }

// mapRefused turns etcd's whole-transaction refusals into the store's
// errors (NOSPACE included: mapNoSpace) and leaves every other error as it
// is.
func mapRefused(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, ErrTooManyOps) || errors.Is(err, ErrRequestTooLarge):
		return err
	case errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrGRPCTooManyOps):
		return &refusedError{kind: ErrTooManyOps, cause: err}
	case tooLarge(err):
		return &refusedError{kind: ErrRequestTooLarge, cause: err}
	}
	return mapNoSpace(err)
}

// tooLarge reports etcd's (or the gRPC client's) refusal of a transaction
// for its bytes, before applying any of it.
func tooLarge(err error) bool {
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		return true
	}
	// gRPC's limits: the client's own send limit (MaxCallSendMsgSize) and
	// the member's receive limit (--max-request-bytes plus gRPC's
	// overhead), "grpc: received message larger than max". etcd also
	// answers ResourceExhausted for a full quota and for overload, which
	// are not about size: those keep the general path.
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max")
}
