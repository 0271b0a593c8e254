package watch

import "context"

// Serve sends a subscription's events with send until ctx ends (the caller hung up or the
// process is stopping), send fails, or the hub cuts the subscriber off (ErrLagged). It closes
// the subscription.
func Serve[T any](ctx context.Context, sub *Subscription[T], send func(Event[T]) error) error {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sub.Events():
			if !ok {
				if err := sub.Err(); err != nil {
					return err
				}
				return ctx.Err()
			}
			if err := send(ev); err != nil {
				return err
			}
		}
	}
}
