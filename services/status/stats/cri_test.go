package stats

import "github.com/unitlet/unitlet/shared/cri"

// The shared CRI client is what the service passes as the Runtime.
var _ Runtime = (*cri.Client)(nil)
