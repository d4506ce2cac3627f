package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is off unless the standard OpenTelemetry environment turns it
// on (there are no config-file keys for it):
//
//	OTEL_SDK_DISABLED=true          off, whatever else is set
//	OTEL_TRACES_EXPORTER=none       off
//	OTEL_TRACES_EXPORTER=otlp       on (otlp among a list: on; other
//	                                names are warned about and ignored)
//	OTEL_EXPORTER_OTLP_ENDPOINT     on when set and OTEL_TRACES_EXPORTER
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  is unset
//
// Spans go out over OTLP/HTTP (protobuf), in batches; the exporter reads
// the rest of OTEL_EXPORTER_OTLP_* (headers, TLS, timeout, compression),
// the SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*, and the resource
// takes OTEL_SERVICE_NAME (default "syncd") and OTEL_RESOURCE_ATTRIBUTES.

// tracingShutdownTimeout bounds the flush of the last spans at exit.
const tracingShutdownTimeout = 5 * time.Second

// tracingWanted reports whether the environment (getenv) turns tracing
// on, and warns through log about settings syncd cannot honour.
func tracingWanted(getenv func(string) string, log zerolog.Logger) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" && p != "http/protobuf" {
			log.Warn().Str("variable", v).Str("value", p).Msg("tracing: only OTLP over http/protobuf is supported; sending that")
		}
	}
	exporters := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if exporters == "" {
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	}
	on := false
	for name := range strings.SplitSeq(exporters, ",") {
		switch name = strings.ToLower(strings.TrimSpace(name)); name {
		case "otlp":
			on = true
		case "none", "":
		default:
			log.Warn().Str("exporter", name).Msg("tracing: OTEL_TRACES_EXPORTER names an exporter syncd does not have (only otlp); ignored")
		}
	}
	return on
}

// startTracing returns the tracer provider the process's environment
// asks for (see above) and a function that flushes and stops it; a nil
// provider and a no-op when tracing is off. The exporter, the SDK and the
// resource read the environment themselves.
func startTracing(ctx context.Context, log zerolog.Logger) (trace.TracerProvider, func(), error) {
	if !tracingWanted(os.Getenv, log) {
		return nil, func() {}, nil
	}
	// The SDK reports export failures through otel's global handler,
	// which would print to stderr past our logger.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Err(err).Msg("tracing: export failed")
	}))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName("syncd"), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		exp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	service, _ := res.Set().Value(semconv.ServiceNameKey)
	log.Info().Str("endpoint", tracesEndpoint(os.Getenv)).Str("service", service.AsString()).
		Msg("tracing on: spans go over OTLP/HTTP")
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn().Err(err).Msg("tracing: flushing the last spans failed")
		}
	}
	return tp, stop, nil
}

// tracesEndpoint is where the exporter sends spans, as the OTLP
// exporter's rules resolve it, for the log: without userinfo and query,
// which may hold credentials.
func tracesEndpoint(getenv func(string) string) string {
	if e := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); e != "" {
		return shownURL(e)
	}
	if e := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); e != "" {
		return strings.TrimSuffix(shownURL(e), "/") + "/v1/traces"
	}
	return "https://localhost:4318/v1/traces (the default)"
}

// shownURL is raw without userinfo and query; an unparsable raw is not
// shown.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
