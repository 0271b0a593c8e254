// Command unitlet-certs rotates the node's certificates. See services/certs.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/certs"
	"github.com/unitlet/unitlet/shared/daemon"
)

func main() {
	os.Exit(daemon.Main(context.Background(), certs.Command(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
