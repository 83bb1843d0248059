package cmdq

import (
	"cmp"
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
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
	attrWorker         = attribute.Key("cmdq.worker")
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

// w3c is the propagator of the stored trace context and of the HTTP API's
// traceparent/tracestate headers: W3C Trace Context, whatever global
// propagator the program set.
var w3c propagation.TraceContext

// traceCarrier is a propagation.TextMapCarrier of the two W3C fields,
// without a map.
type traceCarrier struct{ parent, state string }

func (c *traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c *traceCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}

func (c *traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// injectTrace returns the W3C trace context of ctx's span ("" when it has
// no valid span context).
func injectTrace(ctx context.Context) (parent, state string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	var c traceCarrier
	w3c.Inject(ctx, &c)
	return c.parent, c.state
}

// extractTrace returns the span context a stored W3C trace context names
// (invalid when it does not parse).
func extractTrace(parent, state string) trace.SpanContext {
	if parent == "" {
		return trace.SpanContext{}
	}
	ctx := w3c.Extract(context.Background(), &traceCarrier{parent: parent, state: state})
	return trace.SpanContextFromContext(ctx)
}

// withTrace is the issue option that stores the trace context.
func withTrace(parent, state string) issuer.IssueOption {
	return func(r *Raw) { r.TraceParent, r.TraceState = parent, state }
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

// startIssue starts the issue span of a command of cmdType in ctx (or,
// when parent names a trace context, in that one) and returns the trace
// context to store with the command: the issue span's, or ctx's when
// the provider records nothing.
func (c *Client) startIssue(ctx context.Context, cmdType, parent, state string) (trace.Span, string, string) {
	if parent != "" {
		if sc := extractTrace(parent, state); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := c.tracer.Start(ctx, namesOf(cmdType)[0], trace.WithSpanKind(trace.SpanKindProducer))
	p, s := injectTrace(ctx)
	return span, p, s
}

// endIssue ends the issue span of a command of cmdType with the issue's
// result. Its attributes are set here, in one call (the SDK's cheapest),
// and only when the span records: a program that does not trace builds
// none.
func endIssue(span trace.Span, cmdType string, res Result, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrSystem.String(messagingSystem), attrOperationType.String("send"), attrOperationName.String("issue"),
			attrType.String(cmdType), attrMessageID.String(res.ID), attrDestination.String(res.Queue), attrExisting.Bool(res.Existing))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// tracing is the tracing middleware, the outermost of every handler's
// chain: the attempt's span, in the handler's ctx, ended with the
// attempt's outcome once it is recorded.
func (c *Client) tracing(ctx context.Context, _ any, run *registry.Run, next func(context.Context) error) error {
	opts := make([]trace.SpanStartOption, 0, 3)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer))
	if parent := extractTrace(run.Trace()); parent.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: parent}))
		if c.cfg.TraceLinkOnly {
			opts = append(opts, trace.WithNewRoot())
		} else {
			ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		}
	}
	ctx, span := c.tracer.Start(ctx, namesOf(run.Type())[1], opts...)
	if sc := span.SpanContext(); sc.IsValid() {
		run.SetTraceID(sc.TraceID())
	}
	if span.IsRecording() {
		run.OnEnd(func(o registry.Outcome) { c.endAttempt(span, run, o) })
	} else {
		run.OnEnd(func(registry.Outcome) { span.End() })
	}
	return next(ctx)
}

// endAttempt ends a recording attempt span with the attempt's attributes
// (set in one call) and its outcome: an outcome other than completed
// records the error and sets the status Error.
func (c *Client) endAttempt(span trace.Span, run *registry.Run, o registry.Outcome) {
	kind := cmp.Or(o.Kind, OutcomeUnrecorded)
	attrs := make([]attribute.KeyValue, 0, 11)
	attrs = append(attrs, attrSystem.String(messagingSystem), attrOperationType.String("process"),
		attrOperationName.String("process"), attrDestination.String(run.Queue()), attrMessageID.String(run.ID()),
		attrType.String(run.Type()), attrAttempt.Int(run.Attempt()), attrOutcome.String(kind))
	if c.workerName != "" {
		attrs = append(attrs, attrWorker.String(c.workerName))
	}
	if cid := run.CorrelationID(); cid != "" {
		attrs = append(attrs, attrConversationID.String(cid))
	}
	span.SetAttributes(attrs...)
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
