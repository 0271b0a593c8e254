package podsync

import (
	"strings"
	"testing"

	"github.com/unitlet/unitlet/shared/daemon"
)

// UNITLET_CONTAINER_LOG_LINK_DIR is checked where it is read: a relative path is a bad
// configuration (exit 2) that names the variable; the default and absolute paths pass.
func TestContainerLogLinkDirMustBeAbsolute(t *testing.T) {
	cfg, _, err := Command().Parse(nil, map[string]string{})
	if err != nil || cfg.ContainerLogLinkDir != "/var/log/containers" {
		t.Fatalf("default: %q, %v; want /var/log/containers", cfg.ContainerLogLinkDir, err)
	}
	if _, _, err := Command().Parse(nil, map[string]string{"UNITLET_CONTAINER_LOG_LINK_DIR": "/srv/log-links"}); err != nil {
		t.Errorf("an absolute path: %v", err)
	}
	_, _, err = Command().Parse(nil, map[string]string{"UNITLET_CONTAINER_LOG_LINK_DIR": "log-links"})
	if err == nil || !strings.Contains(err.Error(), "UNITLET_CONTAINER_LOG_LINK_DIR") || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("a relative path: %v, want an error naming the variable", err)
	}
	if !daemon.IsConfigError(err) {
		t.Errorf("a relative path: %v is not a configuration error", err)
	}
	// The process settings are still checked.
	if _, _, err := Command().Parse(nil, map[string]string{"UNITLET_SOCKET_DIR": "run"}); err == nil || !strings.Contains(err.Error(), "UNITLET_SOCKET_DIR") {
		t.Errorf("a relative socket directory: %v, want the settings' own error", err)
	}
}
