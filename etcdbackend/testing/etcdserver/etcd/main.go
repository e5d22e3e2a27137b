// Command etcd is the etcd server (go.etcd.io/etcd/server/v3), built by the
// etcdbackend tests' harness (package etcdserver) into a temporary
// directory, so that the tests need nothing but the Go toolchain and the
// module proxy. It is a module of its own: the server's dependencies stay
// out of etcdbackend's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
