// Command unitlet-status reports the node and its pods to the API server and serves the
// node API on :10250. See services/status.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/status"
)

func main() {
	os.Exit(status.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
