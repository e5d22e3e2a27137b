// Package dashboard serves fencelock's live dashboard ("fencelock
// dashboard"): a web page of one namespace's locks on Redis, refreshed
// several times a second over server-sent events.
//
// One goroutine looks at Redis for every browser: a SCAN of the namespace's
// lock keys (on every master of a Cluster), then redisbackend's Inspect of
// each (one pipelined round trip a lock, a few in flight), every Interval
// and at once when a release message arrives on one of the namespace's
// release channels (a pattern subscription). It compares each look with the
// one before and records what changed: a lock taken, passed on (its fence
// changed), released (gone before its lease ran out) or expired (gone when
// its lease ran out: its holder lost it). Every connected browser is sent
// the latest look and the recent events as one JSON message; the page
// counts the leases down between messages.
//
// While Redis does not answer, the page says so and shows the last state
// seen; the dashboard keeps trying.
//
// The page, its script and its style are embedded in the binary: no CDN,
// no build step.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

//go:embed static
var static embed.FS

// Defaults of Options.
const (
	DefaultInterval  = 400 * time.Millisecond
	DefaultMaxLocks  = 200
	DefaultMaxEvents = 100
)

// Options configures a Dashboard. The zero value of a field means its
// default.
type Options struct {
	// Namespace is the Clients' namespace (fencelock.WithNamespace);
	// "" means fencelock.DefaultNamespace. (A Client with an empty
	// namespace cannot be shown.)
	Namespace string
	// Interval is the time between two looks at Redis (DefaultInterval).
	// A look that takes longer than Interval is followed by a pause as
	// long as it took, so that a huge namespace does not keep Redis
	// busy.
	Interval time.Duration
	// MaxLocks caps the locks inspected and shown (DefaultMaxLocks): the
	// first ones by name. The page says how many more there are.
	MaxLocks int
	// MaxEvents caps the recent events kept and shown (DefaultMaxEvents).
	MaxEvents int
	// Logger gets a line when Redis stops and starts answering; nil
	// logs nothing.
	Logger *slog.Logger
}

// Dashboard serves the page. Make one with New and run it with Serve.
type Dashboard struct {
	rdb     redis.UniversalClient
	backend *redisbackend.Backend
	opts    Options
	log     *slog.Logger

	mu      sync.Mutex
	latest  []byte                   // the last snapshot, as JSON
	subs    map[chan []byte]struct{} // one per connected browser
	served  bool                     // Serve was called
	stopped chan struct{}            // closed when Serve begins to shut down
}

