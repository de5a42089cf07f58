// Package etcdretry makes one etcd request again while etcd cannot
// answer it (a member gone, an election), within the bound of the
// operation it serves: a lock wait or a commit pauses through an
// election instead of failing.
package etcdretry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNoAnswer: etcd did not answer within the operation's bound.
var ErrNoAnswer = errors.New("etcd did not answer in time")

// Retryable reports whether the same request may succeed if made again:
// one call ran out of time (its member is gone or cut off), or etcd
// answered that it has no leader, that the leader changed, or that it
// is overloaded. A refusal (auth, a lease not found, a compaction) is
// not retryable.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true // one call's deadline: Do checks the operation's own
	}
	if errors.Is(rpctypes.Error(err), rpctypes.ErrTooManyRequests) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.Unknown:
		// A member whose own wait for the request's deadline ended
		// (no leader to commit it) says so as an unknown error.
		return s.Message() == context.DeadlineExceeded.Error()
	}
	return false
}

// Backoff is the pause after the first failed call; it doubles up to
// MaxBackoff.
const (
	Backoff    = 50 * time.Millisecond
	MaxBackoff = 500 * time.Millisecond
)

// Do runs call with a context bounded by per (and by ctx), again after
// each retryable failure, with a growing pause, until it succeeds,
// fails for good, or ctx ends. A failure for good is returned as is;
// ctx ending after a retryable failure is ErrNoAnswer with the last
// failure; ctx ending otherwise is ctx's error (a wait's own bound).
func Do(ctx context.Context, per time.Duration, call func(context.Context) error) error {
	pause, failed := Backoff, false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, per)
		err := call(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if failed || !errors.Is(err, ctx.Err()) {
				return fmt.Errorf("%w: %v", ErrNoAnswer, err)
			}
			return ctx.Err()
		}
		if !Retryable(err) {
			return err
		}
		failed = true
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %v", ErrNoAnswer, err)
		case <-t.C:
		}
		pause = min(2*pause, MaxBackoff)
	}
}
