// Command unitlet-podsync runs the node's pods on the CRI runtime. See services/podsync.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/podsync"
)

func main() {
	os.Exit(podsync.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
