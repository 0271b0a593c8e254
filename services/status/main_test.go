package status

import (
	"slices"
	"testing"
)

func TestNodeAPIUsersFromTheEnvironment(t *testing.T) {
	cfg, _, err := Command().Parse(nil, map[string]string{"UNITLET_NODE_API_USERS": "operator,backup"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.NodeAPIUsers, []string{"operator", "backup"}) {
		t.Errorf("NodeAPIUsers = %q, want [operator backup]", cfg.NodeAPIUsers)
	}
	cfg, _, err = Command().Parse(nil, map[string]string{})
	if err != nil || len(cfg.NodeAPIUsers) != 0 {
		t.Errorf("unset: %q, %v; want none", cfg.NodeAPIUsers, err)
	}
}
