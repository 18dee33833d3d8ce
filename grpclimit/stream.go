package grpclimit

import (
	"log/slog"

	"github.com/rlkit/ratelimit/internal/limitset"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// limitedStream charges the messages its handler receives in the Messages
// limits.
type limitedStream struct {
	grpc.ServerStream
	i      *Interceptor
	method string
	// trailer holds the fields of the last message's denial, empty when
	// the last message was admitted; the interceptor sets it as the
	// stream's trailer once the handler returns. Set per denial, it would
	// grow by a set of fields for each denied message a handler skips.
	trailer metadata.MD
}

// RecvMsg receives the next message and charges it; a denied message is
// dropped (m is reset) and its denial returned.
func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	err := s.admit(m)
	if err != nil {
		if pm, ok := m.(proto.Message); ok {
			proto.Reset(pm)
		}
	}
	return err
}

// admit decides a received message in the Messages limits: nil to deliver
// it, else the error RecvMsg returns. A denial's fields go to the trailer:
// the header may be sent already.
func (s *limitedStream) admit(m any) error {
	i, method := s.i, s.method
	ctx := s.Context()
	n := 1
	if i.msgCost != nil {
		n = i.msgCost(ctx, method, m)
	}
	req := limitset.Request[inCall]{R: inCall{ctx: ctx, method: method}, Ctx: ctx, N: n}
	var v limitset.Verdict[inCall]
	verdict := i.msgs.Decide(&req, &v, i.shadowFields, func() []slog.Attr {
		return []slog.Attr{slog.String("method", method), slog.Bool("message", true)}
	})
	clear(s.trailer)
	switch verdict {
	case limitset.Pass, limitset.Admitted:
		return nil
	case limitset.Denied:
		if s.trailer == nil {
			s.trailer = make(metadata.MD, 6)
		}
		i.msgs.WriteFields(s.trailer, &grpcNames, limitset.FieldSet(i.fields), &v)
		return i.deny(ctx, method, &v, true)
	case limitset.Listed:
		return i.denyListed(ctx, method, &v, true)
	case limitset.Misconfigured:
		return misconfiguredError(v.Limit())
	}
	return ctxError(ctx)
}

// setTrailer sets the fields of the last message's denial, if any, as the
// stream's trailer.
func (s *limitedStream) setTrailer() {
	if len(s.trailer) > 0 {
		s.ServerStream.SetTrailer(s.trailer)
	}
}
