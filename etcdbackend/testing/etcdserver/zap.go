package etcdserver

import "go.uber.org/zap"

// nopLogger keeps the etcd client's own log lines out of test output.
func nopLogger() *zap.Logger { return zap.NewNop() }
