package main

// The parent side of a job: start its worker processes, wait until all are
// ready, read the server's counters, start them together, collect their
// results, read the counters again, let the workers exit, flush the server.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// outcome is everything one job (one library, one workload, one round)
// produced: the workers' reports and the server's counters around the
// measured part.
type outcome struct {
	workers    []workerResult
	serverCPU  time.Duration // redis-server user + system
	commands   int64         // commands the server ran (INFO commandstats, less INFO)
	violations int64         // times two workers were inside the shared key at once
}

// serverCounters reads redis-server's CPU time and the number of commands
// it has run (every command, including those called from scripts, except
// INFO itself, which is how we read them).
func serverCounters(ctx context.Context, admin *redis.Client) (cpu time.Duration, commands int64, err error) {
	info, err := admin.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	var seconds float64
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			v, _ := strconv.ParseFloat(value, 64)
			seconds += v
		case strings.HasPrefix(name, "cmdstat_") && name != "cmdstat_info":
			// calls=12,usec=34,...
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			commands += n
		}
	}
	return time.Duration(seconds * float64(time.Second)), commands, nil
}

// worker is one running worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	exit  chan error
}

// startWorker starts this binary as a worker for j.
func startWorker(j job) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	out := bufio.NewScanner(stdout)
	out.Buffer(nil, 1<<30) // results carry every wait, as numbers
	return &worker{cmd: cmd, stdin: stdin, out: out, exit: make(chan error, 1)}, nil
}

// line reads the worker's next line, or fails after limit.
func (w *worker) line(limit time.Duration) (string, error) {
	got := make(chan string, 1)
	go func() {
		if w.out.Scan() {
			got <- w.out.Text()
		} else {
			close(got)
		}
	}()
	select {
	case s, ok := <-got:
		if !ok {
			return "", fmt.Errorf("worker ended without answering: %v", w.out.Err())
		}
		return s, nil
	case <-time.After(limit):
		return "", fmt.Errorf("worker gave no answer in %v", limit)
	}
}

// finish closes the worker's stdin (it exits) and waits, killing it after
// a while.
func (w *worker) finish() error {
	w.stdin.Close()
	go func() { w.exit <- w.cmd.Wait() }()
	select {
	case err := <-w.exit:
		return err
	case <-time.After(15 * time.Second):
		w.cmd.Process.Kill()
		<-w.exit
		return errors.New("worker did not exit; killed")
	}
}

// runJob runs j in procs worker processes (j.Proc numbers them) against the
// server admin talks to, and flushes the server afterwards.
func runJob(admin *redis.Client, j job, procs int) (outcome, error) {
	ctx := context.Background()
	var sec *sharedSection
	if j.Shm != "" {
		if err := createSection(j.Shm); err != nil {
			return outcome{}, err
		}
		defer os.Remove(j.Shm)
		var err error
		if sec, err = openSection(j.Shm); err != nil {
			return outcome{}, err
		}
		defer sec.close()
	}
	ws := make([]*worker, 0, procs)
	defer func() {
		for _, w := range ws {
			w.finish()
		}
		admin.FlushAll(ctx)
	}()
	for p := range procs {
		pj := j
		pj.Proc = p
		if pj.Profile != "" {
			pj.Profile += fmt.Sprintf("-p%d.pprof", p)
		}
		w, err := startWorker(pj)
		if err != nil {
			return outcome{}, err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		s, err := w.line(time.Minute + 2*j.Warmup)
		if err != nil {
			return outcome{}, err
		}
		if s != "ready" {
			return outcome{}, fmt.Errorf("worker said %q, not ready", s)
		}
	}
	cpu0, cmds0, err := serverCounters(ctx, admin)
	if err != nil {
		return outcome{}, err
	}
	for _, w := range ws {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return outcome{}, err
		}
	}
	// Long enough for the tail of the slowest acquire, and for taking and
	// observing the held locks.
	limit := j.Duration + j.Window + 2*j.Request + 5*time.Minute
	var o outcome
	for _, w := range ws {
		s, err := w.line(limit)
		if err != nil {
			return outcome{}, err
		}
		var r workerResult
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			return outcome{}, fmt.Errorf("worker result: %w", err)
		}
		o.workers = append(o.workers, r)
	}
	cpu1, cmds1, err := serverCounters(ctx, admin)
	if err != nil {
		return outcome{}, err
	}
	o.serverCPU, o.commands = cpu1-cpu0, cmds1-cmds0
	if sec != nil {
		o.violations = sec.count()
	}
	var errs []error
	for _, w := range ws {
		if err := w.finish(); err != nil {
			errs = append(errs, err)
		}
	}
	ws = ws[:0]
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("%s %s: worker exit: %w", j.Library, j.Kind, err)
	}
	return o, nil
}
