// Package systemd holds unitlet's unit files; its tests verify them with systemd-analyze.
package systemd
