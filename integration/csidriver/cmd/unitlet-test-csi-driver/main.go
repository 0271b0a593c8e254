// Command unitlet-test-csi-driver runs the harness's CSI test driver (package csidriver) on
// a node it is copied to, as a node plugin with node-driver-registrar runs there: the vm
// node's tests start it in the guest, beside unitlet-volumes under its shipped unit. It
// stops on SIGTERM or SIGINT, removing its sockets.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/unitlet/unitlet/integration/csidriver"
)

func main() {
	var o csidriver.Options
	flag.StringVar(&o.Name, "name", "", "the driver's name (required)")
	flag.StringVar(&o.RegistrationDir, "registration-dir", "/var/lib/unitlet/plugins_registry", "the node's plugins_registry")
	flag.StringVar(&o.Endpoint, "endpoint", "", "the driver's CSI socket (required)")
	flag.StringVar(&o.NodeID, "node-id", "", "what NodeGetInfo answers (required)")
	flag.StringVar(&o.StateDir, "state-dir", "", "where the volumes' data lives (required)")
	flag.BoolVar(&o.Stage, "stage", false, "STAGE_UNSTAGE_VOLUME with ext4 images on loop devices; else bind-mounted directories")
	flag.StringVar(&o.CallLog, "call-log", "", "a file each call is appended to, as a JSON line")
	flag.Parse()
	if o.Name == "" || o.Endpoint == "" || o.NodeID == "" || o.StateDir == "" {
		fmt.Fprintln(os.Stderr, "unitlet-test-csi-driver: -name, -endpoint, -node-id and -state-dir are required")
		os.Exit(2)
	}
	d, err := csidriver.Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "unitlet-test-csi-driver:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	d.Stop()
}
