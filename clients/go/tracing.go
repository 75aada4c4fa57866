package concurrency

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry (see the README's "Tracing"): the producer writes the trace
// context of its enqueue span into the payload under tracePayloadKey, the
// worker continues it in the task's handle span. The calls go through the
// global tracer provider and propagator (otel.SetTracerProvider,
// otel.SetTextMapPropagator); without an SDK installed every span is a
// non-recording one, and a payload gets a trace context only from a caller
// whose ctx carries one from elsewhere.

// TracePayloadKey ("_trace") is the key of a task's payload under which
// Enqueue, EnqueueBatch and EnqueueGraph store the W3C trace context of the
// enqueue span (an object such as {"traceparent": "00-…", "tracestate":
// "…"}: what the global propagator writes). The Worker removes it from the
// payload it hands a handler.
const TracePayloadKey = tracePayloadKey

// TracerName ("concurrency_ext") is the instrumentation name of the spans of
// this package (the name it asks the global tracer provider for).
const TracerName = traceTracerName

var traceKeyQuoted = []byte(`"` + tracePayloadKey + `"`)

// tracer is the package's tracer from the global provider, asked for at each
// use so that a provider installed later (or replaced) takes effect.
func tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(traceTracerName) }

// spanName is one of the tracing span names with {queue} replaced.
func spanName(pattern, queue string) string { return strings.Replace(pattern, "{queue}", queue, 1) }

var messagingSystem = attribute.String(traceAttrMessagingSystem[0], traceAttrMessagingSystem[1])

// startEnqueueSpan starts the producer's span of an enqueue call and
// returns, as a JSON object, the trace context to store with the tasks: the
// span's, when the caller's ctx has one (or baggage) to continue; nil when
// it has not, so that a call outside any trace leaves the payloads as they
// are.
func startEnqueueSpan(ctx context.Context, queue string) (context.Context, trace.Span, []byte) {
	traced := trace.SpanContextFromContext(ctx).IsValid() || hasBaggage(ctx)
	ctx, span := tracer().Start(ctx, spanName(traceEnqueueSpan, queue), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(messagingSystem, attribute.String(traceAttrQueue, queue))
	}
	if !traced {
		return ctx, span, nil
	}
	return ctx, span, traceCarrier(ctx)
}

// endSpan records err (when not nil) on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceCarrier is the trace context of ctx as the global propagator writes
// it, as a JSON object, or nil when the propagator writes nothing.
func traceCarrier(ctx context.Context) []byte {
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	b, err := json.Marshal(carrier)
	if err != nil {
		return nil
	}
	return b
}

func hasBaggage(ctx context.Context) bool { return baggage.FromContext(ctx).Len() > 0 }

// withTrace returns the JSON text payload with carrier under
// tracePayloadKey: unchanged when carrier is nil, when payload is no JSON
// object (an array, a scalar) or when it has the key already (the caller's).
func withTrace(payload string, carrier []byte) string {
	if carrier == nil {
		return payload
	}
	body := strings.TrimLeft(payload, " \t\r\n")
	if !strings.HasPrefix(body, "{") {
		return payload
	}
	if strings.Contains(body, string(traceKeyQuoted)) {
		var fields map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &fields) != nil {
			return payload // not valid JSON: the server says so
		}
		if _, ok := fields[tracePayloadKey]; ok {
			return payload
		}
	}
	rest := strings.TrimLeft(body[1:], " \t\r\n")
	var b strings.Builder
	b.Grow(len(body) + len(carrier) + len(tracePayloadKey) + 5)
	b.WriteString(`{"` + tracePayloadKey + `":`)
	b.Write(carrier)
	if !strings.HasPrefix(rest, "}") {
		b.WriteByte(',')
	}
	b.WriteString(rest)
	return b.String()
}

// splitTrace returns payload without its top-level tracePayloadKey (the
// rest of its text as it was) and the context that key carried, as the
// global propagator reads it; payload itself and nil when it has no such
// key (or is no JSON object). A key whose value is no object of strings is
// removed and carries nothing.
func splitTrace(payload json.RawMessage) (json.RawMessage, map[string]string) {
	if !bytes.Contains(payload, traceKeyQuoted) {
		return payload, nil
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return payload, nil
	}
	first := true
	for dec.More() {
		start := dec.InputOffset() // after '{' or the previous value, before the comma
		key, err := dec.Token()
		if err != nil {
			return payload, nil
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return payload, nil
		}
		if key != tracePayloadKey {
			first = false
			continue
		}
		end := dec.InputOffset()
		rest := payload[end:]
		if first { // the key's comma follows it
			rest = bytes.TrimLeft(rest, " \t\r\n")
			rest = bytes.TrimLeft(bytes.TrimPrefix(rest, []byte(",")), " \t\r\n")
		}
		out := make(json.RawMessage, 0, int(start)+len(rest))
		out = append(append(out, payload[:start]...), rest...)
		var carrier map[string]string
		if json.Unmarshal(value, &carrier) != nil {
			carrier = nil
		}
		return out, carrier
	}
	return payload, nil
}

// taskSpans are a worker queue's span names, made once.
type taskSpans struct {
	claim, handle, complete, fail string
}

func newTaskSpans(queue string) taskSpans {
	return taskSpans{
		claim:    spanName(traceClaimSpan, queue),
		handle:   spanName(traceHandleSpan, queue),
		complete: spanName(traceCompleteSpan, queue),
		fail:     spanName(traceFailSpan, queue),
	}
}

// startClaimSpan starts the span of one claim of queue: a root of its own
// (not a child of whatever span the context given to Run carries).
func startClaimSpan(ctx context.Context, names taskSpans, queue string) (context.Context, trace.Span) {
	ctx, span := tracer().Start(ctx, names.claim, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(messagingSystem, attribute.String(traceAttrQueue, queue))
	}
	return ctx, span
}

// startHandleSpan takes the trace context out of t's payload (t.Payload
// loses the key) and starts the task's handle span: a child of that context,
// or, without one, a new root linked to the span that claimed the task.
func startHandleSpan(ctx context.Context, names taskSpans, t *Task) (context.Context, trace.Span) {
	payload, carrier := splitTrace(t.Payload)
	t.Payload = payload
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.Int64(traceAttrTaskId, t.ID),
		attribute.String(traceAttrQueue, t.Queue),
		attribute.Int(traceAttrAttempt, int(t.Attempt)),
		messagingSystem,
	)}
	if carrier != nil {
		// only the stored context may be the parent, not a span of the
		// context given to Run
		ctx = otel.GetTextMapPropagator().Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}),
			propagation.MapCarrier(carrier))
		if trace.SpanContextFromContext(ctx).IsValid() {
			return tracer().Start(ctx, names.handle, opts...)
		}
	}
	opts = append(opts, trace.WithNewRoot())
	if t.claimedBy.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: t.claimedBy}))
	}
	return tracer().Start(ctx, names.handle, opts...)
}
