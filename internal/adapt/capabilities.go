package adapt

import (
	"context"

	"github.com/fencelock/fencelock/driver"
)

// Watch sends req to WatchTurn (a waiter's Token), WatchChanges (Changes),
// WatchReleases, WatchPermits or WatchRW.
func (a *adapter) Watch(ctx context.Context, req driver.WatchRequest) (*driver.Watch, error) {
	switch req.Kind {
	case driver.KindSemaphore:
		if a.sem != nil {
			return a.sem.WatchPermits(ctx, req.Namespace, req.Key)
		}
	case driver.KindRead, driver.KindWrite:
		if a.rw != nil {
			return a.rw.WatchRW(ctx, req.Namespace, req.Key)
		}
	case driver.KindLock:
		switch {
		case req.Token != "":
			if a.fair != nil {
				return a.fair.WatchTurn(ctx, req.Namespace, req.Key, req.Token)
			}
			return nil, a.unsupported("line of waiters")
		case req.Changes:
			if a.changes != nil {
				return a.changes.WatchChanges(ctx, req.Namespace, req.Key)
			}
			return nil, a.unsupported("change notifications")
		case a.releases != nil:
			return a.releases.WatchReleases(ctx, req.Namespace, req.Key)
		}
	}
	return nil, a.unsupported(req.Kind.String() + " release notifications")
}

// AcquireInLine sends req to AcquireFairGrant (a place and a grant, with a
// FairGranter) or AcquireFair.
func (a *adapter) AcquireInLine(ctx context.Context, req driver.Request, t driver.Turn) (driver.Result, error) {
	if a.fair == nil || req.Kind != driver.KindLock {
		return driver.Result{}, a.unsupported("line of waiters")
	}
	if t.Place > 0 && t.Grant > 0 && a.granter != nil {
		return a.granter.AcquireFairGrant(ctx, req, t.Place, t.Grant, t.Seq)
	}
	return a.fair.AcquireFair(ctx, req, t.Place)
}

// HandOff sends rel and next to ReleaseHandOff.
func (a *adapter) HandOff(ctx context.Context, rel driver.ReleaseRequest, next driver.Request) (driver.ReleaseResult, driver.Result, error) {
	if a.handOff == nil || rel.Kind != driver.KindLock || next.Kind != driver.KindLock {
		return driver.ReleaseResult{}, driver.Result{}, a.unsupported("hand-offs")
	}
	return a.handOff.ReleaseHandOff(ctx, rel, next)
}

// InspectLock is b's LockInspector.
func (a *adapter) InspectLock(ctx context.Context, namespace, key string) (driver.LockInfo, error) {
	if a.inspect == nil {
		return driver.LockInfo{}, a.unsupported("inspection")
	}
	return a.inspect.InspectLock(ctx, namespace, key)
}

// AcquireTick is b's JobTickBackend.
func (a *adapter) AcquireTick(ctx context.Context, req driver.TickRequest) (driver.TickResult, error) {
	if a.ticker == nil || req.Kind != driver.KindLock {
		return driver.TickResult{}, a.unsupported("record of job ticks")
	}
	return a.ticker.AcquireTick(ctx, req)
}

// Close closes b when it has a Close method.
func (a *adapter) Close() error {
	if c, ok := a.b.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

var (
	_ driver.Store     = (*adapter)(nil)
	_ driver.Notifier  = (*adapter)(nil)
	_ driver.Lines     = (*adapter)(nil)
	_ driver.Inspector = (*adapter)(nil)
	_ driver.Ticker    = (*adapter)(nil)
)
