// Command unitlet-vmagent is the guest side of the harness's agent channel for vm nodes
// (see integration/harness/vmagent): it serves the virtio-serial port named unitlet.agent,
// again after each session ends. It runs as a systemd unit in the guest.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/unitlet/unitlet/integration/harness/vmagent"
)

const port = "/dev/virtio-ports/unitlet.agent"

func main() {
	for {
		f, err := vmagent.OpenPort(port)
		if err != nil {
			fmt.Fprintf(os.Stderr, "unitlet-vmagent: open %s: %v\n", port, err)
			time.Sleep(time.Second)
			continue
		}
		err = vmagent.Serve(f)
		fmt.Fprintf(os.Stderr, "unitlet-vmagent: session ended: %v\n", err)
		f.Close()
		time.Sleep(500 * time.Millisecond)
	}
}
