// Command unitlet-eviction watches the node for pressure and evicts pods. See
// services/eviction.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/eviction"
	"github.com/unitlet/unitlet/shared/daemon"
)

func main() {
	os.Exit(daemon.Main(context.Background(), eviction.Command(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
