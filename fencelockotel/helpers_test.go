package fencelockotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// telemetry is an SDK tracer provider that records every span, and a meter
// provider read on demand.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry() *telemetry {
	sr := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	return &telemetry{
		spans:  sr,
		tp:     sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)),
		reader: reader,
		mp:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	}
}

// spanText describes a span on one line: its name, its parent's name ("-"
// for a root span), its status, its attributes in order of key (those in
// vary as "*", when positive), its events and its links, by name. names maps the
// IDs of the spans ended so far to their names.
func spanText(s sdktrace.ReadOnlySpan, names map[string]string, vary ...attribute.Key) string {
	parent := "-"
	if s.Parent().IsValid() {
		parent = names[s.Parent().SpanID().String()]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s parent=%s", s.Name(), parent)
	if st := s.Status(); st.Code != 0 {
		fmt.Fprintf(&b, " status=%v:%q", st.Code, st.Description)
	}
	b.WriteString(" " + attrText(s.Attributes(), vary))
	for _, e := range s.Events() {
		fmt.Fprintf(&b, " event=%s%s", e.Name, attrText(e.Attributes, vary))
	}
	for _, l := range s.Links() {
		fmt.Fprintf(&b, " link=%s", names[l.SpanContext.SpanID().String()])
	}
	return b.String()
}

// attrText writes attributes as {k=v,...} in order of key; those in vary
// as "*" when positive.
func attrText(attrs []attribute.KeyValue, vary []attribute.Key) string {
	attrs = slices.Clone(attrs)
	slices.SortFunc(attrs, func(a, b attribute.KeyValue) int { return strings.Compare(string(a.Key), string(b.Key)) })
	var parts []string
	for _, a := range attrs {
		v := a.Value.String()
		if slices.Contains(vary, a.Key) && a.Value.AsFloat64() > 0 {
			v = "*"
		}
		parts = append(parts, fmt.Sprintf("%s=%s", a.Key, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// endedSpans describes the spans ended so far, in order of description.
func (tl *telemetry) endedSpans(vary ...attribute.Key) []string {
	return tl.describeEnded(nil, vary)
}

// timedSpans describes the spans ended so far, each after its start (since
// start) and its duration, in order of description.
func (tl *telemetry) timedSpans(start time.Time) []string {
	return tl.describeEnded(&start, nil)
}

func (tl *telemetry) describeEnded(start *time.Time, vary []attribute.Key) []string {
	ended := tl.spans.Ended()
	names := map[string]string{}
	for _, s := range ended {
		names[s.SpanContext().SpanID().String()] = s.Name()
	}
	var out []string
	for _, s := range ended {
		text := spanText(s, names, vary...)
		if start != nil {
			text = fmt.Sprintf("@%v+%v %s", s.StartTime().Sub(*start), s.EndTime().Sub(s.StartTime()), text)
		}
		out = append(out, text)
	}
	slices.Sort(out)
	return out
}

// metricLines collects the metrics and describes each series on a line:
// name{attributes} value, or count=, sum= and the bucket counts of a
// histogram; for the metrics in vary, a histogram's count alone, and no
// value of a sum ("*"). They come sorted.
func (tl *telemetry) metricLines(t *testing.T, vary ...string) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tl.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			varies := slices.Contains(vary, m.Name)
			line := func(set attribute.Set, value string) {
				if varies {
					value = "*"
				}
				out = append(out, fmt.Sprintf("%s%s %s", m.Name, attrText(set.ToSlice(), nil), value))
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					line(p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if varies {
						out = append(out, fmt.Sprintf("%s%s count=%d", m.Name, attrText(p.Attributes.ToSlice(), nil), p.Count))
						continue
					}
					line(p.Attributes, fmt.Sprintf("count=%d sum=%v buckets=%v", p.Count, p.Sum, p.BucketCounts))
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	slices.Sort(out)
	return out
}

// metricValue returns the value part of the line of series (name and
// attributes as metricLines writes them), or "".
func metricValue(lines []string, series string) string {
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

func checkLines(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n\t%s\nwant\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
