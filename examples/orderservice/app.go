package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// orderScope is the idempotency scope of POST /api/orders.
const orderScope = "create_order"

// Errors of the App, beside the store's.
var (
	// ErrBusy: the lock could not be had within the configured wait because
	// another request held it (503 busy). An outage of Redis is not
	// ErrBusy: its errors match fencelock.ErrUnavailable (503 unavailable).
	ErrBusy = errors.New("busy: the lock is held by another request")
	// ErrLockLost: the lock was lost before the transaction committed, so
	// nothing was written (503; the client may retry).
	ErrLockLost = errors.New("the lock was lost before the order was committed")
	// ErrRequestMismatch is matched by every *RequestMismatchError (422).
	ErrRequestMismatch = errors.New("request number reused for a different order")
)

// RequestMismatchError reports a request number already used for another
// order (another product or count). Replaying that order's response would
// tell the client its new order was created, so the request is refused.
type RequestMismatchError struct {
	RequestNo string
	ProductID int64 // of this request
	Count     int64
	First     *Order // the order created under the request number, when known
	// FirstState is the state of the request number's record when First is
	// not known: "in_progress" or "failed" (or "" if unknown).
	FirstState string
}

// Error names both requests.
func (e *RequestMismatchError) Error() string {
	msg := fmt.Sprintf("requestNo %q was already used for a different order", e.RequestNo)
	if e.First != nil {
		msg += fmt.Sprintf(" (productId %d, count %d)", e.First.ProductID, e.First.Count)
	} else if e.FirstState == "in_progress" {
		msg += " (still being created)"
	} else if e.FirstState == "failed" {
		msg += " (which failed; the number stays bound to it)"
	}
	return msg + fmt.Sprintf("; this request has productId %d, count %d: send a new requestNo for a new order", e.ProductID, e.Count)
}

// Is reports whether target is ErrRequestMismatch.
func (e *RequestMismatchError) Is(target error) bool { return target == ErrRequestMismatch }

// App is one instance of the order service: the database, the lock client
// and the idempotency guard, shared by all requests.
type App struct {
	cfg     Config
	log     *slog.Logger
	store   *Store
	rdb     *redis.Client
	locks   *fencelock.Client
	guard   *idempotency.Guard
	metrics *Metrics

	stopPurge func() // stops the purge job's goroutine and waits for it
}

// NewApp connects to the database (migrating it) and to Redis. Close it.
func NewApp(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	redact := cfg.Redactor()
	opts, err := redisOptions(cfg.RedisURL)
	if err != nil {
		return nil, errors.New(redact(err.Error()))
	}
	store, err := OpenStore(ctx, cfg.DatabaseURL, cfg.SQLitePath)
	if err != nil {
		return nil, errors.New(redact(err.Error()))
	}
	applied, err := store.Migrate(ctx)
	if err != nil {
		store.Close()
		return nil, errors.New(redact(err.Error()))
	}
	if len(applied) > 0 {
		log.Info("migrations applied", "migrations", applied)
	}

	opts.ContextTimeoutEnabled = true // requests end at their deadline; see redisbackend
	rdb := redis.NewClient(opts)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		rdb.Close()
		store.Close()
		return nil, fmt.Errorf("connecting to Redis %s: %s", RedactURL(cfg.RedisURL), redact(err.Error()))
	}
	// One lock per request number (the idempotency guard): let idle fence
	// counters expire instead of piling up, a day after their last use.
	locks := fencelock.New(redisbackend.New(rdb, redisbackend.WithFenceCounterExpiry(24*time.Hour)),
		fencelock.WithNamespace(cfg.Namespace),
		fencelock.WithLogger(log.With("component", "fencelock")))
	a := &App{
		cfg:   cfg,
		log:   log,
		store: store,
		rdb:   rdb,
		locks: locks,
		// The guard's request lock is taken under the product lock, so it is
		// contended only by a duplicate naming another product; waiting a
		// little then lets that duplicate replay the first response.
		guard: idempotency.New(locks, store.Idempotency(),
			idempotency.WithLockTTL(cfg.LockTTL), idempotency.WithWait(time.Second)),
		metrics: NewMetrics(cfg.NoLock),
	}
	a.startPurge()
	return a, nil
}

// Close releases the locks still held and closes the connections. Call it
// after the HTTP server has finished its requests.
func (a *App) Close() error {
	a.stopPurge()
	return errors.Join(a.locks.Close(), a.rdb.Close(), a.store.Close())
}

// lockInfo describes one use of a product lock, for logs.
type lockInfo struct {
	key      string
	fence    int64
	wait     time.Duration
	outcome  string // outcomeAcquired, outcomeBusy, outcomeUnavailable or outcomeError
	acquired bool
}

