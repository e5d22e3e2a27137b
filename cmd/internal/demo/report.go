package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// progress prints live progress: one line redrawn in place on a terminal,
// plain lines every few seconds otherwise.
type progress struct {
	mu    sync.Mutex
	w     io.Writer // nil: print nothing
	tty   bool
	shown bool // a redrawable line is on the screen

	secrets secrets // taken out of every message (set before the workers start)
}

func newProgress(w io.Writer, tty bool) *progress { return &progress{w: w, tty: tty} }

func (p *progress) interval() time.Duration {
	switch {
	case p.w == nil:
		return time.Hour
	case p.tty:
		return 100 * time.Millisecond
	default:
		return 3 * time.Second
	}
}

// clearLocked removes the redrawable line.
func (p *progress) clearLocked() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// logf prints a message on a line of its own.
func (p *progress) logf(format string, args ...any) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintln(p.w, p.secrets.scrub(fmt.Sprintf(format, args...)))
}

func (p *progress) update(name string, st *live, elapsed time.Duration) {
	if p.w == nil {
		return
	}
	done := fmt.Sprintf("%d/%d", st.finished, st.total)
	if st.total == 0 {
		done = fmt.Sprint(st.finished) // until the master stops them
	}
	line := fmt.Sprintf("%-8s %s iterations, %d entered, inside at once (counter) %d, violations %d, stale writes refused %d, %v",
		name, done, st.entered, st.maxInside, st.violations, st.stale, elapsed.Round(100*time.Millisecond))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r"+line+"\x1b[K")
		p.shown = true
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done(name string, res *Result) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	line := fmt.Sprintf("%-8s %s  %d/%d completed in %v", name, res.Status, res.Completed, res.Workers*res.Iterations, res.Elapsed)
	if res.Fair != nil {
		line = fmt.Sprintf("%-8s %s  %d iterations completed in %v", name, res.Status, res.Completed, res.Elapsed)
	}
	if res.Prim != nil {
		line = fmt.Sprintf("%-8s %s  %d holds completed in %v", name, res.Status, res.Completed, res.Elapsed)
	}
	if res.Failover != nil && res.Status != StatusSkip {
		line = fmt.Sprintf("%-8s %s  %d iterations completed, %d of %d failovers, in %v", name, res.Status, res.Completed, res.Failover.Done, res.Failover.Planned, res.Elapsed)
	}
	if len(res.Reasons) > 0 {
		line += ": " + firstLine(res.Reasons[0])
	}
	fmt.Fprintln(p.w, p.secrets.scrub(line))
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes the report as a table, one column per scenario, with
// notes and failure reasons below it.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "fencelock demo: %s for one lock on %s\n\n", rep.tableWho(), rep.tableOn())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := rep.rowWriter(tw)
	for _, c := range commonRows {
		row(c.label, c.cell)
	}
	if slices.ContainsFunc(rep.Results, func(r *Result) bool { return r.Failover != nil }) {
		failoverRows(row)
	}
	if slices.ContainsFunc(rep.Results, func(r *Result) bool { return r.Fair != nil }) {
		fairRows(row)
	}
	if slices.ContainsFunc(rep.Results, func(r *Result) bool { return r.Prim != nil }) {
		primRows(row)
	}
	row("time", func(r *Result) string { return r.Elapsed.String() })
	row("result", func(r *Result) string { return r.Status })
	if err := tw.Flush(); err != nil {
		return err
	}
	rep.writeVerdicts(w)
	rep.writeNotes(w)
	verdict := "every scenario met its expectation"
	if !rep.Pass {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "\nwall time %v: %s\n", rep.Elapsed, verdict)
	return err
}

// tableOn names where the lock was, for the table's header.
func (rep *Report) tableOn() string {
	on := rep.Redis
	if slices.ContainsFunc(rep.Results, func(r *Result) bool { return r.Failover != nil && r.Status != StatusSkip }) {
		on += ` (failover scenarios: on the replicated Redis of "lock on"; the checks stay here)`
	}
	if rep.Backend != "" {
		on = rep.Backend + " (the checks and the fenced store on " + rep.Redis + ")"
	}
	return on
}

// tableWho names who contends, for the table's header. The fair, primitive
// and failover scenarios run worker counts of their own (--workers sets the
// others'): the header names a count only when every scenario shown ran it.
func (rep *Report) tableWho() string {
	if slices.ContainsFunc(rep.Results, func(r *Result) bool {
		return r.Status != StatusSkip && (r.Workers != rep.Workers || r.Fair != nil || r.Prim != nil)
	}) {
		return "worker processes (how many: the workers row) contend"
	}
	return fmt.Sprintf("%d worker processes contend", rep.Workers)
}

// rowWriter returns what writes one row of the table: its label, then a
// cell for each scenario ("-" for a skipped one, apart from its name and
// result).
func (rep *Report) rowWriter(tw io.Writer) func(label string, f func(r *Result) string) {
	return func(label string, f func(r *Result) string) {
		cells := []string{label}
		for _, r := range rep.Results {
			if r.Status == StatusSkip && label != "" && label != "result" {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, f(r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
}

// tableRow is a row of the table: its label and how a scenario's cell
// reads.
type tableRow struct {
	label string
	cell  func(r *Result) string
}

// num formats a count as a cell.
func num(f func(r *Result) int) func(r *Result) string {
	return func(r *Result) string { return fmt.Sprint(f(r)) }
}

// commonRows are the rows every table has, top to bottom.
var commonRows = []tableRow{
	{"", func(r *Result) string { return r.Scenario }},
	{"lease / hold / renewal", cellLeaseHoldRenewal},
	{"workers x iterations", cellWorkersIterations},
	{"fenced store", func(r *Result) string { return r.Store }},
	{"entered", num(func(r *Result) int { return r.Entered })},
	{"completed", num(func(r *Result) int { return r.Completed })},
	{"interrupted / killed", func(r *Result) string { return fmt.Sprintf("%d / %d", r.Interrupted, r.Killed) }},
	{"max concurrent holders", num(func(r *Result) int { return r.MaxConcurrent })},
	{"violations", num(func(r *Result) int { return r.Violations })},
	{"loss signals", num(func(r *Result) int { return r.LossSignals })},
	{"writes", num(func(r *Result) int { return r.Writes })},
	{"stale writes attempted", num(func(r *Result) int { return r.StaleAttempted })},
	{"stale writes accepted", num(func(r *Result) int { return r.StaleAccepted })},
	{"fence first", cellFenceFirst},
	{"fence last - first", cellFenceSpan},
	{"hand-off p50 / p99", cellHandoff},
	{"disruption", cellDisruption},
	{"takeover (max)", cellTakeover},
}

func cellLeaseHoldRenewal(r *Result) string {
	renew := "-"
	if r.Renew > 0 {
		renew = dur(r.Renew)
	}
	return dur(r.Lease) + " / " + dur(r.Hold) + " / " + renew
}

func cellWorkersIterations(r *Result) string {
	if r.Failover != nil {
		return fmt.Sprintf("%d x until done", r.Workers)
	}
	if f := r.Fair; f != nil {
		return fmt.Sprintf("%d x %d goroutines, %v a mode", f.Procs, f.PerProc, FairRunFor)
	}
	if p := r.Prim; p != nil {
		switch p.Kind {
		case primJobs:
			return fmt.Sprintf("%d x %d ticks", p.Procs, p.Ticks)
		case primElection:
			return fmt.Sprintf("%d candidates, %v", p.Procs, p.RunFor)
		}
		return fmt.Sprintf("%d x %d goroutines, %v", p.Procs, p.PerProc, p.RunFor)
	}
	return fmt.Sprintf("%d x %d", r.Workers, r.Iterations)
}

func cellFenceFirst(r *Result) string {
	if r.Acquisitions == 0 {
		return "-"
	}
	return fmt.Sprint(r.FenceMin)
}

func cellFenceSpan(r *Result) string {
	if r.Acquisitions == 0 {
		return "-"
	}
	return fmt.Sprintf("+%d", r.FenceMax-r.FenceMin)
}

func cellHandoff(r *Result) string {
	if r.Handoffs == 0 {
		return "-"
	}
	return r.HandoffP50.String() + " / " + r.HandoffP99.String()
}

func cellDisruption(r *Result) string {
	switch {
	case len(r.Pauses) > 0:
		return fmt.Sprintf("%d paused", len(r.Pauses))
	case len(r.Kills) > 0:
		return fmt.Sprintf("%d killed", len(r.Kills))
	case r.Restart != nil && r.Restart.What != "" && r.Restart.What != "redis-server":
		kept := "lock lost"
		if r.Restart.Kept {
			kept = "lock kept"
		}
		return "restart: " + r.Restart.What + ", " + kept
	case r.Restart != nil:
		return "redis restart"
	case r.Failover != nil:
		return fmt.Sprintf("%d failovers", r.Failover.Done)
	case r.Fair != nil && r.Fair.Kill != nil:
		return "1 killed in line"
	case r.Prim != nil && r.Prim.Kill != nil:
		return "1 holder killed"
	}
	return "-"
}

func cellTakeover(r *Result) string {
	var most Millis = -2
	for _, p := range r.Pauses {
		most = maxTakeover(most, p.Takeover)
	}
	for _, k := range r.Kills {
		if k.Held {
			most = maxTakeover(most, k.Takeover)
		}
	}
	if r.Restart != nil {
		return "down " + r.Restart.Down.String()
	}
	switch {
	case most == -2:
		return "-"
	case most < 0:
		return "never"
	}
	return most.String()
}

// failoverRows adds the failover scenarios' rows.
func failoverRows(row func(label string, f func(r *Result) string)) {
	fo := func(f func(fs *FailoverSummary) string) func(r *Result) string {
		return func(r *Result) string {
			if r.Failover == nil {
				return "-"
			}
			return f(r.Failover)
		}
	}
	row("lock on", fo(func(fs *FailoverSummary) string {
		if fs.Topology == lockCluster {
			return "cluster 3 x (1+1)"
		}
		return "sentinel 1+2"
	}))
	row("replica ack", fo(func(fs *FailoverSummary) string {
		if fs.ReplicaAck == 0 {
			return "off"
		}
		return fmt.Sprintf("%d, %v", fs.ReplicaAck, fs.ReplicaAckTimeout)
	}))
	row("replicas stalled before kill -9", fo(func(fs *FailoverSummary) string { return dur(fs.StallFor) }))
	row("failovers done", fo(func(fs *FailoverSummary) string { return fmt.Sprintf("%d of %d", fs.Done, fs.Planned) }))
	row("locks lost silently", fo(func(fs *FailoverSummary) string { return fmt.Sprintf("%d of %d", fs.LostSilently, fs.Done) }))
	row("holders told / kept", fo(func(fs *FailoverSummary) string { return fmt.Sprintf("%d / %d", fs.Told, fs.Kept) }))
	row("fence regressions", fo(func(fs *FailoverSummary) string { return fmt.Sprint(fs.FenceRegressions) }))
	row("ghost lock after release p50 / max", fo(func(fs *FailoverSummary) string {
		if fs.Releases == 0 {
			return "-"
		}
		return fs.GhostP50.String() + " / " + fs.GhostMax.String()
	}))
	row("next acquire after kill min / med / max", fo(func(fs *FailoverSummary) string {
		if fs.Done == 0 {
			return "-"
		}
		return showTakeover(fs.NextAcquireMin) + " / " + showTakeover(fs.NextAcquireMedian) + " / " + showTakeover(fs.NextAcquireMax)
	}))
}

// fairRows adds the fair scenario's rows: each measure of the plain run,
// then of the fair one.
func fairRows(row func(label string, f func(r *Result) string)) {
	fair := func(f func(fs *FairSummary) string) func(r *Result) string {
		return func(r *Result) string {
			if r.Fair == nil || r.Fair.Plain.Acquisitions == 0 || r.Fair.Fair.Acquisitions == 0 {
				return "-"
			}
			return f(r.Fair)
		}
	}
	both := func(f func(fr FairRun) string) func(r *Result) string {
		return fair(func(fs *FairSummary) string { return f(fs.Plain) + " / " + f(fs.Fair) })
	}
	row("plain / fair: hand-offs per s", both(func(fr FairRun) string { return fmt.Sprintf("%.0f", fr.PerSecond) }))
	row("plain / fair: wait p50", both(func(fr FairRun) string { return fr.WaitP50.String() }))
	row("plain / fair: wait p99", both(func(fr FairRun) string { return fr.WaitP99.String() }))
	row("plain / fair: p99 / ((N-1) x hold)", both(func(fr FairRun) string { return fmt.Sprintf("%.1fx", fr.P99VsIdeal) }))
	row("plain / fair: turns per worker min/max", both(func(fr FairRun) string { return fmt.Sprintf("%.2f", fr.MinMax) }))
	row("kill -9 in line: next acquire / stall", func(r *Result) string {
		if r.Fair == nil || r.Fair.Kill == nil {
			return "-"
		}
		return showTakeover(r.Fair.Kill.Next) + " / " + r.Fair.Kill.Stall.String()
	})
}

// writeVerdicts writes each scenario's verdict line, if it has one.
func (rep *Report) writeVerdicts(w io.Writer) {
	for _, r := range rep.Results {
		if r.Verdict != "" {
			fmt.Fprintf(w, "\n%s: %s", r.Scenario, r.Verdict)
		}
	}
	if slices.ContainsFunc(rep.Results, func(r *Result) bool { return r.Verdict != "" }) {
		fmt.Fprintln(w)
	}
}

// writeNotes writes the notes (a skipped scenario's reasons among them),
// then the reasons the others failed.
func (rep *Report) writeNotes(w io.Writer) {
	var notes, fails []string
	for _, r := range rep.Results {
		notes = append(notes, r.Notes...)
		for _, reason := range r.Reasons {
			if r.Status == StatusSkip {
				notes = append(notes, r.Scenario+": skipped: "+reason)
			} else {
				fails = append(fails, r.Scenario+": "+reason)
			}
		}
	}
	writeIndented(w, "notes:", notes)
	writeIndented(w, "failures:", fails)
}

// writeIndented writes a titled list, if it has anything, its items
// indented (their continuation lines more).
func writeIndented(w io.Writer, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintln(w, "\n"+title)
	for _, n := range items {
		fmt.Fprintln(w, "  "+strings.ReplaceAll(n, "\n", "\n    "))
	}
}

// maxTakeover keeps the worst takeover; "never" (-1) is the worst.
func maxTakeover(a, b Millis) Millis {
	if a == -1 || b == -1 {
		return -1
	}
	return max(a, b)
}

// dur formats a configured duration: "5s", "300ms".
func dur(m Millis) string {
	return time.Duration(float64(m) * float64(time.Millisecond)).String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func splitLines(s string) []string {
	return strings.Split(strings.TrimRight(s, "\n"), "\n")
}
