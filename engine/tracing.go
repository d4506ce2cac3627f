package engine

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd/syncd/ownership"
	"github.com/syncd/syncd/store"
)

// Tracing (Config.TracerProvider). Two kinds of span:
//
//	syncd.claim  one claim round trip, to one shard: a pick of due items,
//	             or a batch run's named items, with its settle wait.
//	             A claim that found nothing and failed in no way makes
//	             no span: idle polling would flood the backend with
//	             several empty spans a second.
//	syncd.sync   one sync of one item: the sink's call and the release
//	             of its outcome. A root span of its own, linked to the
//	             claim that won its lease (one claim feeds many syncs, and
//	             each item's sync reads best as its own trace). The sink
//	             gets it in its context, so sinks/http and sinks/exec hand
//	             the W3C trace context on to the target.
//
// Without a provider the engine makes no span and takes no time: a nil
// check per claim, and a no-op span value per sync.

// Span names.
const (
	SpanClaim = "syncd.claim"
	SpanSync  = "syncd.sync"
)

// tracerName is the instrumentation scope of the engine's spans.
const tracerName = "github.com/syncd/syncd/engine"

// Span attribute keys.
const (
	attrShard     = attribute.Key("syncd.shard")
	attrClaimKind = attribute.Key("syncd.claim.kind")
	attrSlots     = attribute.Key("syncd.claim.slots")
	attrPicked    = attribute.Key("syncd.claim.picked")
	attrID        = attribute.Key("syncd.item.id")
	attrFence     = attribute.Key("syncd.fence")
	attrAttempt   = attribute.Key("syncd.attempt")
	attrOwner     = attribute.Key("syncd.owner")
	attrProbe     = attribute.Key("syncd.probe")
	attrOutcome   = attribute.Key("syncd.outcome")
	attrRecorded  = attribute.Key("syncd.recorded")
)

// noopSpan is what a sync gets with tracing off: it records nothing.
var noopSpan = trace.SpanFromContext(context.Background())

// newTracer returns the engine's tracer from tp; nil, tracing off, for a
// nil tp.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// claimTrace is a claim's span in the making: the claim's start, kept
// until its outcome says whether the claim is worth a span.
type claimTrace struct {
	start time.Time
	req   claimReq
	slots int
}

// startClaim notes the start of a claim; the zero claimTrace when tracing
// is off.
func (e *Engine) startClaim(req claimReq, slots int) claimTrace {
	if e.tracer == nil {
		return claimTrace{}
	}
	return claimTrace{start: time.Now(), req: req, slots: slots}
}

// endClaim makes the claim's span, from its start to now, unless tracing
// is off or the claim found nothing without an error; it returns the
// span's context, for the links of the syncs it feeds.
func (e *Engine) endClaim(ct claimTrace, picked int, err error) trace.SpanContext {
	if e.tracer == nil || picked == 0 && err == nil {
		return trace.SpanContext{}
	}
	kind := "due"
	if len(ct.req.ids) > 0 {
		kind = "batch"
	}
	outcome := "ok"
	switch {
	case errors.Is(err, ownership.ErrHeldOff):
		outcome = "held_off"
	case errors.Is(err, store.ErrDamaged):
		outcome = "damaged"
	case err != nil:
		outcome = "error"
	}
	_, span := e.tracer.Start(context.Background(), SpanClaim, trace.WithTimestamp(ct.start),
		trace.WithAttributes(attrShard.Int(ct.req.shard), attrClaimKind.String(kind),
			attrSlots.Int(ct.slots), attrPicked.Int(picked), attrOutcome.String(outcome)))
	if err != nil && outcome != "held_off" {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return span.SpanContext()
}

// startSync starts the span of l's sync, linked to the claim that won it,
// and returns ctx carrying it, for the sink. With tracing off it returns
// ctx and a no-op span.
func (e *Engine) startSync(ctx context.Context, l *ownership.Lease, claim trace.SpanContext, probe bool) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, noopSpan
	}
	attrs := []attribute.KeyValue{
		attrID.String(l.ID()),
		// Claims issue no fence past store.MaxFence (2^53-1).
		attrFence.Int64(int64(l.Fence())),
		attrAttempt.Int(l.Attempt()),
		attrOwner.String(l.Owner().String()),
		attrShard.Int(l.Shard()),
	}
	if probe {
		attrs = append(attrs, attrProbe.Bool(true))
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
	if claim.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: claim}))
	}
	return e.tracer.Start(ctx, SpanSync, opts...)
}

// endSync ends the span of a sync with its outcome: what the sink did
// (what, err), whether its release was recorded, and for a lost lease the
// cause from ctx. Anything but a success or a hand-back at shutdown has
// status Error.
func endSync(ctx context.Context, span trace.Span, what outcomeKind, recorded bool, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrOutcome.String(what.String()), attrRecorded.Bool(recorded))
	switch what {
	case outcomeSynced, outcomeShutdown:
	case outcomeLost:
		cause := context.Cause(ctx)
		span.RecordError(cause)
		span.SetStatus(codes.Error, cause.Error())
	default:
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// String is the outcome as spans name it (attribute syncd.outcome).
func (k outcomeKind) String() string {
	switch k {
	case outcomeSynced:
		return "ok"
	case outcomeFailed:
		return "failed"
	case outcomeQuarantined:
		return "quarantined"
	case outcomeLost:
		return "lost"
	case outcomeStale:
		return "stale_fence"
	case outcomeShutdown:
		return "shutdown"
	case outcomeResource:
		return "resource"
	case outcomeUnavailable:
		return "unavailable"
	}
	return "unknown"
}
