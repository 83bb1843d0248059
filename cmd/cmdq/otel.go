package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cmdq-dev/cmdq"
)

// Tracing of serve and worker: spans are exported over OTLP/HTTP when the
// standard OpenTelemetry environment asks for it, and nothing is set up
// (no exporter, no connection) otherwise (docs/operations.md, "Tracing").
//
// On when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set, or OTEL_TRACES_EXPORTER=otlp; off with OTEL_TRACES_EXPORTER=none
// or OTEL_SDK_DISABLED=true. Everything else is the SDK's own environment
// handling: the exporter's endpoint, headers, timeout, compression and
// certificates (OTEL_EXPORTER_OTLP_*), the sampler (OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG), the batch processor (OTEL_BSP_*), the service
// name and resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; the
// service name defaults to "cmdq").

// tracingOn reports whether the environment asks for span export, or an
// error for a setting cmdq cannot honour.
func tracingOn(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "", "otlp":
	case "none":
		return false, nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: cmdq exports spans with otlp (OTLP over HTTP) or not at all (none)", exporter)
	}
	on := exporter == "otlp" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if !on {
		return false, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s=%q: cmdq exports spans over OTLP/HTTP with protobuf; set it to http/protobuf or leave it unset", name, p)
			}
			break
		}
	}
	return true, nil
}

// setupTracing returns the TracerProvider of serve and worker, or nil
// when the environment does not ask for tracing (see tracingOn): then
// nothing is set up and no connection is ever opened. A provider is also
// the global one (spans the demo handlers start join it), and the global
// propagator is W3C Trace Context. Stop it with stopTracing.
func setupTracing(ctx context.Context, getenv func(string) string, log zerolog.Logger, what, worker string) (*sdktrace.TracerProvider, error) {
	on, err := tracingOn(getenv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx) // endpoint, headers, TLS, … from OTEL_EXPORTER_OTLP_*
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w (check the OTEL_EXPORTER_OTLP_* variables)", err)
	}
	// The worker's name is the resource's service.instance.id: it names
	// the process, once, not on each span (the attempt spans keep to 8
	// attributes: docs/performance.md, "Tracing").
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "cmdq"), attribute.String("service.instance.id", workerName(worker))),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: they win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: the resource from OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)) // sampler: OTEL_TRACES_SAMPLER
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	log.Info().Str("endpoint", endpoint).Str("service", serviceName(res)).Msg(what + ": exporting OpenTelemetry spans over OTLP/HTTP")
	return tp, nil
}

// startTracing is setupTracing on the process's environment.
func startTracing(ctx context.Context, log zerolog.Logger, what, worker string) (*sdktrace.TracerProvider, error) {
	return setupTracing(ctx, os.Getenv, log, what, worker)
}

// workerName is the processor's name for worker (--worker-id): itself,
// or the processor's default (cmdq.DefaultWorker).
func workerName(worker string) string {
	if worker != "" {
		return worker
	}
	return cmdq.DefaultWorker()
}

// stopTracing flushes and stops tp (nil: nothing to do), within 5 s.
func stopTracing(tp *sdktrace.TracerProvider, log zerolog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("tracing: flushing the last spans failed")
	}
}

// serviceName returns the resource's service.name.
func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value("service.name")
	return v.AsString()
}
