// Command unitlet-volumes prepares pods' volumes for unitlet-podsync. See services/volumes.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/volumes"
	"github.com/unitlet/unitlet/shared/daemon"
)

func main() {
	os.Exit(daemon.Main(context.Background(), volumes.Command(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
