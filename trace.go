package cmdq

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// Tracing with OpenTelemetry (docs/operations.md, "Tracing"). cmdq uses
// the OpenTelemetry API only: the program chooses the SDK and exporter
// (Config.TracerProvider, or the global provider).
//
// An issue is a span "cmdq issue TYPE" (kind producer) in the caller's
// context; its span context (the W3C traceparent and tracestate) is
// stored with the command (properties TraceParent and TraceState of its
// a:cmd row, written by the issue batch) and carried by the issue's own
// message. Each attempt is a span "cmdq process TYPE" (kind consumer),
// a child of the issuing span (a new root with Config.TraceLinkOnly)
// and linked to it, made by the tracing middleware, the outermost of
// every handler's chain: the handler's ctx carries it, so the handler's
// own spans nest under it. It ends once the attempt's outcome is
// recorded, with that outcome as attribute cmdq.outcome.

// instrumentationName names cmdq's tracer (the OpenTelemetry
// instrumentation scope).
const instrumentationName = "github.com/cmdq-dev/cmdq"

// The span attributes (OpenTelemetry semantic conventions for messaging,
// plus cmdq's own).
const (
	attrSystem         = attribute.Key("messaging.system")
	attrOperationType  = attribute.Key("messaging.operation.type")
	attrOperationName  = attribute.Key("messaging.operation.name")
	attrDestination    = attribute.Key("messaging.destination.name")
	attrMessageID      = attribute.Key("messaging.message.id")
	attrConversationID = attribute.Key("messaging.message.conversation_id")
	attrType           = attribute.Key("cmdq.command.type")
	attrAttempt        = attribute.Key("cmdq.attempt")
	attrOutcome        = attribute.Key("cmdq.outcome")
	attrExisting       = attribute.Key("cmdq.existing")
)

// messagingSystem is the spans' messaging.system.
const messagingSystem = "cmdq"

// The attempt outcomes (span attribute cmdq.outcome).
const (
	// OutcomeCompleted: the completion is stored.
	OutcomeCompleted = registry.OutcomeCompleted
	// OutcomeRetrying: the failure is stored; the command runs again after
	// its retry delay.
	OutcomeRetrying = registry.OutcomeRetrying
	// OutcomeDeferred: the deferral (RetryAfter) is stored; the command
	// runs again after its delay, and the attempt did not count toward
	// the poison ceiling.
	OutcomeDeferred = registry.OutcomeDeferred
	// OutcomePoisoned: the command moved to the poison table.
	OutcomePoisoned = registry.OutcomePoisoned
	// OutcomeLeaseLost: the lease ended while the handler ran; another
	// delivery runs the command.
	OutcomeLeaseLost = registry.OutcomeLeaseLost
	// OutcomeCancelled: the command was cancelled while the handler ran.
	OutcomeCancelled = registry.OutcomeCancelled
	// OutcomeSuperseded: the command finished elsewhere, or another
	// delivery took it over, while the handler ran.
	OutcomeSuperseded = registry.OutcomeSuperseded
	// OutcomeInterrupted: the processor stopped while the handler ran.
	OutcomeInterrupted = registry.OutcomeInterrupted
	// OutcomeUnrecorded: storage failed while the outcome was written; the
	// command runs again when its message reappears.
	OutcomeUnrecorded = registry.OutcomeUnrecorded
)

// The stored trace context and the HTTP API's traceparent/tracestate
// headers are W3C Trace Context, whatever global propagator the program
// set: formatTraceParent and parseTraceParent write and read the
// traceparent exactly as propagation.TraceContext does, without its
// carrier and context (no allocation but the formatted string).

// traceParentLen is the length of a version-00 traceparent.
const traceParentLen = 55

// formatTraceParent returns the W3C trace context of sc ("" when it is
// not valid): the traceparent (version 00, the sampled and random flags
// only) and the tracestate.
func formatTraceParent(sc trace.SpanContext) (parent, state string) {
	if !sc.IsValid() {
		return "", ""
	}
	var b [traceParentLen]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	if ts := sc.TraceState(); ts.Len() > 0 {
		state = ts.String()
	}
	return string(b[:]), state
}

