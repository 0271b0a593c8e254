// Package version holds what a unitlet binary reports about its build. The Makefile sets
// Version and GitCommit with -ldflags "-X"; a plain `go build` reports "dev".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

var (
	// Version is the release, e.g. "v0.1.0" or "v0.1.0-3-gabcdef0-dirty" (git describe).
	Version = "dev"
	// GitCommit is the commit the binary was built from.
	GitCommit = ""
)

// Commit returns GitCommit, or the VCS revision Go recorded in the binary when the linker
// flag was not set.
func Commit() string {
	if GitCommit != "" {
		return GitCommit
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// String is the line a binary prints for --version.
func String(binary string) string {
	return fmt.Sprintf("%s %s (commit %s, %s %s/%s)", binary, Version, Commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
