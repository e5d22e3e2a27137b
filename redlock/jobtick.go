package redlock

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock/driver"
)

// Job ticks across the quorum (driver.Ticker): see the package
// documentation, "Job ticks", for why a tick runs at most once.

// AcquireTick implements driver.Ticker over the masters (see
// the package documentation, "Job ticks"). A master where an earlier attempt's undo of this token was not
// confirmed does not count toward the grants.
func (b *Backend) AcquireTick(ctx context.Context, req driver.TickRequest) (driver.TickResult, error) {
	if err := plainOnly(req.Kind); err != nil {
		return driver.TickResult{}, err
	}
	answers := each(b, ctx, func(ctx context.Context, _ int, n node) (driver.TickResult, error) {
		return n.b.AcquireTick(ctx, req)
	})
	errs, invalid := failures(answers)
	if invalid != nil {
		return driver.TickResult{}, invalid
	}
	poisoned := b.poisoned.get(req.Ref)
	type claim struct{ tick, token string }
	claims := map[claim]int{}
	var top claim
	var granted []int
	var fence int64
	holds, unknown, topCount := 0, 0, 0
	var holder driver.Result // a refusal by the holder: its shortest lease
	for i, a := range answers {
		switch {
		case a.err != nil:
			if !poisoned.has(i) {
				unknown++
			}
		case a.val.Claimed:
			// Another token's record: it is what it is on any master.
			c := claim{a.val.LastTick, a.val.LastToken}
			claims[c]++
			if claims[c] > topCount {
				top, topCount = c, claims[c]
			}
		case poisoned.has(i):
			// Its grant may be taken away at any moment: undo releases it.
		case a.val.Acquired:
			granted = append(granted, i)
			fence = max(fence, a.val.Fence)
			holds = max(holds, a.val.Holds)
		case a.val.HolderTTL > 0 && (holder.HolderTTL == 0 || a.val.HolderTTL < holder.HolderTTL):
			holder.HolderTTL = a.val.HolderTTL
		}
	}
	acquired := make([]answer[driver.Result], len(answers))
	for i, a := range answers {
		acquired[i] = answer[driver.Result]{a.val.Result, a.err}
	}
	if len(granted) >= b.quorum {
		if err := b.raise(ctx, req.Request, granted, fence); err != nil {
			b.undoClaims(req.Request, acquired)
			return driver.TickResult{}, err
		}
		return driver.TickResult{Result: driver.Result{Acquired: true, Fence: fence, Holds: holds, Validity: b.Validity(req.TTL)}}, nil
	}
	b.undoClaims(req.Request, acquired)
	if topCount >= b.quorum {
		return driver.TickResult{Claimed: true, LastTick: top.tick, LastToken: top.token}, nil
	}
	if len(granted)+unknown >= b.quorum {
		return driver.TickResult{}, &QuorumError{Op: "acquire", Need: b.quorum, Answers: len(b.nodes) - len(errs), Errs: errs}
	}
	return driver.TickResult{Result: holder}, nil
}

// undoClaims is undo for a tick acquisition: on each master that granted
// it, the hold is released, then the claim of the tick taken back. A
// master where either was not confirmed is marked for the token.
func (b *Backend) undoClaims(req driver.Request, answers []answer[driver.Result]) {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	undone := each(b, ctx, func(ctx context.Context, i int, n node) (struct{}, error) {
		if a := answers[i]; a.err != nil || !a.val.Acquired {
			return struct{}{}, nil
		}
		if _, err := n.b.Release(ctx, driver.ReleaseRequest{Ref: req.Ref}); err != nil {
			return struct{}{}, err
		}
		_, err := n.b.UndoTickClaim(ctx, req.Namespace, req.Key, req.Token)
		return struct{}{}, err
	})
	var late []int
	for i, r := range undone {
		if r.err != nil && !errors.Is(r.err, driver.ErrNotSent) {
			late = append(late, i)
		}
	}
	b.poisoned.add(req.Ref, len(b.nodes), late)
}
