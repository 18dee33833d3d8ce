package grpclimit

import "context"

// KeyFunc picks the key a call is charged under; declared here until the
// server's keys.go is merged (this file is then deleted).
type KeyFunc func(ctx context.Context, method string) (key string, ok bool)
