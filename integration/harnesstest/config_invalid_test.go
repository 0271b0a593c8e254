package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A configuration that does not load, on the nspawn node under the shipped units: a
// drop-in with a refused value is reloaded (file watch) and fails; the configuration in
// effect stays and the pods run on, but it is visibly degraded: unitletctl status says so
// with the field, the node's /healthz fails its unitlet-config check, and the Node has a
// Warning event KubeletConfigInvalid naming the file and the field, while Ready stays
// True. A restart of unitlet-config with that drop-in stops it (exit 2, the file and the
// field in its journal) and stops its socket, so no client starts it again, as the kubelet
// does with a configuration it cannot load: before, the restart served the configuration
// loaded before and the node ran on as if nothing was wrong. The pods still run; removing
// the drop-in and starting it again restores the node.
func TestAConfigurationThatDoesNotLoadIsShownAndStopsARestart(t *testing.T) {
	// Serial: changes the node's configuration and stops unitlet-config.
	waitNodeReady(t, 90*time.Second)
	const dropIn = "/etc/unitlet/config.d/90-config-invalid-test.conf"
	since := time.Now().Add(-time.Second)
	createPod(t, busyboxPod("config-invalid", "sleep 3600"))
	pod := apiPodRunningReady(t, "config-invalid", time.Minute)
	running := func(what string) {
		t.Helper()
		cs := runtimeContainers(context.Background(), t, string(pod.UID))
		for _, c := range cs {
			if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING && "containerd://"+c.GetId() == pod.Status.ContainerStatuses[0].ContainerID {
				return
			}
		}
		t.Errorf("%s: the pod's container %s is not running; the runtime has %v", what, pod.Status.ContainerStatuses[0].ContainerID, cs)
	}

	stack.InNode(t, podsyncNode, "sh", "-c", "printf 'apiVersion: kubelet.config.k8s.io/v1beta1\\nkind: KubeletConfiguration\\nallowedUnsafeSysctls: []\\nsyncFrequency: 5 parsecs\\n' > "+dropIn+".tmp && chmod 0600 "+dropIn+".tmp && mv "+dropIn+".tmp "+dropIn)
	t.Cleanup(func() {
		_ = stack.Exec(podsyncNode, []string{"rm", "-f", dropIn}).Run()
		_ = stack.Exec(podsyncNode, []string{"systemctl", "reset-failed", "unitlet-config.service"}).Run()
		restartServices(t)
		stack.WaitFor(t, time.Minute, "/healthz ok again", func(ctx context.Context) (bool, string) {
			code, body, err := getHealthz(ctx)
			return err == nil && code == http.StatusOK, fmt.Sprintf("%d %q %v", code, body, err)
		})
		waitNodeReady(t, 90*time.Second)
	})

	// Degraded, in unitletctl status.
	stack.WaitFor(t, 30*time.Second, "unitletctl status config says degraded, naming the field", func(ctx context.Context) (bool, string) {
		out, _ := stack.Exec(podsyncNode, []string{"unitletctl", "status", "config", "-o", "json"}).Output()
		var rows []struct {
			Degraded bool   `json:"degraded"`
			Health   string `json:"health"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal(out, &rows); err != nil || len(rows) != 1 {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		r := rows[0]
		return r.Degraded && r.Health == "SERVING" && strings.Contains(r.Error, "syncFrequency") && strings.Contains(r.Error, "90-config-invalid-test.conf"), string(out)
	})
	// In the node's /healthz.
	stack.WaitFor(t, 30*time.Second, "/healthz fails its unitlet-config check", func(ctx context.Context) (bool, string) {
		code, body, err := getHealthz(ctx)
		return err == nil && code == http.StatusInternalServerError && strings.Contains(body, "[-]unitlet-config failed"), fmt.Sprintf("%d %q %v", code, body, err)
	})
	// On the Node.
	stack.WaitFor(t, 30*time.Second, "a KubeletConfigInvalid event on the Node naming the file and the field", func(ctx context.Context) (bool, string) {
		evs, err := admin(t).CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.kind", "Node"),
			fields.OneTermEqualSelector("involvedObject.name", podsyncNode),
			fields.OneTermEqualSelector("reason", "KubeletConfigInvalid")).String()})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.LastTimestamp.Time.Before(since) && ev.EventTime.Time.Before(since) {
				continue
			}
			seen = append(seen, ev.Type+" "+ev.Message)
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, dropIn) && strings.Contains(ev.Message, "syncFrequency") {
				return true, ev.Message
			}
		}
		return false, fmt.Sprintf("events %q", seen)
	})
	// The node runs on as configured before: Ready, the pod running.
	if n := waitNodeReady(t, 5*time.Second); nodeReady(n).Reason != "KubeletReady" {
		t.Errorf("Ready %+v with a failed reload, want KubeletReady", nodeReady(n))
	}
	running("after the failed reload")

	// A restart with the drop-in stops: exit 2, not restarted by its unit, and its socket
	// stopped with it, so that no client's connection starts it again (each start would
	// stop on the same files, hundreds a minute); the reason is in its journal.
	restartedAt := strings.TrimSpace(stack.InNode(t, podsyncNode, "date", "+%Y-%m-%d %H:%M:%S"))
	if out, err := stack.Exec(podsyncNode, []string{"systemctl", "restart", "unitlet-config.service"}).CombinedOutput(); err == nil {
		t.Errorf("systemctl restart unitlet-config with a drop-in that does not load succeeded:\n%s", out)
	}
	journal := func() string {
		return stack.InNode(t, podsyncNode, "journalctl", "-u", "unitlet-config.service", "--since", restartedAt, "--no-pager", "-o", "cat")
	}
	stack.WaitFor(t, 30*time.Second, "unitlet-config failed with exit 2 and its socket stopped", func(context.Context) (bool, string) {
		svc := stack.UnitProps(t, podsyncNode, "unitlet-config.service", "ActiveState", "Result", "ExecMainStatus", "NRestarts")
		sock := stack.UnitProps(t, podsyncNode, "unitlet-config.socket", "ActiveState")
		ok := svc["ActiveState"] == "failed" && svc["Result"] == "exit-code" && svc["ExecMainStatus"] == "2" && svc["NRestarts"] == "0" && sock["ActiveState"] != "active"
		return ok, fmt.Sprintf("service %v, socket %v", svc, sock)
	})
	if j := journal(); !strings.Contains(j, dropIn) || !strings.Contains(j, "syncFrequency") {
		t.Errorf("the journal of the failed start does not name the drop-in and the field:\n%s", j)
	}
	// The node says unitlet-config is gone; nothing starts it again.
	stack.WaitFor(t, 30*time.Second, "/healthz fails its unitlet-config check with unitlet-config stopped", func(ctx context.Context) (bool, string) {
		code, body, err := getHealthz(ctx)
		return err == nil && code == http.StatusInternalServerError && strings.Contains(body, "[-]unitlet-config failed"), fmt.Sprintf("%d %q %v", code, body, err)
	})
	time.Sleep(10 * time.Second)
	if starts := strings.Count(journal(), "unitlet-config failed"); starts != 1 {
		t.Errorf("unitlet-config failed %d times since the restart, want once (the restart): a client started it again\n%s", starts, journal())
	}
	if n, err := admin(t).CoreV1().Nodes().Get(context.Background(), podsyncNode, metav1.GetOptions{}); err == nil {
		t.Logf("with unitlet-config stopped: Ready %+v", nodeReady(n))
	}
	// The pods are the runtime's: they run on without unitlet-config.
	running("with unitlet-config stopped")
}
