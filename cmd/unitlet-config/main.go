// Command unitlet-config owns the node's configuration and serves it to the other unitlet
// services over the bus. See services/config.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/config"
	"github.com/unitlet/unitlet/shared/daemon"
)

func main() {
	os.Exit(daemon.Main(context.Background(), config.Command(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
