package grpclimit

// IPResolver finds a call's client address; built by the resolver helper.
type IPResolver struct{}
