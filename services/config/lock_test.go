package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLockIsExclusiveAndReleasedOnClose(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	f, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, LockFile))
	if strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file holds %q, want our pid", b)
	}
	// flock locks belong to the open file description: a second open in the same process
	// conflicts, as a second process would.
	_, err = Lock(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	f.Close()
	f2, err := Lock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	f2.Close()
}
