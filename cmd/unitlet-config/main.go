// Command unitlet-config owns the node's configuration and serves it to the other unitlet
// services over the bus. See services/config.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/config"
)

func main() {
	os.Exit(config.Main(context.Background(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
