package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The plot: a hand-written SVG with two rows of small charts. Top:
// throughput per library for each throughput workload (bars at the median,
// a thin line from the lowest to the highest round). Bottom: wait
// percentiles per library (log scale), for the uncontended acquire, both
// contended workloads and the held-locks probe.

const (
	svgWidth   = 1240
	panelW     = 285
	panelH     = 230
	panelGapX  = 20
	marginLeft = 30
	topRowY    = 95
	bottomRowY = 390
	svgHeight  = 690
)

var palette = map[string]string{
	fencelockName:     "#1f5fbf",
	fencelockDoName:   "#7fa8e6",
	fencelockFairName: "#0b3d91",
	fencelockRueidis:  "#17becf",
	"redsync":         "#d62728",
	"redislock":       "#ff8c1a",
	"rueidislock":     "#2ca02c",
	fencedFloorName:   "#aaaaaa",
	backendAloneName:  "#9db7dd",
	fairFloorName:     "#555555",
}

func colour(lib string) string {
	if c, ok := palette[lib]; ok {
		return c
	}
	return "#888888"
}

// plot returns the SVG of r.
func plot(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(&b, marginLeft, 28, 18, "start", "bold", "fencelock and its peers on one redis-server: throughput and wait percentiles")
	text(&b, marginLeft, 48, 12, "start", "", fmt.Sprintf("%s; Go %s, %d CPUs, redis %s; median of %d rounds; load %s",
		r.Measured, r.GoVersion, r.CPUs, r.RedisVersion, r.Rounds, loads(r.Loads)))

	// Legend.
	x := marginLeft
	for _, lib := range r.Results {
		fmt.Fprintf(&b, `<rect x="%d" y="60" width="14" height="14" fill="%s"/>`+"\n", x, colour(lib.Library))
		text(&b, x+20, 72, 12, "start", "", lib.Library)
		x += 40 + 8*len(lib.Library)
	}

	bars := []struct{ workload, title string }{
		{"serial", "1 goroutine: cycles/s"},
		{"parallel64", "64 goroutines, distinct keys: cycles/s"},
		{"contended", "16 workers, 1 process, one key: hand-offs/s"},
		{"contended-procs", fmt.Sprintf("%d procs × %d workers, one key: hand-offs/s", r.Procs, r.ProcWorkers)},
	}
	for i, p := range bars {
		bound := 0.0
		if p.workload == "serial" {
			bound = r.Ping.OpsPerSec / 2
		}
		barPanel(&b, r, marginLeft+i*(panelW+panelGapX), topRowY, p.workload, p.title, bound)
	}
	lines := []struct{ workload, title string }{
		{"serial", "1 goroutine: acquire latency"},
		{"contended", "16 workers, 1 process: wait for the lock"},
		{"contended-procs", fmt.Sprintf("%d procs × %d workers: wait for the lock", r.Procs, r.ProcWorkers)},
		{"held", fmt.Sprintf("%s held locks: lock+unlock of another key", count(float64(r.Held)))},
	}
	for i, p := range lines {
		percentilePanel(&b, r, marginLeft+i*(panelW+panelGapX), bottomRowY, p.workload, p.title)
	}
	text(&b, marginLeft, svgHeight-30, 11, "start", "", fmt.Sprintf(
		"Every acquire with its own request context (timeout %s). fencelock: Client.Acquire + Release; fencelock-Do: Client.Do. "+
			"Bars: the median round; thin line: lowest to highest round.", r.Request))
	text(&b, marginLeft, svgHeight-14, 11, "start", "", fmt.Sprintf(
		"redsync retries every %v, redislock backs off linearly by %v, rueidislock: its defaults, KeyMajority 1, NoLoopTracking, client-side caching. "+
			"Held locks: ttl %s, renewed every %s.", redsyncRetryDelay, redislockBackoff, r.HeldTTL, r.HeldRenew))
	b.WriteString("</svg>\n")
	return b.String()
}

