package telemetry

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TestOtelSetTellsPlaceholdersFromProviders: the globals of a process that set nothing are
// placeholders; any provider or propagator a process sets (even a no-op one) counts as set.
func TestOtelSetTellsPlaceholdersFromProviders(t *testing.T) {
	// Nothing in this test binary sets the globals.
	require.False(t, OTelConfigured())
	require.False(t, otelSet(otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()))
	require.True(t, otelSet(tracenoop.NewTracerProvider()))
	require.True(t, otelSet(otel.GetTracerProvider(), metricnoop.NewMeterProvider()))
	require.True(t, otelSet(otel.GetTracerProvider(), otel.GetMeterProvider(), propagation.TraceContext{}))
	require.True(t, otelSet(propagation.NewCompositeTextMapPropagator(propagation.Baggage{})))
}
