package certs

import (
	"crypto/x509"
	"time"
)

// Rotation timing. A certificate is renewed at a random point between 70% and 90% of its
// lifetime, as client-go's certificate manager does, so that the nodes of a cluster whose
// certificates were issued together do not all come back at once; a failed attempt is
// retried with an exponential, jittered backoff.
const (
	backoffStart = 2 * time.Second
	backoffCap   = 5 * time.Minute
)

// rotationDeadline is when to start renewing leaf: NotBefore plus its lifetime times
// 0.7 + 0.2*r, for r in [0, 1).
func rotationDeadline(leaf *x509.Certificate, r float64) time.Time {
	lifetime := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(lifetime*7/10 + time.Duration(float64(lifetime/5)*r))
}

// retryAfter is the wait before the next attempt after failures failed ones in a row (1 or
// more): 2s doubled for each, at most 5 minutes, then jittered down by up to half with r in
// [0, 1) so that nodes that failed together do not retry together.
func retryAfter(failures int, r float64) time.Duration {
	d := backoffStart
	for i := 1; i < failures && d < backoffCap; i++ {
		d *= 2
	}
	d = min(d, backoffCap)
	return d - time.Duration(float64(d/2)*r)
}
