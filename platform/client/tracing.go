package client

import (
	"reflect"

	"go.opentelemetry.io/otel"
)

// otelGlobalPkg is the package of OpenTelemetry's placeholders: what otel.GetTracerProvider,
// otel.GetMeterProvider and otel.GetTextMapPropagator answer until the process sets its own.
const otelGlobalPkg = "go.opentelemetry.io/otel/internal/global"

// otelConfigured reports whether the process has set an OpenTelemetry tracer provider, meter
// provider or propagator (otel.SetTracerProvider, …). Until it has, the globals are
// placeholders: spans and metrics go nowhere and no trace context is injected into requests,
// so otelgrpc's client stats handler would only cost CPU on every call (bench/PROFILE.md,
// branch p17client). It is platform/server's test (branch p17handler), which this package does
// not import.
func otelConfigured() bool {
	return otelSet(otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator())
}

// otelSet reports whether any of the OpenTelemetry globals given is not the placeholder.
func otelSet(globals ...any) bool {
	for _, g := range globals {
		t := reflect.TypeOf(g)
		if t == nil {
			continue
		}
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.PkgPath() != otelGlobalPkg {
			return true
		}
	}
	return false
}
