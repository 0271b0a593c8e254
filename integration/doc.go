// Package integration holds unitlet's tests against real processes and real systemd tools.
// They run the binaries the Makefile builds (UNITLET_BIN_DIR) or, without it, build them.
package integration