func text(b *strings.Builder, x, y, size int, anchor, weight, s string) {
	w := ""
	if weight != "" {
		w = fmt.Sprintf(` font-weight="%s"`, weight)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" text-anchor="%s"%s>%s</text>`+"\n", x, y, size, anchor, w, html.EscapeString(s))
}

// barPanel draws one library bar per result of workload, with the rounds'
// spread and, if bound > 0, a dashed line at bound.
func barPanel(b *strings.Builder, r *report, x0, y0 int, workload, title string, bound float64) {
	type bar struct {
		lib          string
		v, low, high float64
	}
	var bs []bar
	top := bound
	for _, x := range r.Results {
		f, ok := x.Median[workload]
		if !ok {
			continue
		}
		lo, hi := spread(x.Rounds[workload], func(f *figures) *float64 { return &f.OpsPerSec })
		bs = append(bs, bar{x.Library, f.OpsPerSec, lo, hi})
		top = max(top, hi)
	}
	text(b, x0, y0, 11, "start", "bold", title)
	if len(bs) == 0 || top <= 0 {
		return
	}
	step := niceStep(top * 1.1 / 5) // room for the labels above the bars
	ticks := int(math.Ceil(top * 1.1 / step))
	top = step * float64(ticks)
	plotTop, plotH := y0+15, panelH-60
	base := plotTop + plotH
	left := x0 + 45
	width := panelW - 50
	// Axis and grid.
	for i := 0; i <= ticks; i++ {
		v := step * float64(i)
		y := base - int(float64(plotH)*v/top)
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e0e0e0"/>`+"\n", left, y, left+width, y)
		text(b, left-4, y+4, 10, "end", "", shortCount(v))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, base, left+width, base)
	slot := width / len(bs)
	bw := slot * 2 / 3
	yOf := func(v float64) int { return base - int(float64(plotH)*v/top) }
	for i, br := range bs {
		bx := left + i*slot + (slot-bw)/2
		y := yOf(br.v)
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
			bx, y, bw, base-y, colour(br.lib), html.EscapeString(br.lib), count(br.v))
		cx := bx + bw/2
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222" stroke-width="1"/>`+"\n", cx, yOf(br.high), cx, yOf(br.low))
		text(b, cx, yOf(br.high)-4, 10, "middle", "", shortCount(br.v))
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" text-anchor="end" transform="rotate(-35 %d %d)">%s</text>`+"\n",
			cx+4, base+14, cx+4, base+14, html.EscapeString(br.lib))
	}
	if bound > 0 {
		y := yOf(bound)
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" stroke-dasharray="5,4"/>`+"\n", left, y, left+width, y)
		// At the left end, over the first bars (fencelock's, below the
		// bound), where it does not run into the tallest bars' labels.
		text(b, left+4, y-4, 10, "start", "", "2×PING bound "+shortCount(bound))
	}
}

// percentilePanel draws wait percentiles (p50 … max) per library on a log
// scale.
func percentilePanel(b *strings.Builder, r *report, x0, y0 int, workload, title string) {
	names := []string{"p50", "p90", "p99", "p99.9", "max"}
	get := func(f figures) []float64 { return []float64{f.WaitP50, f.WaitP90, f.WaitP99, f.WaitP999, f.WaitMax} }
	lo, hi := math.Inf(1), math.Inf(-1)
	var libs []*libResult
	for _, x := range r.Results {
		f, ok := x.Median[workload]
		if !ok {
			continue
		}
		libs = append(libs, x)
		for _, v := range get(f) {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	text(b, x0, y0, 11, "start", "bold", title)
	if len(libs) == 0 || math.IsInf(lo, 0) {
		return
	}
	e0, e1 := math.Floor(math.Log10(lo)+1e-3), math.Ceil(math.Log10(hi)-1e-3)
	if e1 <= e0 {
		e1 = e0 + 1
	}
	plotTop, plotH := y0+15, panelH-60
	base := plotTop + plotH
	left := x0 + 50
	width := panelW - 60
	yOf := func(v float64) int {
		return base - int(float64(plotH)*(math.Log10(v)-e0)/(e1-e0))
	}
	for e := e0; e <= e1; e++ {
		y := yOf(math.Pow(10, e))
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e0e0e0"/>`+"\n", left, y, left+width, y)
		text(b, left-4, y+4, 10, "end", "", duration(math.Pow(10, e)))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, base, left+width, base)
	step := width / (len(names) - 1)
	for i, n := range names {
		text(b, left+i*step, base+16, 10, "middle", "", n)
	}
	for _, x := range libs {
		vs := get(x.Median[workload])
		var pts []string
		for i, v := range vs {
			if v > 0 {
				pts = append(pts, fmt.Sprintf("%d,%d", left+i*step, yOf(v)))
			}
		}
		c := colour(x.Library)
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		for i, v := range vs {
			if v > 0 {
				fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="3" fill="%s"><title>%s %s: %s</title></circle>`+"\n",
					left+i*step, yOf(v), c, html.EscapeString(x.Library), names[i], duration(v))
			}
		}
	}
	text(b, left+width/2, base+32, 10, "middle", "", "percentile (log scale; lower is better)")
}

// niceStep rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// shortCount formats v as 950, 9.5k, 95k.
func shortCount(v float64) string {
	switch {
	case v >= 10000 && math.Mod(v, 1000) == 0:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 10000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
