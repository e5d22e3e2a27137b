package fencelockotel_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fencelockotel"
	"github.com/fencelock/fencelock/fencelockprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestPrometheusNames drives the scripted run through fencelockprom and
// through fencelockotel, exported by the OTel Prometheus exporter, on the
// same Clients, so that both see the same events, and compares what two
// Prometheus registries gather: the same metric families, byte for byte in
// name, type and help, the same series (label names and values), and the
// same values (the sums of the histograms up to rounding: the observations
// may be added in another order).
func TestPrometheusNames(t *testing.T) {
	promReg := prometheus.NewPedanticRegistry()
	m := fencelockprom.New()
	promReg.MustRegister(m)

	otelReg := prometheus.NewPedanticRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(otelReg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	tel, err := fencelockotel.New(fencelockotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()

	ctx := context.Background()
	scriptRedis(t, ctx, ctx, m.Hooks(), tel.Hooks())

	want := gather(t, promReg)
	got := gather(t, otelReg)
	if len(want) != 8 {
		t.Errorf("fencelockprom gathered %d families, want all 8: %s", len(want), familyNames(want))
	}
	if !slices.Equal(familyNames(got), familyNames(want)) {
		t.Fatalf("families:\n\t%s\nwant (fencelockprom)\n\t%s", strings.Join(familyNames(got), "\n\t"), strings.Join(familyNames(want), "\n\t"))
	}
	for i, w := range want {
		g := got[i]
		if g.GetType() != w.GetType() || g.GetHelp() != w.GetHelp() {
			t.Errorf("%s: type %v, help %q; want %v, %q", w.GetName(), g.GetType(), g.GetHelp(), w.GetType(), w.GetHelp())
		}
		gs, ws := seriesOf(g), seriesOf(w)
		if !slices.Equal(gs, ws) {
			t.Errorf("%s: series\n\t%s\nwant\n\t%s", w.GetName(), strings.Join(gs, "\n\t"), strings.Join(ws, "\n\t"))
		}
	}
	// Both pass Prometheus's lint of names and units.
	for _, reg := range []*prometheus.Registry{promReg, otelReg} {
		problems, err := testutil.GatherAndLint(reg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	families, err := reg.Gather() // sorted by name
	if err != nil {
		t.Fatal(err)
	}
	return families
}

func familyNames(families []*dto.MetricFamily) []string {
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	return names
}

// seriesOf describes the series of a family, one a line, sorted: labels
// and values; a histogram's sum rounded to the microsecond.
func seriesOf(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		slices.Sort(labels)
		var value string
		switch {
		case m.Counter != nil:
			value = fmt.Sprint(m.GetCounter().GetValue())
		case m.Gauge != nil:
			value = fmt.Sprint(m.GetGauge().GetValue())
		case m.Histogram != nil:
			h := m.GetHistogram()
			var buckets []string
			for _, b := range h.GetBucket() {
				buckets = append(buckets, fmt.Sprintf("%g:%d", b.GetUpperBound(), b.GetCumulativeCount()))
			}
			value = fmt.Sprintf("count=%d sum=%.6f buckets=%v", h.GetSampleCount(), math.Round(h.GetSampleSum()*1e6)/1e6, buckets)
		}
		out = append(out, fmt.Sprintf("{%s} %s", strings.Join(labels, ","), value))
	}
	slices.Sort(out)
	return out
}
