package vmtest

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestContainerLogLinkUnderTheUnit: on the vm node podsync runs under its shipped unit
// (ProtectSystem=strict): the /var/log/containers link of a started container points at
// its log in /var/log/pods, and it is gone with the pod.
func TestContainerLogLinkUnderTheUnit(t *testing.T) {
	node := vmNode(t).Name
	p := runVMPod(t, vmPod("vm-logged", map[string]string{"c": "echo hello; exec sleep 100000"}))
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	link := "/var/log/containers/vm-logged_default_c-" + id + ".log"
	target := stack.InNode(t, node, "readlink", link)
	if !strings.HasPrefix(target, "/var/log/pods/default_vm-logged_") || !strings.HasSuffix(target, "/c/0.log") {
		t.Errorf("%s -> %q, want the container's log in /var/log/pods", link, target)
	}
	if got := stack.InNode(t, node, "cat", link); !strings.Contains(got, "hello") {
		t.Errorf("the log through %s: %q, want the container's line", link, got)
	}
	if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 2*time.Minute, "the link gone with the pod", func(context.Context) (bool, string) {
		links := stack.InNode(t, node, "ls", "/var/log/containers")
		return !strings.Contains(links, id), "links: " + links
	})
}
