package etcdretry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrGRPCNoLeader, true},
		{rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrGRPCTimeoutDueToLeaderFail, true},
		{rpctypes.ErrTooManyRequests, true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.Unknown, "context deadline exceeded"), true},
		{status.Error(codes.Unknown, "something else"), false},
		{rpctypes.ErrLeaseNotFound, false},
		{rpctypes.ErrGRPCLeaseNotFound, false},
		{rpctypes.ErrAuthFailed, false},
		{rpctypes.ErrCompacted, false},
		{rpctypes.ErrNoSpace, false},
		{context.Canceled, false},
		{errors.New("other"), false},
	} {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestDoRetriesUntilAnswer(t *testing.T) {
	calls := 0
	err := Do(context.Background(), time.Second, func(context.Context) error {
		calls++
		if calls < 3 {
			return rpctypes.ErrLeaderChanged
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want nil after 3", err, calls)
	}
}

func TestDoStopsAtRefusal(t *testing.T) {
	calls := 0
	err := Do(context.Background(), time.Second, func(context.Context) error {
		calls++
		return rpctypes.ErrLeaseNotFound
	})
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) || calls != 1 {
		t.Fatalf("err %v after %d calls, want the refusal after 1", err, calls)
	}
}

func TestDoGivesUpWithCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Do(ctx, time.Second, func(context.Context) error {
		calls++
		if calls == 2 {
			cancel()
		}
		return rpctypes.ErrNoLeader
	})
	if !errors.Is(err, ErrNoAnswer) || calls != 2 {
		t.Fatalf("err %v after %d calls, want ErrNoAnswer after 2", err, calls)
	}
}

func TestDoBoundsEachCall(t *testing.T) {
	calls := 0
	err := Do(context.Background(), time.Millisecond, func(ctx context.Context) error {
		calls++
		if calls == 1 {
			<-ctx.Done() // a member that does not answer
			return ctx.Err()
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("err %v after %d calls, want nil after 2", err, calls)
	}
}
