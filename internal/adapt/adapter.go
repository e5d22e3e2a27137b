package adapt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// adapter is a driver.Store over a Backend and its capability interfaces:
// it sends each request to the method of the request's kind, with the Kind
// cleared (a Backend's requests carry none).
type adapter struct {
	b        driver.Backend
	releases driver.ReleaseNotifier
	changes  driver.ChangeNotifier
	fair     driver.FairBackend
	granter  driver.FairGranter
	handOff  driver.HandOffBackend
	sem      driver.SemaphoreBackend
	rw       driver.RWLockBackend
	checker  driver.Checker
	ticker   driver.Ticker
	inspect  driver.Inspector
}

func newAdapter(b driver.Backend) *adapter {
	a := &adapter{b: b}
	a.releases, _ = b.(driver.ReleaseNotifier)
	a.changes, _ = b.(driver.ChangeNotifier)
	a.fair, _ = b.(driver.FairBackend)
	a.granter, _ = b.(driver.FairGranter)
	a.handOff, _ = b.(driver.HandOffBackend)
	a.sem, _ = b.(driver.SemaphoreBackend)
	a.rw, _ = b.(driver.RWLockBackend)
	a.checker, _ = b.(driver.Checker)
	a.ticker, _ = b.(driver.Ticker)
	a.inspect, _ = b.(driver.Inspector)
	return a
}

// unsupported is the error of a request b has no method for.
func (a *adapter) unsupported(what string) error {
	return fmt.Errorf("%w: %T has no %s", driver.ErrUnsupported, a.b, what)
}

// Supports reports whether b has the methods of kind k.
func (a *adapter) Supports(k driver.Kind) bool {
	switch k {
	case driver.KindLock:
		return true
	case driver.KindSemaphore:
		return a.sem != nil
	case driver.KindRead, driver.KindWrite:
		return a.rw != nil
	}
	return false
}

// Acquire sends req to Acquire, AcquirePermit or AcquireRW.
func (a *adapter) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	k := req.Kind
	if !a.Supports(k) {
		return driver.Result{}, a.unsupported(k.String() + " holds")
	}
	req.Kind = 0
	switch k {
	case driver.KindSemaphore:
		return a.sem.AcquirePermit(ctx, driver.PermitRequest{Request: req, Permits: req.Permits})
	case driver.KindRead, driver.KindWrite:
		return a.rw.AcquireRW(ctx, driver.RWRequest{Request: req, Write: k == driver.KindWrite, Place: req.Place})
	}
	return a.b.Acquire(ctx, req)
}

// Release sends req to Release, ReleasePermit or ReleaseRW.
func (a *adapter) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	k := req.Kind
	if !a.Supports(k) {
		return driver.ReleaseResult{}, a.unsupported(k.String() + " holds")
	}
	req.Kind = 0
	switch k {
	case driver.KindSemaphore:
		return a.sem.ReleasePermit(ctx, req)
	case driver.KindRead, driver.KindWrite:
		return a.rw.ReleaseRW(ctx, req)
	}
	return a.b.Release(ctx, req)
}

// TTL sends ref to TTL, PermitTTL or RWTTL.
func (a *adapter) TTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	k := ref.Kind
	if !a.Supports(k) {
		return 0, a.unsupported(k.String() + " holds")
	}
	ref.Kind = 0
	switch k {
	case driver.KindSemaphore:
		return a.sem.PermitTTL(ctx, ref)
	case driver.KindRead, driver.KindWrite:
		return a.rw.RWTTL(ctx, ref)
	}
	return a.b.TTL(ctx, ref)
}

// renewFunc returns the batch renewal of kind k, nil when b lacks it.
func (a *adapter) renewFunc(k driver.Kind) func(context.Context, []driver.RenewRequest) ([]driver.RenewResult, error) {
	if !a.Supports(k) {
		return nil
	}
	switch k {
	case driver.KindSemaphore:
		return a.sem.RenewPermits
	case driver.KindRead, driver.KindWrite:
		return a.rw.RenewRW
	}
	return a.b.Renew
}

// Renew sends reqs to Renew, RenewPermits or RenewRW. A batch of one kind,
// the usual case, is one call; a batch that mixes them makes one call per
// method, at the same time, so it still takes one round trip. The failure
// of one method's call is a per-hold error of its holds, not of the batch.
func (a *adapter) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	if len(reqs) == 0 {
		return a.b.Renew(ctx, reqs)
	}
	group := func(k driver.Kind) driver.Kind { // read and write holds share RenewRW
		if k == driver.KindWrite {
			return driver.KindRead
		}
		return k
	}
	first := group(reqs[0].Kind)
	mixed := false
	for _, r := range reqs[1:] {
		if group(r.Kind) != first {
			mixed = true
			break
		}
	}
	if !mixed {
		renew := a.renewFunc(first)
		if renew == nil {
			return nil, a.unsupported(first.String() + " holds")
		}
		return renew(ctx, clearKinds(reqs))
	}
	groups := map[driver.Kind][]int{}
	for i, r := range reqs {
		groups[group(r.Kind)] = append(groups[group(r.Kind)], i)
	}
	results := make([]driver.RenewResult, len(reqs))
	var wg sync.WaitGroup
	for k, idx := range groups {
		wg.Go(func() {
			part := make([]driver.RenewRequest, len(idx))
			for j, i := range idx {
				part[j] = reqs[i]
			}
			var res []driver.RenewResult
			var err error
			if renew := a.renewFunc(k); renew == nil {
				err = a.unsupported(k.String() + " holds")
			} else {
				res, err = renew(ctx, clearKinds(part))
			}
			if err == nil && len(res) != len(part) {
				err = fmt.Errorf("backend returned %d results for %d renewals", len(res), len(part))
			}
			for j, i := range idx {
				if err != nil {
					results[i] = driver.RenewResult{Err: err}
				} else {
					results[i] = res[j]
				}
			}
		})
	}
	wg.Wait()
	return results, nil
}

// clearKinds returns reqs with no Kind, copied if any had one.
func clearKinds(reqs []driver.RenewRequest) []driver.RenewRequest {
	for i := range reqs {
		if reqs[i].Kind != 0 {
			out := make([]driver.RenewRequest, len(reqs))
			for j, r := range reqs {
				r.Kind = 0
				out[j] = r
			}
			return out
		}
	}
	return reqs
}

// Check is b's Checker, or nil.
func (a *adapter) Check(ctx context.Context, namespace string) error {
	if a.checker == nil {
		return nil
	}
	return a.checker.Check(ctx, namespace)
}
