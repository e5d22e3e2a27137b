package fencelockotel_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelockotel"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Make the Telemetry, pass its hooks to the Client, and the acquires of a
// traced request show up as spans of its trace. (Here the spans are kept
// in memory and the metrics read by hand; a program passes providers with
// its exporters, or sets the global ones, the default.)
func Example() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tel, err := fencelockotel.New(fencelockotel.WithTracerProvider(tp), fencelockotel.WithMeterProvider(mp))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tel.Close()
	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(tel.Hooks()))
	defer locks.Close()

	ctx, request := tp.Tracer("example").Start(context.Background(), "daily report")
	lk, err := locks.TryAcquire(ctx, "report:daily", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := locks.TryAcquire(ctx, "report:daily", time.Minute); err != nil {
		fmt.Println("another instance has the report")
	}
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}
	request.End()

	for _, s := range spans.GetSpans() {
		if s.Name == "daily report" {
			continue
		}
		var outcome string
		for _, a := range s.Attributes {
			if a.Key == "fencelock.outcome" {
				outcome = a.Value.AsString()
			}
		}
		fmt.Println(s.Name, outcome, "in the trace of the request:", s.SpanContext.TraceID() == request.SpanContext().TraceID())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "fencelock.hold" {
			fmt.Println(m.Name, "count:", h.DataPoints[0].Count)
		}
	}
	// Output:
	// another instance has the report
	// fencelock.acquire acquired in the trace of the request: true
	// fencelock.acquire not_acquired in the trace of the request: true
	// fencelock.hold count: 1
}