// parseTraceParent returns the remote span context a stored W3C trace
// context names (invalid when the traceparent does not parse), by the
// rules of propagation.TraceContext: a version below ff, lower-case hex,
// a non-zero trace and span ID; version 00 has no fifth field (an
// empty one is accepted, as the propagator does) and flags below 4; a
// tracestate that does not parse is ignored.
func parseTraceParent(parent, state string) trace.SpanContext {
	if len(parent) < traceParentLen || parent[2] != '-' || parent[35] != '-' || parent[52] != '-' {
		return trace.SpanContext{}
	}
	var ver, flags [1]byte
	var scc trace.SpanContextConfig
	if !unhex(ver[:], parent[0:2]) || ver[0] == 0xff || !unhex(scc.TraceID[:], parent[3:35]) ||
		!unhex(scc.SpanID[:], parent[36:52]) || !unhex(flags[:], parent[53:55]) {
		return trace.SpanContext{}
	}
	switch {
	case len(parent) > traceParentLen && parent[traceParentLen] != '-':
		return trace.SpanContext{} // a fifth field follows a dash
	case ver[0] == 0 && (len(parent) > traceParentLen+1 || flags[0] > 3):
		return trace.SpanContext{} // version 00: no fifth field, no reserved flag
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	if state != "" {
		scc.TraceState, _ = trace.ParseTraceState(state)
	}
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// unhex decodes lower-case hex src (2 × len(dst) characters) into dst.
func unhex(dst []byte, src string) bool {
	for i := range dst {
		hi, lo := fromHex(src[2*i]), fromHex(src[2*i+1])
		if hi|lo > 0xf {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// fromHex is the value of a lower-case hex digit, else 0xff.
func fromHex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 0xff
}

// withTrace is the issue option that stores the trace context. With corr
// set (the issue span records), it also reads the command's correlation
// ID into *corr (it is the last option: it sees every other's).
func withTrace(parent, state string, corr *string) issuer.IssueOption {
	if corr == nil {
		return func(r *model.Raw) { r.TraceParent, r.TraceState = parent, state }
	}
	return func(r *model.Raw) { r.TraceParent, r.TraceState, *corr = parent, state, r.CorrelationID }
}

// corrOf returns where withTrace reads the correlation ID for span: nil
// when span does not record (no attribute is built, nothing allocated).
func corrOf(span trace.Span) *string {
	if span.IsRecording() {
		return new(string)
	}
	return nil
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// spanNames caches the span names of each command type ("cmdq issue
// TYPE", "cmdq process TYPE"): one string each, not one per span.
var spanNames sync.Map // type → *[2]string

func namesOf(cmdType string) *[2]string {
	if v, ok := spanNames.Load(cmdType); ok {
		return v.(*[2]string)
	}
	v, _ := spanNames.LoadOrStore(cmdType, &[2]string{"cmdq issue " + cmdType, "cmdq process " + cmdType})
	return v.(*[2]string)
}

// The span start options, built once (a variadic option list built per
// span is an allocation).
var (
	issueStart   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	processStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
)

// maxSpanAttrs is the most attributes cmdq sets on a span: 8. The SDK
// de-duplicates a span's attributes when it ends, through a map that
// takes one allocation up to 8 keys and several above (a 9th attribute
// cost ≈ 1 µs and 600 bytes a span: docs/performance.md, "Tracing").
const maxSpanAttrs = 8

// attrBufs holds the attribute lists of ending spans: Span.SetAttributes
// copies what it is given (the SDK's spans keep their own list), so one
// buffer serves span after span instead of one list allocated per span.
var attrBufs = sync.Pool{New: func() any { return new([maxSpanAttrs]attribute.KeyValue) }}

// setAttrs sets n attributes that fill writes into a pooled buffer on
// span, in one call (the SDK's cheapest way).
func setAttrs(span trace.Span, fill func(buf []attribute.KeyValue) []attribute.KeyValue) {
	buf := attrBufs.Get().(*[maxSpanAttrs]attribute.KeyValue)
	attrs := fill(buf[:0])
	span.SetAttributes(attrs...)
	clear(attrs)
	attrBufs.Put(buf)
}

// startIssue starts the issue span of a command of cmdType in ctx (or,
// when parent names a trace context, in that one) and returns the trace
// context to store with the command: the issue span's, or ctx's when
// the provider records nothing.
func (c *Client) startIssue(ctx context.Context, cmdType, parent, state string) (trace.Span, string, string) {
	if parent != "" {
		if sc := parseTraceParent(parent, state); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	_, span := c.tracer.Start(ctx, namesOf(cmdType)[0], issueStart...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		sc = trace.SpanContextFromContext(ctx)
	}
	p, s := formatTraceParent(sc)
	return span, p, s
}

// endIssue ends the issue span of a command of cmdType with the issue's
// result (corr: its correlation ID, "" = none). Its attributes are set
// here, in one call (the SDK's cheapest), and only when the span records:
// a program that does not trace builds none. The correlation ID is the
// issue span's attribute (messaging.message.conversation_id), not the
// attempts': they are its children.
func endIssue(span trace.Span, cmdType, corr string, res Result, err error) {
	if span.IsRecording() {
		setAttrs(span, func(a []attribute.KeyValue) []attribute.KeyValue {
			a = append(a, attrSystem.String(messagingSystem), attrOperationType.String("send"), attrOperationName.String("issue"),
				attrType.String(cmdType), attrMessageID.String(res.ID), attrDestination.String(res.Queue), attrExisting.Bool(res.Existing))
			if corr != "" {
				a = append(a, attrConversationID.String(corr))
			}
			return a
		})
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// tracing is the tracing middleware, the outermost of every handler's
// chain: the attempt's span, in the handler's ctx, ended with the
// attempt's outcome once it is recorded. The span is a child of the
// issuing span (its remote parent in ctx) and linked to it; with
// TraceLinkOnly it is a new root whose start carries the link (so that
// a sampler sees it), else the link is added once it started (the
// parent is what a sampler sees).
func (c *Client) tracing(ctx context.Context, _ any, run *registry.Attempt, next func(context.Context) error) error {
	opts := processStart
	parent := parseTraceParent(run.Trace())
	switch {
	case !parent.IsValid():
	case c.cfg.TraceLinkOnly:
		opts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: parent})}
	default:
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	ctx, span := c.tracer.Start(ctx, namesOf(run.Type())[1], opts...)
	if sc := span.SpanContext(); sc.IsValid() {
		run.SetTraceID(sc.TraceID())
	}
	if span.IsRecording() {
		if parent.IsValid() && !c.cfg.TraceLinkOnly {
			span.AddLink(trace.Link{SpanContext: parent})
		}
		run.OnEnd(func(o registry.Outcome) { endAttempt(span, run, o) })
	} else {
		run.OnEnd(func(registry.Outcome) { span.End() })
	}
	return next(ctx)
}

// endAttempt ends run's recording attempt span with the attempt's 8
// attributes (set in one call) and its outcome o: an outcome other than
// completed records the error and sets the status Error. The worker is
// the process's (the resource's service.instance.id: `cmdq serve` and
// `cmdq worker` set it), the correlation ID the issue span's.
func endAttempt(span trace.Span, run *registry.Attempt, o registry.Outcome) {
	kind := cmp.Or(o.Kind, OutcomeUnrecorded)
	setAttrs(span, func(attrs []attribute.KeyValue) []attribute.KeyValue {
		return append(attrs, attrSystem.String(messagingSystem), attrOperationType.String("process"),
			attrOperationName.String("process"), attrDestination.String(run.Queue()), attrMessageID.String(run.ID()),
			attrType.String(run.Type()), attrAttempt.Int(run.Number()), attrOutcome.String(kind))
	})
	if kind != OutcomeCompleted {
		err := o.Err
		if err == nil {
			err = errors.New("cmdq: attempt " + kind)
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
