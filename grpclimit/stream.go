package grpclimit

import (
	"log/slog"

	"github.com/rlkit/ratelimit/internal/limitset"
	"google.golang.org/grpc"
)

// limitedStream charges the messages its handler receives in the Messages
// limits.
type limitedStream struct {
	grpc.ServerStream
	i      *Interceptor
	method string
}

// RecvMsg receives the next message and charges it; a denied message is
// dropped and its denial returned.
func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.i.admitMessage(s.ServerStream, s.method, m)
}

// admitMessage decides a received message in the Messages limits: nil to
// deliver it, else the error RecvMsg returns. A denial's fields go to the
// trailer: the header may be sent already.
func (i *Interceptor) admitMessage(ss grpc.ServerStream, method string, m any) error {
	ctx := ss.Context()
	n := 1
	if i.msgCost != nil {
		n = i.msgCost(ctx, method, m)
	}
	req := limitset.Request[inCall]{R: inCall{ctx: ctx, method: method}, Ctx: ctx, N: n}
	var v limitset.Verdict[inCall]
	switch i.msgs.Decide(&req, &v, i.shadowFields, func() []slog.Attr {
		return []slog.Attr{slog.String("method", method), slog.Bool("message", true)}
	}) {
	case limitset.Pass, limitset.Admitted:
		return nil
	case limitset.Denied:
		i.setFields(ctx, ss, i.msgs, &v, true)
		return i.deny(ctx, method, &v, true)
	case limitset.Listed:
		return i.denyListed(ctx, method, &v, true)
	}
	return ctxError(ctx)
}
