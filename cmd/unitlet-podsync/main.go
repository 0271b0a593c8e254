// Command unitlet-podsync runs the node's pods on the CRI runtime. See services/podsync.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/podsync"
	"github.com/unitlet/unitlet/shared/daemon"
)

func main() {
	os.Exit(daemon.Main(context.Background(), podsync.Command(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
