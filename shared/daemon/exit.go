package daemon

import (
	"context"
	"errors"
	"syscall"

	"github.com/unitlet/unitlet/shared/restart"
)

// Exit codes of every unitlet binary. systemd units set RestartPreventExitStatus=2: a bad
// configuration is not fixed by restarting.
const (
	ExitOK        = 0
	ExitFailure   = 1
	ExitBadConfig = 2
)

type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// ConfigError marks err as the user's configuration being wrong: the process exits with
// ExitBadConfig, and systemd does not start it again. An error that may pass by itself —
// one that wraps an error with a Temporary() bool method returning true, such as a file
// that is not there yet, or the machine's own trouble: a full disk, a quota, an I/O error —
// stays a plain error: exit 1, and systemd tries again. A service whose checkpoint write
// met a full disk for a minute must come back when there is room, not stay down for good.
func ConfigError(err error) error {
	if err == nil || IsConfigError(err) || temporary(err) || machineTrouble(err) {
		return err
	}
	return configError{err}
}

// temporary reports whether err, or an error it wraps, says it may pass by itself.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// machineTrouble reports whether err, or an error it wraps, is the machine's storage or
// memory failing rather than anything in the configuration. EROFS is not among them: a
// read-only filesystem is most often a unit's sandbox (ProtectControlGroups=, say),
// which restarting cannot fix.
func machineTrouble(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EIO, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// IsConfigError reports whether err, or an error it wraps, came from ConfigError.
func IsConfigError(err error) bool {
	var ce configError
	return errors.As(err, &ce)
}

// ExitCode maps the error a service's Run returned to the process's exit code. A stop
// through cancellation, or to restart (a *restart.Error), is a clean exit.
func ExitCode(err error) int {
	var again *restart.Error
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.As(err, &again):
		return ExitOK
	case IsConfigError(err):
		return ExitBadConfig
	default:
		return ExitFailure
	}
}
