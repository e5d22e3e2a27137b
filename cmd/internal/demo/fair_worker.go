package demo

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// fairWorkerConfig is the fair scenario's part of a worker's configuration.
type fairWorkerConfig struct {
	Goroutines int           `json:"goroutines"` // contending goroutines in the process, sharing its Client
	Think      time.Duration `json:"think"`      // pause between a release and the next Acquire
}

// The fair worker's stdin commands:
//
//	go plain | go fair   start a run: every goroutine iterates, with plain
//	                     Acquire or with WithFairness
//	end                  end the run: each goroutine finishes the iteration
//	                     under way; then the worker prints "run-done"
//	quit                 print "done" and exit
//
// EOF (the master is gone) ends the worker at once.

// runFair is the body of a fair-scenario worker process: Goroutines
// goroutines, each with a copy of w whose cfg.ID is the goroutine's number
// across the scenario (process × Goroutines + index), take turns at the
// lock in the runs the master starts. Every iteration is the demo's usual
// one (enter, write, hold, write, exit: the referee's checks), reported
// whole on stdout once it ends.
func (w *worker) runFair(ctx context.Context, stdin io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, next := masterCommands(ctx, cancel, stdin)

	n := w.cfg.Fair.Goroutines
	iters := make([]int, n) // per goroutine, across runs: (worker, iter) stays unique
	w.out.emit(event{Ev: "ready", Pid: w.pid})
	for {
		cmd, ok := next()
		if !ok {
			return nil
		}
		mode, isGo := strings.CutPrefix(cmd, "go ")
		switch {
		case cmd == "quit":
			w.out.emit(event{Ev: "done"})
			return nil
		case !isGo || (mode != fairModePlain && mode != fairModeFair):
			continue // an "end" after the run ended, or nonsense
		}

		ended := make(chan struct{})
		var wg sync.WaitGroup
		for g := range n {
			gw := *w
			gw.cfg.ID = w.cfg.ID*n + g
			gw.fair = mode == fairModeFair
			gw.quiet = true
			wg.Go(func() { gw.fairLoop(ctx, ended, &iters[g]) })
		}
		for {
			cmd, ok := next()
			if !ok || cmd == "end" {
				break
			}
		}
		close(ended)
		wg.Wait()
		if ctx.Err() != nil {
			return nil
		}
		w.out.emit(event{Ev: "run-done"})
	}
}

// fairLoop runs iterations until ended closes, thinking between them.
func (w *worker) fairLoop(ctx context.Context, ended <-chan struct{}, iter *int) {
	think := time.NewTimer(0)
	defer think.Stop()
	for {
		select {
		case <-ended:
			return
		case <-ctx.Done():
			return
		default:
		}
		rec := w.iteration(ctx, *iter)
		*iter++
		if ctx.Err() != nil && rec.Outcome != outcomeCompleted {
			return // stopping: do not report what the stop cut short
		}
		w.out.emit(event{Ev: "iter", Iter: rec})
		think.Reset(w.cfg.Fair.Think)
		select {
		case <-think.C:
		case <-ended:
			return
		case <-ctx.Done():
			return
		}
	}
}

// fairTokens returns an owner-token generator for worker process proc: the
// default's 128 random bits after a prefix naming the process (see
// fairTokenPrefix), so that the master can tell, in the line on the
// server, which waiters are whose.
func fairTokens(proc int) func() (string, error) {
	prefix := fairTokenPrefix(proc)
	return func() (string, error) {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
	}
}

// fairTokenPrefix starts the owner tokens of worker process proc.
func fairTokenPrefix(proc int) string { return fmt.Sprintf("p%d.", proc) }
