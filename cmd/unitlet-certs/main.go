// Command unitlet-certs rotates the node's certificates. See services/certs.
package main

import (
	"context"
	"os"

	"github.com/unitlet/unitlet/services/certs"
)

func main() {
	os.Exit(certs.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
