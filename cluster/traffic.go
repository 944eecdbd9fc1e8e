package cluster

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/stats"
)

// Traffic counts the bytes one Client exchanges with etcd: every gRPC
// message of unary calls (reads, transactions, lease renewals) and of
// streams (watch events, keep-alives), as the gRPC stats handler reports
// them. It is how the scale simulation measures what an agent reads per
// generation, and the largest request any agent sends (etcd refuses one over
// --max-request-bytes). Safe for concurrent use; the zero value is ready.
type Traffic struct {
	received atomic.Int64 // wire bytes of messages received (payload + gRPC framing)
	sent     atomic.Int64 // wire bytes of messages sent
	largest  atomic.Int64 // largest single message sent, payload bytes
	messages atomic.Int64 // messages sent
}

// Received returns the bytes received from etcd so far: message payloads
// with their 5-byte gRPC framing, no HTTP/2 or TCP overhead.
func (t *Traffic) Received() int64 { return t.received.Load() }

// Sent returns the bytes sent to etcd so far, counted as Received.
func (t *Traffic) Sent() int64 { return t.sent.Load() }

// LargestSent returns the size, bytes, of the largest single message sent
// so far (its encoded protobuf payload: what etcd compares with
// --max-request-bytes).
func (t *Traffic) LargestSent() int64 { return t.largest.Load() }

// Requests returns how many messages were sent to etcd so far (unary
// requests and stream messages such as watch creations and keep-alives).
func (t *Traffic) Requests() int64 { return t.messages.Load() }

// trafficHandler feeds a Traffic from gRPC's client-side stats.
type trafficHandler struct{ t *Traffic }

func (h trafficHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h trafficHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h trafficHandler) HandleConn(context.Context, stats.ConnStats) {}

func (h trafficHandler) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		h.t.received.Add(int64(p.WireLength))
	case *stats.OutPayload:
		h.t.sent.Add(int64(p.WireLength))
		h.t.messages.Add(1)
		for {
			cur := h.t.largest.Load()
			if int64(p.Length) <= cur || h.t.largest.CompareAndSwap(cur, int64(p.Length)) {
				break
			}
		}
	}
}
