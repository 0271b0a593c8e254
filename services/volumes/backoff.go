package volumes

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// The kubelet's backoff of a failed volume operation: half a second after the first
// failure, doubled after each, at most 2 min 2 s.
const (
	operationBackoffFirst = 500 * time.Millisecond
	operationBackoffMax   = 2*time.Minute + 2*time.Second
)

// operationError is the failure of a volume operation: a mount, a driver's call, the wait
// for an attachment. The volume's next try waits out an exponential backoff, as the
// kubelet's operations do, so a failing driver is not called at every prepare. A claim
// that is not bound yet is no operation's failure: it is read again at every try.
type operationError struct{ err error }

func (e *operationError) Error() string { return e.err.Error() }
func (e *operationError) Unwrap() error { return e.err }

// operationFailed marks err, when there is one, as an operation's failure.
func operationFailed(err error) error {
	if err == nil {
		return nil
	}
	return &operationError{err: err}
}

// operationBackoff holds each pod volume's backoff and last failure.
type operationBackoff struct {
	b   *flowcontrol.Backoff
	clk clock.Clock

	mu   sync.Mutex
	last map[string]failure
}

type failure struct {
	err error
	at  time.Time
}

func newOperationBackoff(clk clock.Clock) *operationBackoff {
	b := flowcontrol.NewBackOff(operationBackoffFirst, operationBackoffMax)
	b.Clock = clk
	return &operationBackoff{b: b, last: map[string]failure{}, clk: clk}
}

func backoffKey(uid types.UID, volume string) string { return string(uid) + "/" + volume }

// wait is the error of a volume whose last operation failed and whose backoff is not over
// yet, in the kubelet's words; nil when it may be tried.
func (o *operationBackoff) wait(uid types.UID, volume string) error {
	key := backoffKey(uid, volume)
	o.mu.Lock()
	f, ok := o.last[key]
	o.mu.Unlock()
	d := o.b.Get(key)
	if !ok || d == 0 || !o.clk.Now().Before(f.at.Add(d)) {
		return nil
	}
	return fmt.Errorf("no retries permitted until %s (durationBeforeRetry %s); the last try failed: %w", f.at.Add(d).UTC().Format(time.RFC3339Nano), d, f.err)
}

// done records the outcome of a volume's set-up: an operation's failure grows its
// backoff; a success ends it; any other failure leaves it as it is.
func (o *operationBackoff) done(uid types.UID, volume string, err error) {
	key := backoffKey(uid, volume)
	var op *operationError
	switch {
	case err == nil:
		o.b.Reset(key)
		o.mu.Lock()
		delete(o.last, key)
		o.mu.Unlock()
	case errors.As(err, &op):
		now := o.clk.Now()
		o.b.Next(key, now)
		o.mu.Lock()
		o.last[key] = failure{err: err, at: now}
		o.mu.Unlock()
	}
}

// forget drops the backoffs of a released pod's volumes, and those that have expired
// (the backoff's own rule: twice the longest backoff without a failure).
func (o *operationBackoff) forget(uid types.UID) {
	o.b.GC()
	prefix := string(uid) + "/"
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, f := range o.last {
		if strings.HasPrefix(key, prefix) || o.clk.Since(f.at) > 2*operationBackoffMax {
			o.b.Reset(key)
			delete(o.last, key)
		}
	}
}