// New returns a Dashboard of the locks that Clients on rdb keep in
// opts.Namespace. The caller keeps ownership of rdb. It fails on options
// that cannot work, naming the value.
func New(rdb redis.UniversalClient, opts Options) (*Dashboard, error) {
	if rdb == nil {
		return nil, errors.New("fencelock: dashboard: nil Redis client")
	}
	if opts.Namespace == "" {
		opts.Namespace = fencelock.DefaultNamespace
	}
	if strings.ContainsAny(opts.Namespace, "{}") {
		return nil, &fencelock.InvalidArgumentError{Name: "namespace", Value: opts.Namespace,
			Reason: "must not contain '{' or '}' with the Redis backend (they delimit the Cluster hash tag)"}
	}
	switch {
	case opts.Interval == 0:
		opts.Interval = DefaultInterval
	case opts.Interval < 10*time.Millisecond || opts.Interval > time.Minute:
		return nil, &fencelock.InvalidArgumentError{Name: "interval", Value: opts.Interval.String(), Reason: "want 10ms to 1m"}
	}
	switch {
	case opts.MaxLocks == 0:
		opts.MaxLocks = DefaultMaxLocks
	case opts.MaxLocks < 1 || opts.MaxLocks > 10_000:
		return nil, &fencelock.InvalidArgumentError{Name: "max locks", Value: fmt.Sprint(opts.MaxLocks), Reason: "want 1 to 10000"}
	}
	switch {
	case opts.MaxEvents == 0:
		opts.MaxEvents = DefaultMaxEvents
	case opts.MaxEvents < 1 || opts.MaxEvents > 10_000:
		return nil, &fencelock.InvalidArgumentError{Name: "max events", Value: fmt.Sprint(opts.MaxEvents), Reason: "want 1 to 10000"}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dashboard{
		rdb: rdb,
		// Inspect only: the dashboard takes no lock, so it needs no
		// release subscriptions of the backend's own.
		backend: redisbackend.New(rdb, redisbackend.WithoutReleaseNotifications()),
		opts:    opts,
		log:     log,
		subs:    make(map[chan []byte]struct{}),
		stopped: make(chan struct{}),
	}
	d.latest, _ = json.Marshal(Snapshot{Namespace: opts.Namespace, Time: time.Now(), Error: "no look at Redis yet", Locks: []Lock{}, Events: []Event{}})
	return d, nil
}

// shutdownGrace is how long Serve waits for requests in flight (not the
// event streams, which it ends) when ctx is done.
const shutdownGrace = 5 * time.Second

// Serve serves the page on ln until ctx is done, then stops: it ends every
// browser's event stream, waits for the requests in flight (at most a few
// seconds), stops looking at Redis and returns nil. It returns an error if
// ln fails. Every goroutine it starts has ended when it returns. It closes
// ln. A Dashboard serves once.
func (d *Dashboard) Serve(ctx context.Context, ln net.Listener) error {
	d.mu.Lock()
	if d.served {
		d.mu.Unlock()
		ln.Close()
		return errors.New("fencelock: dashboard: Serve called twice")
	}
	d.served = true
	d.mu.Unlock()
	defer d.backend.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{
		Handler:           d.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Request contexts end with ctx, so event streams end at once.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.watch(ctx) })
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- srv.Serve(ln) })

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		// The listener failed: stop the rest below, report it.
		err = fmt.Errorf("fencelock: dashboard: %w", err)
	}
	d.mu.Lock()
	close(d.stopped)
	d.mu.Unlock()
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), shutdownGrace)
	if serr := srv.Shutdown(sctx); serr != nil {
		srv.Close() // a request that outlived the grace period
	}
	scancel()
	wg.Wait()
	return err
}

// Handler returns the page's HTTP handler: / the page, /static/ its
// script and style, /events the stream of snapshots (text/event-stream),
// /state the latest snapshot as JSON. The event stream gets snapshots only
// while Serve runs.
func (d *Dashboard) Handler() http.Handler {
	files, _ := fs.Sub(static, "static")
	mux := http.NewServeMux()
	fileServer := http.FileServerFS(files)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.Handle("GET /static/", noCache(http.StripPrefix("/static/", fileServer)))
	mux.HandleFunc("GET /events", d.serveEvents)
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		b := d.latest
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(b)
	})
	return securityHeaders(mux)
}

// securityHeaders keeps the page to its own files: the data it shows
// (lock names, holder identities) is text from whoever takes locks, and
// the page only ever sets it as text, but a policy that forbids inline
// script makes sure.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// noCache makes a browser revalidate the embedded files, so that a new
// binary's page is never mixed with an old script.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// heartbeat is how often an idle event stream gets a comment line, so that
// a browser that went away is noticed (the write fails) and proxies do not
// close the stream.
const heartbeat = 15 * time.Second

// serveEvents streams snapshots to one browser until it goes away or Serve
// stops. The subscription has room for one message: a browser that reads
// slowly skips to the latest snapshot instead of holding up the others.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	ch := make(chan []byte, 1)
	d.mu.Lock()
	select {
	case <-d.stopped:
		d.mu.Unlock()
		http.Error(w, "fencelock dashboard is shutting down", http.StatusServiceUnavailable)
		return
	default:
	}
	d.subs[ch] = struct{}{}
	ch <- d.latest
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.subs, ch)
		d.mu.Unlock()
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	// retry: the browser reconnects after 1 s when the stream breaks
	// (a restarted dashboard).
	if _, err := fmt.Fprint(w, "retry: 1000\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-d.stopped:
			return
		case b := <-ch:
			_, err = fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b)
		case <-tick.C:
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// publish makes snap the latest snapshot and offers it to every browser.
func (d *Dashboard) publish(snap Snapshot) {
	b, err := json.Marshal(snap)
	if err != nil {
		d.log.Error("fencelock dashboard: encoding a snapshot", "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.latest = b
	for ch := range d.subs {
		select { // drop the unread older one, if any
		case <-ch:
		default:
		}
		ch <- b // cannot block: room for one, and only publish sends
	}
}