func (li lockInfo) attrs() []any {
	return []any{"lock_key", li.key, "fence", li.fence, "lock_outcome", li.outcome,
		"lock_wait_ms", float64(li.wait.Microseconds()) / 1000}
}

// withProductLock runs fn under the lock of product id ("product:ID"),
// through Client.Do: it waits up to the configured wait (ErrBusy after
// that, when another request held the lock), renews the lock while fn runs,
// and releases it after. fn's context is cancelled if the lock is lost,
// which rolls back its transaction. When Redis could not be reached the
// error matches fencelock.ErrUnavailable and not ErrBusy.
//
// The error is fn's; when the lock was lost meanwhile it also matches
// fencelock.ErrLost (even if fn succeeded: see the callers).
func (a *App) withProductLock(ctx context.Context, id int64, fn func(ctx context.Context, lk *fencelock.Lock) error) (lockInfo, error) {
	info := lockInfo{key: "product:" + strconv.FormatInt(id, 10)}
	start := time.Now()
	err := a.locks.Do(ctx, info.key, a.cfg.LockTTL, func(ctx context.Context, lk *fencelock.Lock) error {
		info.acquired, info.fence, info.wait, info.outcome = true, lk.Fence(), time.Since(start), outcomeAcquired
		a.metrics.ObserveLock(outcomeAcquired, info.wait)
		return fn(ctx, lk)
	}, fencelock.WithWait(a.cfg.LockWait))
	if info.acquired {
		return info, err
	}
	info.wait = time.Since(start)
	switch {
	case ctx.Err() != nil:
		// The client went away (or the server is shutting down).
	case errors.Is(err, fencelock.ErrUnavailable):
		// Redis could not be reached: not "busy", nobody holds the lock
		// as far as anyone can tell.
		info.outcome = outcomeUnavailable
		a.metrics.ObserveLock(outcomeUnavailable, info.wait)
		return info, err
	case errors.Is(err, fencelock.ErrNotAcquired):
		info.outcome = outcomeBusy
		a.metrics.ObserveLock(outcomeBusy, info.wait)
		return info, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	info.outcome = outcomeError
	a.metrics.ObserveLock(outcomeError, info.wait)
	return info, err
}

// Deduct takes d.Count items of product d.ProductID and creates the order,
// under the product's lock (or, with --no-lock, naively). d.Fence and
// d.WorkDelay are set here.
func (a *App) Deduct(ctx context.Context, d Deduction) (Order, error) {
	d.WorkDelay = a.cfg.WorkDelay
	log := a.log.With("request_id", d.RequestID, "product_id", d.ProductID, "count", d.Count)
	if a.cfg.NoLock {
		o, err := a.store.DeductNaive(ctx, d)
		log.Info("deduct", "lock_key", "", "fence", 0, "lock_outcome", "none (--no-lock)", "outcome", outcomeOf(err), errAttr(err))
		return o, err
	}

	// An unknown product is refused before locking: every lock key leaves
	// a fence counter in Redis for good, so ids must not be made up freely.
	if _, err := a.store.Product(ctx, d.ProductID); err != nil {
		log.Info("deduct", "lock_key", "", "lock_outcome", "not taken", "outcome", outcomeOf(err), errAttr(err))
		return Order{}, err
	}
	var order Order
	committed := false
	info, err := a.withProductLock(ctx, d.ProductID, func(ctx context.Context, lk *fencelock.Lock) error {
		d.Fence = lk.Fence()
		o, err := a.store.Deduct(ctx, d)
		if err == nil {
			order, committed = o, true
		}
		return err
	})
	if committed && err != nil {
		// The commit went through (its fence was checked in the same
		// transaction), but the lock was lost after it or its release
		// failed: the order stands.
		log.Warn("deduct: lock trouble after commit; the order stands", append(info.attrs(), "error", err)...)
		err = nil
	}
	log.Info("deduct", append(info.attrs(), "outcome", outcomeOf(err), errAttr(err))...)
	return order, classifyLockError(err)
}

// CreateOrderRequest is the body of POST /api/orders.
type CreateOrderRequest struct {
	RequestNo string `json:"requestNo"` // the client's idempotency key: the same for retries of one order
	ProductID int64  `json:"productId"`
	Count     int64  `json:"count"`
}

// orderPayload is the canonical form of req without its request number:
// what a duplicate must match to be answered with the stored response. The
// idempotency guard keeps its fingerprint (idempotency.WithFingerprint).
func orderPayload(req CreateOrderRequest) []byte {
	return fmt.Appendf(nil, "create_order/v1\nproductId=%d\ncount=%d\n", req.ProductID, req.Count)
}

// legacyStoredOrder is what the record of an order kept before the guard
// checked fingerprints: the response body and the hash of the request it
// answered. Such records are still replayed, and checked by that hash.
type legacyStoredOrder struct {
	RequestHash string `json:"requestHash"`
	Body        string `json:"body"`
}

// legacyRequestHash is the hash legacyStoredOrder kept.
func legacyRequestHash(req CreateOrderRequest) string {
	sum := sha256.Sum256(orderPayload(req))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// replayOrderResponse returns the response body stored in an order's
// record: the body itself, or, in a record written before fingerprints,
// the body inside a legacyStoredOrder (a *RequestMismatchError when that
// answered a request other than req).
func replayOrderResponse(req CreateOrderRequest, stored []byte) ([]byte, error) {
	var old legacyStoredOrder
	if err := json.Unmarshal(stored, &old); err != nil || old.RequestHash == "" {
		return stored, nil
	}
	if old.RequestHash != legacyRequestHash(req) {
		e := &RequestMismatchError{RequestNo: req.RequestNo, ProductID: req.ProductID, Count: req.Count}
		var first Order
		if json.Unmarshal([]byte(old.Body), &first) == nil {
			e.First = &first
		}
		return nil, e
	}
	return []byte(old.Body), nil
}

// mismatchError is the *RequestMismatchError of req, whose request number
// the guard found used for another payload; it names the first order when
// its record says which.
func (a *App) mismatchError(ctx context.Context, req CreateOrderRequest) error {
	e := &RequestMismatchError{RequestNo: req.RequestNo, ProductID: req.ProductID, Count: req.Count}
	if rec, found, err := a.store.Idempotency().Get(ctx, orderScope, req.RequestNo); err == nil && found {
		var first Order
		if rec.State == "done" && json.Unmarshal(rec.Response, &first) == nil && first.ID != 0 {
			e.First = &first
		} else {
			e.FirstState = rec.State
		}
	}
	return e
}

// CreateOrder creates the order of req once per request number: the
// response is the order's JSON body, and duplicates get the very same body
// (replayed true), or idempotency.ErrInProgress while the first is running.
// When Redis could not be reached (for the product lock or the guard's
// request lock) the error matches fencelock.ErrUnavailable; when the guard
// could not reach the database, idempotency.ErrUnavailable.
// A duplicate with another product or count gets a *RequestMismatchError:
// the guard keeps the fingerprint of the request the record answers.
//
// The order is written under the product's lock and inside the idempotency
// guard, in one transaction with the stock decrement and the request's
// record. Locks are always taken before a transaction begins: product lock,
// then the guard's request lock, then the transaction (the guard begins it
// before calling its operation), so no request ever holds a database
// connection or SQLite's write lock while waiting for a lock.
func (a *App) CreateOrder(ctx context.Context, req CreateOrderRequest, requestID string) (body []byte, replayed bool, err error) {
	log := a.log.With("request_id", requestID, "request_no", req.RequestNo, "product_id", req.ProductID, "count", req.Count)
	d := Deduction{ProductID: req.ProductID, Count: req.Count, RequestID: requestID, RequestNo: req.RequestNo, WorkDelay: a.cfg.WorkDelay}
	if a.cfg.NoLock {
		body, replayed, err = a.createOrderNaive(ctx, d)
		log.Info("create_order", "lock_key", "", "fence", 0, "lock_outcome", "none (--no-lock)",
			"replayed", replayed, "outcome", outcomeOf(err), errAttr(err))
		return body, replayed, err
	}

	// A finished request is replayed without waiting for the product lock,
	// and a request number used for another order is refused at once; an
	// unknown product is refused before locking (see Deduct).
	fingerprint := idempotency.WithFingerprint(orderPayload(req))
	if res, found, err := a.guard.Lookup(ctx, orderScope, req.RequestNo, fingerprint); found || (err != nil && !errors.Is(err, idempotency.ErrInProgress)) {
		if err == nil {
			body, err = replayOrderResponse(req, res.Response)
		}
		if errors.Is(err, idempotency.ErrPayloadMismatch) {
			err = a.mismatchError(ctx, req)
		}
		log.Info("create_order", "lock_key", "", "lock_outcome", "not needed (stored response)", "replayed", found, "outcome", outcomeOf(err), errAttr(err))
		if err != nil {
			return nil, false, err
		}
		return body, true, nil
	}
	if _, err := a.store.Product(ctx, req.ProductID); err != nil {
		log.Info("create_order", "lock_key", "", "lock_outcome", "not taken", "outcome", outcomeOf(err), errAttr(err))
		return nil, false, err
	}

	var res idempotency.Result
	finished := false
	info, err := a.withProductLock(ctx, req.ProductID, func(ctx context.Context, lk *fencelock.Lock) error {
		d.Fence = lk.Fence()
		r, err := a.guard.Do(ctx, orderScope, req.RequestNo, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			o, err := a.store.DeductTx(ctx, tx, d)
			if err != nil {
				return nil, err
			}
			return orderBody(o)
		}, fingerprint)
		if err == nil {
			res, finished = r, true
		}
		return err
	})
	if finished && err != nil {
		log.Warn("create_order: lock trouble after commit; the order stands", append(info.attrs(), "error", err)...)
		err = nil
	}
	if errors.Is(err, ErrBusy) {
		// The product is busy; if that is because this very request is
		// running (or has just finished) elsewhere, say so.
		if r, found, lerr := a.guard.Lookup(ctx, orderScope, req.RequestNo, fingerprint); found {
			res, err = r, nil
		} else if errors.Is(lerr, idempotency.ErrInProgress) || errors.Is(lerr, idempotency.ErrPayloadMismatch) {
			err = lerr
		}
	}
	if errors.Is(err, idempotency.ErrPayloadMismatch) {
		err = a.mismatchError(ctx, req)
	}
	if err == nil {
		// The record's response: this run's, or a duplicate's stored one.
		body, err = replayOrderResponse(req, res.Response)
	}
	log.Info("create_order", append(info.attrs(), "replayed", res.Replayed, "outcome", outcomeOf(err), errAttr(err))...)
	if err != nil {
		return nil, false, classifyLockError(err)
	}
	return body, res.Replayed, nil
}

// Order returns the order created for requestNo (GET
// /api/orders/{requestNo}): ErrOrderNotFound when there is none, or
// idempotency.ErrInProgress while it is being created.
func (a *App) Order(ctx context.Context, requestNo string) (Order, error) {
	o, found, err := a.store.OrderByRequestNo(ctx, requestNo)
	if err != nil || found {
		return o, err
	}
	if !a.cfg.NoLock {
		if _, _, err := a.guard.Lookup(ctx, orderScope, requestNo); errors.Is(err, idempotency.ErrInProgress) {
			return Order{}, err
		}
	}
	return Order{}, fmt.Errorf("%w: no order has requestNo %q", ErrOrderNotFound, requestNo)
}

// createOrderNaive is --no-lock's order creation (a demonstration of the
// failure): look for an order with the request number, and create one if
// there is none. Duplicates that arrive together all find none.
func (a *App) createOrderNaive(ctx context.Context, d Deduction) ([]byte, bool, error) {
	if o, found, err := a.store.OrderByRequestNo(ctx, d.RequestNo); err != nil {
		return nil, false, err
	} else if found {
		if o.ProductID != d.ProductID || o.Count != d.Count {
			return nil, false, &RequestMismatchError{RequestNo: d.RequestNo, ProductID: d.ProductID, Count: d.Count, First: &o}
		}
		body, err := orderBody(o)
		return body, true, err
	}
	o, err := a.store.DeductNaive(ctx, d)
	if err != nil {
		return nil, false, err
	}
	body, err := orderBody(o)
	return body, false, err
}

// orderBody is the response body of an order, byte for byte what is stored
// and replayed.
func orderBody(o Order) ([]byte, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// classifyLockError turns a lock lost before commit into ErrLockLost, and
// leaves other errors as they are.
func classifyLockError(err error) error {
	if err == nil || errors.Is(err, ErrBusy) {
		return err
	}
	if errors.Is(err, fencelock.ErrLost) || errors.Is(err, ErrStaleFence) {
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	}
	return err
}

// errAttr is the error of an outcome for logs (empty when nil).
func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.String("error", err.Error())
}

// outcomeOf names the result of a deduction or order for logs.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrProductNotFound):
		return "product_not_found"
	case errors.Is(err, ErrRequestMismatch):
		return "request_mismatch"
	case errors.Is(err, ErrInsufficientStock):
		return "insufficient_stock"
	case errors.Is(err, idempotency.ErrInProgress), errors.Is(err, idempotency.ErrSuperseded):
		return "in_progress"
	case errors.Is(err, fencelock.ErrLost), errors.Is(err, ErrStaleFence):
		return "lock_lost"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, fencelock.ErrUnavailable), errors.Is(err, idempotency.ErrUnavailable):
		return "unavailable"
	default:
		return "error"
	}
}
