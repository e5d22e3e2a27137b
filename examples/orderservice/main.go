// Command orderservice is an order API meant to run as several instances,
// ported from the tutorial service of the reference texts: it sells a
// limited stock without overselling, and creates each client order once
// however often it is submitted, using fencelock locks on Redis, fencing
// tokens checked by the database, and the idempotency package.
//
// Usage:
//
//	orderservice [serve] [flags]   run the API (see orderservice serve -h)
//	orderservice loadtest [flags]  start instances, load them, check the results
//
// The API:
//
//	POST /api/products              {"name": "...", "stock": 100} → 201 product, 400
//	GET  /api/products/{id}         → 200 product, 400, 404
//	POST /api/stock/{id}/deduct?count=N
//	                                → 200 order, 400, 404, 409 insufficient_stock,
//	                                  503 busy, unavailable or lock_lost (Retry-After)
//	POST /api/orders                {"requestNo": "...", "productId": 1, "count": 1}
//	                                → 201 order (replayed identically to duplicates,
//	                                  with Idempotent-Replayed: true), 409 in_progress,
//	                                  422 request_mismatch (requestNo reused for another order),
//	                                  503 busy, unavailable or lock_lost (Retry-After)
//	GET  /api/orders/{requestNo}    → 200 order (the body POST answered), 404 order_not_found,
//	                                  409 in_progress
//	GET  /healthz                   → 200, 503 unavailable (which of database and Redis)
//	GET  /metrics                   (Prometheus text format)
//
// Every POST with a body sends it as Content-Type: application/json (415
// unsupported_media_type otherwise), of at most 64 KiB (413
// body_too_large). A 400 names the field and what it should hold: names
// and request numbers must not be blank nor hold control characters (a NUL
// byte, which PostgreSQL cannot store, included); a query parameter given
// twice is refused (invalid_query).
//
// Errors are JSON {"code": "...", "message": "..."}; every response carries
// X-Request-Id. The three 503s say different things: busy, the product's
// lock was held by another request for longer than -lock-wait; unavailable,
// Redis (or, for orders, the database) could not be reached; lock_lost, the
// lock was lost before the order committed. The client may retry any of
// them: a retried order (same requestNo) is still created at most once.
//
// Storage is a SQLite file (WAL mode) unless DATABASE_URL names a
// PostgreSQL database. --no-lock runs the naive code without locks and
// without database guards: a demonstration of the failure, not a mode to
// use.
//
// Exit status (the same for every fencelock command): 0 success (a
// service stopped by SIGINT or SIGTERM, a load test that passed), 1 a load
// test that ran and failed, 2 could not run (bad flags, a server missing
// or unreachable, a configuration refused at start-up), 130 a load test
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/examples/internal/exitcode"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveMain(args, stderr)
	case "loadtest":
		return loadtestMain(args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, `Usage:
  orderservice [serve] [flags]   run the order API (orderservice serve -h)
  orderservice loadtest [flags]  start instances, load them, check for oversell and duplicates (orderservice loadtest -h)
`)
		return 0
	default:
		fmt.Fprintf(stderr, "orderservice: unknown command %q (want serve, loadtest or help)\n", cmd)
		return exitcode.CouldNotRun
	}
}

// serveMain runs the API until SIGINT or SIGTERM.
func serveMain(args []string, stderr io.Writer) int {
	cfg, err := parseConfig(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("orderservice", err))
		return exitcode.CouldNotRun
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal ends the process at once
	if err := serve(ctx, cfg, log, nil); err != nil {
		log.Error("orderservice failed", "error", exitcode.Message("could not run", err))
		return exitcode.CouldNotRun
	}
	return exitcode.OK
}

// serve runs the service until ctx is done, then shuts down gracefully:
// the listener closes, in-flight requests finish (up to the shutdown
// timeout), and the lock client is closed, which releases any lock still
// held. ready, if not nil, receives the listening address.
func serve(ctx context.Context, cfg Config, log *slog.Logger, ready func(addr string)) error {
	if cfg.NoLock {
		log.Warn("NO-LOCK MODE: a demonstration of the failure. Requests run without the distributed lock " +
			"and without the database guards: expect oversold stock and duplicate orders. Never use it for real.")
	}
	log.Info("starting", "config", cfg)
	app, err := NewApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	closeApp := func() {
		if err := app.Close(); err != nil {
			log.Warn("closing", "error", cfg.Redactor()(err.Error()))
		}
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		closeApp()
		return err
	}
	srv := &http.Server{
		Handler:           app.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.LockWait + cfg.WorkDelay + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("listening", "addr", ln.Addr().String(), "no_lock", cfg.NoLock)
	if ready != nil {
		ready(ln.Addr().String())
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		closeApp()
		return err
	case <-ctx.Done():
	}

	log.Info("shutting down: finishing in-flight requests", "timeout", cfg.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("shutdown timed out; closing the remaining connections", "error", err)
		srv.Close()
	}
	<-served
	closeApp() // releases any lock still held (only after a timed-out shutdown)
	log.Info("stopped: requests finished, locks released, connections closed")
	return nil
}
