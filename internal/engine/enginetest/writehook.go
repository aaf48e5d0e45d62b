package enginetest

import (
	"context"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/cdcctl/cdcctl/internal/model"
)

// WriteHook runs a test's action just before the engine's etcd
// transactions that put one key (with a value match accepts), once the
// test arms it: a test makes the change that races the engine's write
// exactly there (a status moved under a coordinator's write, say). Give
// Interceptor as Options.Interceptor.
type WriteHook struct {
	key    string
	match  func(value []byte) bool
	before func(ctx context.Context, n int)
	fail   func(n int) error

	mu    sync.Mutex
	armed bool
	met   int
}

// NewWriteHook calls before ahead of each armed transaction that puts
// key with a value match accepts (nil: any), with how many it met so far,
// this one included.
func NewWriteHook(key string, match func(value []byte) bool, before func(ctx context.Context, n int)) *WriteHook {
	return &WriteHook{key: key, match: match, before: before}
}

// FailWith makes the hook refuse the armed transactions for which fail
// answers an error, after before: they never reach etcd, and the engine
// gets that error, as from a write that failed (a test of what a failed
// write leaves behind).
func (h *WriteHook) FailWith(fail func(n int) error) *WriteHook {
	h.fail = fail
	return h
}

// Arm starts the hook.
func (h *WriteHook) Arm() {
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
}

// Met is how many armed transactions the hook met.
func (h *WriteHook) Met() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.met
}

// Interceptor is one capture's etcd client's.
func (h *WriteHook) Interceptor(model.NodeID) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*etcdserverpb.TxnRequest); ok && h.puts(txn) {
			h.mu.Lock()
			n := 0
			if h.armed {
				h.met++
				n = h.met
			}
			h.mu.Unlock()
			if n > 0 {
				if h.before != nil {
					h.before(ctx, n)
				}
				if h.fail != nil {
					if err := h.fail(n); err != nil {
						return err
					}
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// puts says a transaction puts the hook's key, with a value it matches,
// when it succeeds.
func (h *WriteHook) puts(txn *etcdserverpb.TxnRequest) bool {
	for _, op := range txn.Success {
		if p := op.GetRequestPut(); p != nil && string(p.Key) == h.key && (h.match == nil || h.match(p.Value)) {
			return true
		}
	}
	return false
}
