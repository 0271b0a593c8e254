// Command unitlet-harness brings a local cluster with unitlet nodes up and down, like a
// compose file: a real control plane, and node machines running unitlet.
//
//	unitlet-harness up         [-f STACK.yaml]
//	unitlet-harness build      [PART...] (only build or find the control plane, registry, metrics-server, containerd, kubeadm and local-path-provisioner binaries,
//	                           or the named parts: control-plane registry metrics-server containerd kubeadm local-path-provisioner vm-tree nspawn-tree)
//	unitlet-harness down       [-f STACK.yaml]
//	unitlet-harness status     [-f STACK.yaml] [-o json]
//	unitlet-harness logs       [-f STACK.yaml] [COMPONENT...]
//	unitlet-harness exec       [-f STACK.yaml] NODE -- CMD...
//	unitlet-harness kubeconfig [-f STACK.yaml]
//	unitlet-harness approve-csrs --kubeconfig ADMIN (the stack's approver of serving CSRs)
//	unitlet-harness vm-run SPEC.json  (a vm node: qemu and the host's end of its agent channel)
//	unitlet-harness vm-exec AGENT.sock -- CMD...  (a command in a vm node, through its agent)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/integration/harness"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "approve-csrs" {
		// Run by the stack itself, from its bin directory: no repository needed.
		return approveCSRs(args[1:], stdout, stderr)
	}
	if len(args) == 2 && args[0] == "vm-run" {
		// Run by the stack itself (a vm node's component).
		if err := harness.RunVM(args[1], stderr); err != nil {
			fmt.Fprintln(stderr, "unitlet-harness vm-run:", err)
			return 1
		}
		return 0
	}
	if len(args) >= 4 && args[0] == "vm-exec" && args[2] == "--" {
		return harness.VMExec(args[1], args[3:], os.Stdin, stdout, stderr)
	}
	repo, err := integration.RepoRoot()
	if err != nil {
		fmt.Fprintln(stderr, "unitlet-harness:", err)
		return 1
	}
	fs := pflag.NewFlagSet("unitlet-harness", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SetInterspersed(false)
	stackFile := fs.StringP("file", "f", filepath.Join(repo, "integration", "stacks", "single-node.yaml"), "the stack file")
	output := fs.StringP("output", "o", "", "json for machine-readable status")
	lines := fs.IntP("lines", "n", 50, "log lines per component")
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: unitlet-harness up|down|status|logs|exec|kubeconfig|build [PART...] [-f STACK.yaml]")
		return 2
	}
	cmd := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		fmt.Fprintln(stderr, "unitlet-harness:", err)
		return 2
	}
	h, err := harness.New(*stackFile, repo, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "unitlet-harness:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "up":
		err = h.Up(ctx)
	case "build":
		err = h.Build(fs.Args()...)
	case "down":
		err = h.Down()
	case "status":
		if *output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(h.Status())
		} else {
			h.PrintStatus(stdout)
		}
	case "logs":
		fmt.Fprint(stdout, h.Logs(*lines, fs.Args()...))
	case "kubeconfig":
		fmt.Fprintln(stdout, h.AdminKubeconfig())

	case "exec":
		rest := fs.Args()
		if len(rest) > 1 && rest[1] == "--" {
			rest = append(rest[:1], rest[2:]...)
		}
		if len(rest) < 2 || !h.HasNode(rest[0]) {
			fmt.Fprintln(stderr, "usage: unitlet-harness exec NODE -- CMD... (NODE is one of the stack's nodes)")
			return 2
		}
		c := h.Exec(rest[0], rest[1:])
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, stderr
		if err := c.Run(); err != nil {
			var ee interface{ ExitCode() int }
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			fmt.Fprintln(stderr, "unitlet-harness:", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintf(stderr, "unitlet-harness: unknown command %q\n", cmd)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "unitlet-harness:", err)
		return 1
	}
	return 0
}

// approveCSRs runs the stack's approver of nodes' serving CSRs until SIGTERM.
func approveCSRs(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("unitlet-harness approve-csrs", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kubeconfig := fs.String("kubeconfig", "", "the stack's admin kubeconfig")
	if err := fs.Parse(args); err != nil || *kubeconfig == "" {
		fmt.Fprintln(stderr, "usage: unitlet-harness approve-csrs --kubeconfig ADMIN.kubeconfig")
		return 2
	}
	rc, err := harness.RESTConfig(*kubeconfig)
	if err == nil {
		var c kubernetes.Interface
		if c, err = kubernetes.NewForConfig(rc); err == nil {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintln(stdout, "approving nodes' kubelet-serving CSRs")
			err = harness.ApproveServingCSRs(ctx, c, stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "unitlet-harness approve-csrs:", err)
		return 1
	}
	return 0
}
