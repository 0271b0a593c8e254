// Package restart is how a part of a service asks for the process to start again: it
// returns an *Error, the service's Run returns it, and the process stops as on SIGTERM and
// exits 0 so that systemd's Restart= starts it again (daemon.ExitCode). A library returns
// one without knowing the process runtime.
package restart

import "os"

// Error ends a service that must start again to apply something: a new node
// configuration, new client credentials.
type Error struct{ Reason string }

func (e *Error) Error() string { return "restarting: " + e.Reason }

// Supervised reports whether systemd runs the process as a service (it sets
// INVOCATION_ID), so that an exit is followed by a start.
func Supervised() bool { return os.Getenv("INVOCATION_ID") != "" }
