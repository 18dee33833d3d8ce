package grpclimit

import "context"

// KeyFunc is a stand-in for the server side's KeyFunc (i13-server), with
// the binding signature; this file is deleted when that branch is merged.
type KeyFunc func(ctx context.Context, method string) (key string, ok bool)
