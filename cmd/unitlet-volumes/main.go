// Command unitlet-volumes prepares pods' volumes for unitlet-podsync. See services/volumes.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/volumes"
)

func main() {
	os.Exit(volumes.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
