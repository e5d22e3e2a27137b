package fencelockotel

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The span attributes.
const (
	attrKey      = attribute.Key("fencelock.key")
	attrKind     = attribute.Key("fencelock.kind")
	attrOutcome  = attribute.Key("fencelock.outcome")
	attrAttempts = attribute.Key("fencelock.attempts")
	attrFence    = attribute.Key("fencelock.fence")
	attrReason   = attribute.Key("fencelock.reason")
	attrHeld     = attribute.Key("fencelock.held_seconds")
	attrWaited   = attribute.Key("fencelock.waited_seconds")
)

// callKey is the context key of an acquire call's state, one per
// Telemetry, so that the hooks of two Telemetry on one Client each find
// their own span.
type callKey struct{ t *Telemetry }

// acquireCall is what an acquire call's hooks share.
type acquireCall struct {
	span   trace.Span
	parent context.Context // the caller's context, the parent of a hold span
}

// call returns the state that t's AcquireStart put in ctx, or nil.
func (t *Telemetry) call(ctx context.Context) *acquireCall {
	c, _ := ctx.Value(callKey{t}).(*acquireCall)
	return c
}

// startAcquireSpan starts the span of an acquire call.
func (t *Telemetry) startAcquireSpan(ctx context.Context, e fencelock.AcquireEvent) context.Context {
	attrs := make([]attribute.KeyValue, 0, 2)
	attrs = append(attrs, attrKind.String(e.Kind.String()))
	if t.keyAttr != nil {
		attrs = append(attrs, attrKey.String(t.keyAttr(e.Key)))
	}
	sctx, span := t.tracer.Start(ctx, "fencelock.acquire",
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(sctx, callKey{t}, &acquireCall{span: span, parent: ctx})
}

func (t *Telemetry) spanWaitStart(ctx context.Context) {
	if c := t.call(ctx); c != nil {
		c.span.AddEvent("fencelock.wait")
	}
}

func (t *Telemetry) spanWaitDone(ctx context.Context, e fencelock.WaitEvent) {
	if c := t.call(ctx); c != nil {
		c.span.AddEvent("fencelock.wait_done", trace.WithAttributes(attrWaited.Float64(e.Waited.Seconds())))
	}
}

// endAcquireSpan ends the span of an acquire call, and starts the hold's
// with WithHoldSpans.
func (t *Telemetry) endAcquireSpan(ctx context.Context, e fencelock.AcquireEvent) {
	c := t.call(ctx)
	if c == nil {
		return
	}
	c.span.SetAttributes(attrOutcome.String(e.Outcome), attrAttempts.Int(e.Attempts))
	switch e.Outcome {
	case "acquired":
		c.span.SetAttributes(attrFence.Int64(e.Fence))
	case "unavailable", "misconfigured", "invalid":
		c.span.SetStatus(codes.Error, e.Err.Error())
	}
	c.span.End()
	if t.holdSpans && e.Outcome == "acquired" {
		t.startHoldSpan(c, e)
	}
}

// holdID names a hold for its span: re-entries of a lock share its fence,
// and are told apart by order only.
type holdID struct {
	kind  fencelock.Kind
	key   string
	fence int64
}

// holdSpans are the open hold spans (WithHoldSpans).
type holdSpans struct {
	mu    sync.Mutex
	spans map[holdID][]trace.Span
}

func (t *Telemetry) startHoldSpan(c *acquireCall, e fencelock.AcquireEvent) {
	attrs := []attribute.KeyValue{attrKind.String(e.Kind.String()), attrFence.Int64(e.Fence)}
	if t.keyAttr != nil {
		attrs = append(attrs, attrKey.String(t.keyAttr(e.Key)))
	}
	_, span := t.tracer.Start(c.parent, "fencelock.hold", trace.WithAttributes(attrs...),
		trace.WithLinks(trace.Link{SpanContext: c.span.SpanContext()}))
	id := holdID{e.Kind, e.Key, e.Fence}
	t.holds.mu.Lock()
	if t.holds.spans == nil {
		t.holds.spans = map[holdID][]trace.Span{}
	}
	t.holds.spans[id] = append(t.holds.spans[id], span)
	t.holds.mu.Unlock()
}

// takeHoldSpan removes the latest open span of a hold and returns it, or
// nil when there is none.
func (t *Telemetry) takeHoldSpan(kind fencelock.Kind, key string, fence int64) trace.Span {
	if !t.holdSpans {
		return nil
	}
	id := holdID{kind, key, fence}
	t.holds.mu.Lock()
	defer t.holds.mu.Unlock()
	spans := t.holds.spans[id]
	if len(spans) == 0 {
		return nil
	}
	span := spans[len(spans)-1]
	if len(spans) == 1 {
		delete(t.holds.spans, id)
	} else {
		t.holds.spans[id] = spans[:len(spans)-1]
	}
	return span
}

// endHoldSpan ends the span of a released hold, if it has one. lost is the
// loss that ended it, or nil.
func (t *Telemetry) endHoldSpan(kind fencelock.Kind, key string, fence int64, lost *fencelock.LostEvent) trace.Span {
	span := t.takeHoldSpan(kind, key, fence)
	if span == nil {
		return nil
	}
	if lost != nil {
		span.SetAttributes(attrReason.String(lost.Reason))
		span.SetStatus(codes.Error, "lost: "+lost.Reason)
	}
	span.End()
	return span
}

// lostSpan makes the span of a loss: a root span, or the hold span's child.
func (t *Telemetry) lostSpan(e fencelock.LostEvent) {
	parent := context.Background()
	if hold := t.endHoldSpan(e.Kind, e.Key, e.Fence, &e); hold != nil {
		parent = trace.ContextWithSpan(parent, hold)
	}
	attrs := []attribute.KeyValue{attrKind.String(e.Kind.String()), attrFence.Int64(e.Fence),
		attrReason.String(e.Reason), attrHeld.Float64(e.Held.Seconds())}
	if t.keyAttr != nil {
		attrs = append(attrs, attrKey.String(t.keyAttr(e.Key)))
	}
	_, span := t.tracer.Start(parent, "fencelock.lost", trace.WithAttributes(attrs...))
	span.SetStatus(codes.Error, "lost: "+e.Reason)
	span.End()
}

// forceReleaseSpan makes the span of a hold freed by ForceRelease, a child
// of the operator's span.
func (t *Telemetry) forceReleaseSpan(ctx context.Context, e fencelock.ReleaseEvent) {
	attrs := []attribute.KeyValue{attrKind.String(e.Kind.String()), attrFence.Int64(e.Fence), attrReason.String(e.Reason)}
	if t.keyAttr != nil {
		attrs = append(attrs, attrKey.String(t.keyAttr(e.Key)))
	}
	_, span := t.tracer.Start(ctx, "fencelock.force_release", trace.WithAttributes(attrs...))
	span.End()
}
