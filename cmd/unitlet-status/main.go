// Command unitlet-status reports the node and its pods to the API server and serves the
// node API on :10250. See services/status.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/status"
	"github.com/unitlet/unitlet/shared/daemon"
)

func main() {
	os.Exit(daemon.Main(context.Background(), status.Command(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
