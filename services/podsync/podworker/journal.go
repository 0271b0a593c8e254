package podworker

import (
	"os"
	"path/filepath"
)

// startJournal remembers the container starts in flight, one empty file per container ID,
// so that a podsync killed during StartContainer knows after its restart which failed
// starts were its own interruption (containerd cancels a start whose caller goes away)
// rather than the container's failure. The runtime's labels cannot tell the two apart.
type startJournal struct{ dir string }

func (j startJournal) begin(id string) error {
	if j.dir == "" {
		return nil
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(j.dir, id), nil, 0o600)
}

func (j startJournal) end(id string) {
	if j.dir != "" {
		_ = os.Remove(filepath.Join(j.dir, id))
	}
}

func (j startJournal) interrupted(id string) bool {
	if j.dir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(j.dir, id))
	return err == nil
}
