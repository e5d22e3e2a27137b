package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/idempotency"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"modernc.org/sqlite"               // driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Errors of the store. The HTTP layer maps them to status codes.
var (
	// ErrProductNotFound: no product has the id.
	ErrProductNotFound = errors.New("product not found")
	// ErrInsufficientStock is matched by every *InsufficientStockError.
	ErrInsufficientStock = errors.New("insufficient stock")
	// ErrStaleFence: a write refused because a newer lock holder has
	// written the product: this request's lock was lost (it stalled past
	// its lease, or Redis lost the lock) and its write must not land. It
	// is fence.ErrStale; the error is a *fence.StaleError.
	ErrStaleFence = fence.ErrStale
	// ErrOrderNotFound: no order has the request number.
	ErrOrderNotFound = errors.New("order not found")
)

// InsufficientStockError reports an order larger than the stock.
type InsufficientStockError struct {
	ProductID int64
	Available int64 // stock read under the lock (or -1 when the final guard refused)
	Requested int64
}

// Error describes the shortfall.
func (e *InsufficientStockError) Error() string {
	if e.Available < 0 {
		return fmt.Sprintf("insufficient stock: product %d has fewer than %d left", e.ProductID, e.Requested)
	}
	return fmt.Sprintf("insufficient stock: product %d has %d left, %d requested", e.ProductID, e.Available, e.Requested)
}

// Is reports whether target is ErrInsufficientStock.
func (e *InsufficientStockError) Is(target error) bool { return target == ErrInsufficientStock }

// Product is a row of the products table.
type Product struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Stock     int64     `json:"stock"`
	CreatedAt time.Time `json:"createdAt"`
}

// Order is a row of the orders table. Its JSON form is the response body of
// a deduction and of an order creation (and the body replayed to duplicates).
type Order struct {
	ID        int64     `json:"id"`
	ProductID int64     `json:"productId"`
	Count     int64     `json:"count"`
	Fence     int64     `json:"fence"` // the lock's fencing token; 0 without a lock (--no-lock)
	RequestID string    `json:"requestId"`
	RequestNo string    `json:"requestNo,omitempty"` // the client's idempotency key, for POST /api/orders
	CreatedAt time.Time `json:"createdAt"`
}

// Deduction is one request to take Count items of a product.
type Deduction struct {
	ProductID int64
	Count     int64
	Fence     int64  // fencing token of the product lock
	RequestID string // X-Request-Id of the HTTP request
	RequestNo string // client request number (POST /api/orders), or ""
	WorkDelay time.Duration
}

type dialect int

const (
	sqliteDialect dialect = iota + 1
	postgresDialect
)

func (d dialect) String() string {
	if d == postgresDialect {
		return "postgres"
	}
	return "sqlite"
}

// idempotencyTable is the table of the idempotency package's records.
const idempotencyTable = "idempotency_records"

// Store is the service's database: products, orders, and the idempotency
// records (kept by the idempotency package in the same database, so that an
// order and its record commit in one transaction).
type Store struct {
	db       *sql.DB
	dialect  dialect
	idem     *idempotency.Store
	products *fence.Table // the fence column of products
}

// OpenStore opens PostgreSQL when databaseURL is set, else the SQLite file at
// sqlitePath (created if missing), and checks the connection. A SQLite file
// that is busy is retried for up to 10 s (see connect). It does not migrate;
// call Migrate.
func OpenStore(ctx context.Context, databaseURL, sqlitePath string) (*Store, error) {
	s := &Store{}
	var err error
	if databaseURL != "" {
		s.dialect = postgresDialect
		s.db, err = sql.Open("pgx", databaseURL)
		if err != nil {
			return nil, fmt.Errorf("opening postgres: %w", err)
		}
		s.db.SetMaxOpenConns(16)
		s.db.SetMaxIdleConns(16)
		s.db.SetConnMaxIdleTime(5 * time.Minute)
	} else {
		s.dialect = sqliteDialect
		s.db, err = sql.Open("sqlite", SQLiteDSN(sqlitePath))
		if err != nil {
			return nil, fmt.Errorf("opening sqlite %s: %w", sqlitePath, err)
		}
		// A few connections: WAL lets readers (a replay check, GET product)
		// run beside the one writer. Writers take turns on SQLite's write
		// lock: every transaction is BEGIN IMMEDIATE (see SQLiteDSN) and
		// waits under the busy timeout. No code holds a connection while it
		// waits for a lock, so the pool cannot deadlock with the locks.
		s.db.SetMaxOpenConns(8)
		s.db.SetMaxIdleConns(8)
	}
	idem, err := idempotency.NewStore(s.db, s.idemDialect(), idempotencyTable)
	if err != nil {
		s.db.Close()
		return nil, err
	}
	s.idem = idem
	fenceDialect := fence.SQLite
	if s.dialect == postgresDialect {
		fenceDialect = fence.Postgres
	}
	if s.products, err = fence.NewTable(fenceDialect, "products", "fence", "id"); err != nil {
		s.db.Close()
		return nil, err
	}
	if err := s.connect(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("connecting to %s: %w", s.dialect, err)
	}
	return s, nil
}

// connectTimeout bounds OpenStore's first connection, retries included.
const connectTimeout = 10 * time.Second

// connect opens the first connection (Ping), within connectTimeout.
//
// On SQLite it retries while the file is busy. Opening a connection runs the
// DSN's pragmas, and journal_mode(WAL) on a file not yet in WAL mode must
// upgrade the connection's read lock to a write lock. When another process
// (or connection) is waiting to write at that moment, SQLite answers
// SQLITE_BUSY at once, without calling the busy handler, since waiting could
// deadlock. So instances that start together on a new file would fail now
// and then; the connection that failed is discarded, and a new one is
// opened after a short backoff. Once the file is in WAL mode, the pragma
// changes nothing and needs no write lock.
func (s *Store) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	backoff := 2 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := s.db.PingContext(ctx)
		if err == nil || s.dialect != sqliteDialect || !isSQLiteBusy(err) {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1) // jitter, so that retries spread
		if deadline, _ := ctx.Deadline(); time.Until(deadline) < wait {
			return fmt.Errorf("database still busy after %d attempts in %v: %w", attempt, connectTimeout, err)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (retrying: %w)", err, serr)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// isSQLiteBusy reports whether err is SQLite's SQLITE_BUSY (any extended
// code), "database is locked".
func isSQLiteBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()&0xff == sqlite3.SQLITE_BUSY
	}
	return strings.Contains(err.Error(), "database is locked")
}

// SQLiteDSN returns the modernc.org/sqlite data source name of the file at
// path: WAL mode (readers do not block the writer), a 10 s busy timeout
// (writers of several processes wait for each other instead of failing with
// SQLITE_BUSY), synchronous=NORMAL (safe with WAL), foreign keys on, and
// BEGIN IMMEDIATE transactions: a transaction takes the write lock when it
// begins, waiting under the busy timeout, instead of failing with
// SQLITE_BUSY when it first writes after another process has committed.
func SQLiteDSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

func (s *Store) idemDialect() idempotency.Dialect {
	if s.dialect == postgresDialect {
		return idempotency.Postgres
	}
	return idempotency.SQLite
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks the database connection.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Idempotency returns the store of idempotency records.
func (s *Store) Idempotency() *idempotency.Store { return s.idem }

// placeholder matches the $N parameters the queries are written with.
var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// q rewrites a query written with $N parameters for the dialect: SQLite
// takes ?N (numbered, so a parameter may be used twice).
func (s *Store) q(query string) string {
	if s.dialect == postgresDialect {
		return query
	}
	return placeholder.ReplaceAllString(query, "?$1")
}

// querier is what both *sql.DB and *sql.Tx offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CreateProduct inserts a product.
func (s *Store) CreateProduct(ctx context.Context, name string, stock int64) (Product, error) {
	p := Product{Name: name, Stock: stock, CreatedAt: nowMillis()}
	err := s.db.QueryRowContext(ctx, s.q(
		`INSERT INTO products (name, stock, fence, created_ms) VALUES ($1, $2, 0, $3) RETURNING id`),
		name, stock, p.CreatedAt.UnixMilli()).Scan(&p.ID)
	if err != nil {
		return Product{}, fmt.Errorf("creating product: %w", err)
	}
	return p, nil
}

// Product returns the product with id, or ErrProductNotFound.
func (s *Store) Product(ctx context.Context, id int64) (Product, error) {
	p := Product{ID: id}
	var created int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT name, stock, created_ms FROM products WHERE id = $1`), id).
		Scan(&p.Name, &p.Stock, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Product{}, fmt.Errorf("%w: no product has id %d", ErrProductNotFound, id)
	}
	if err != nil {
		return Product{}, fmt.Errorf("reading product %d: %w", id, err)
	}
	p.CreatedAt = time.UnixMilli(created).UTC()
	return p, nil
}

// Deduct runs DeductTx in a transaction of its own and commits it.
func (s *Store) Deduct(ctx context.Context, d Deduction) (Order, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Order{}, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback() // no-op after Commit
	o, err := s.DeductTx(ctx, tx, d)
	if err != nil {
		return Order{}, err
	}
	if err := tx.Commit(); err != nil {
		return Order{}, fmt.Errorf("committing order: %w", err)
	}
	return o, nil
}

// DeductTx is the critical section, run under the product's lock, in tx:
//
//  1. Fence: claim the product row with d.Fence (fence.Table), refused
//     (a *fence.StaleError, matching ErrStaleFence) if a newer lock holder
//     has already written it. On PostgreSQL this also locks the row until
//     commit; on SQLite the transaction holds the write lock already.
//  2. Read the stock and check it (*InsufficientStockError).
//  3. Work (d.WorkDelay), as a real service would between check and write.
//  4. Insert the order, carrying the fence and the request id.
//  5. Decrement the stock WHERE stock >= count, the last guard.
//
// The caller commits; nothing is written if any step fails.
func (s *Store) DeductTx(ctx context.Context, tx *sql.Tx, d Deduction) (Order, error) {
	if err := s.products.Claim(ctx, tx, d.Fence, d.ProductID); err != nil {
		if errors.Is(err, fence.ErrNotFound) {
			return Order{}, fmt.Errorf("%w: no product has id %d", ErrProductNotFound, d.ProductID)
		}
		return Order{}, err
	}

	stock, err := s.stock(ctx, tx, d.ProductID)
	if err != nil {
		return Order{}, err
	}
	if stock < d.Count {
		return Order{}, &InsufficientStockError{ProductID: d.ProductID, Available: stock, Requested: d.Count}
	}
	if err := sleep(ctx, d.WorkDelay); err != nil {
		return Order{}, err
	}
	o, err := s.insertOrder(ctx, tx, d)
	if err != nil {
		return Order{}, err
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE products SET stock = stock - $1 WHERE id = $2 AND stock >= $1`), d.Count, d.ProductID)
	if err != nil {
		return Order{}, fmt.Errorf("decrementing stock of product %d: %w", d.ProductID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Order{}, err
	} else if n == 0 {
		return Order{}, &InsufficientStockError{ProductID: d.ProductID, Available: -1, Requested: d.Count}
	}
	return o, nil
}

// DeductNaive is what DeductTx replaces, kept for --no-lock (a demonstration
// of the failure): read the stock, check it, work, then insert the order and
// decrement the stock without any condition. Between the read and the write,
// other requests (of this instance or another) read the same stock, so more
// orders succeed than there was stock, and the stock goes negative.
func (s *Store) DeductNaive(ctx context.Context, d Deduction) (Order, error) {
	stock, err := s.stock(ctx, s.db, d.ProductID)
	if err != nil {
		return Order{}, err
	}
	if stock < d.Count {
		return Order{}, &InsufficientStockError{ProductID: d.ProductID, Available: stock, Requested: d.Count}
	}
	if err := sleep(ctx, d.WorkDelay); err != nil {
		return Order{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Order{}, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback()
	o, err := s.insertOrder(ctx, tx, d)
	if err != nil {
		return Order{}, err
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE products SET stock = stock - $1 WHERE id = $2`), d.Count, d.ProductID); err != nil {
		return Order{}, fmt.Errorf("decrementing stock of product %d: %w", d.ProductID, err)
	}
	if err := tx.Commit(); err != nil {
		return Order{}, fmt.Errorf("committing order: %w", err)
	}
	return o, nil
}

// stock reads a product's stock, or ErrProductNotFound.
func (s *Store) stock(ctx context.Context, q querier, id int64) (int64, error) {
	var stock int64
	err := q.QueryRowContext(ctx, s.q(`SELECT stock FROM products WHERE id = $1`), id).Scan(&stock)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: no product has id %d", ErrProductNotFound, id)
	}
	if err != nil {
		return 0, fmt.Errorf("reading stock of product %d: %w", id, err)
	}
	return stock, nil
}

// insertOrder inserts the order row of d.
func (s *Store) insertOrder(ctx context.Context, tx *sql.Tx, d Deduction) (Order, error) {
	o := Order{ProductID: d.ProductID, Count: d.Count, Fence: d.Fence, RequestID: d.RequestID,
		RequestNo: d.RequestNo, CreatedAt: nowMillis()}
	requestNo := sql.NullString{String: d.RequestNo, Valid: d.RequestNo != ""}
	err := tx.QueryRowContext(ctx, s.q(`INSERT INTO orders (product_id, count, fence, request_id, request_no, created_ms)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`),
		d.ProductID, d.Count, d.Fence, d.RequestID, requestNo, o.CreatedAt.UnixMilli()).Scan(&o.ID)
	if err != nil {
		return Order{}, fmt.Errorf("inserting order: %w", err)
	}
	return o, nil
}

// OrderByRequestNo returns the first order created for a request number
// (GET /api/orders/{requestNo}, and --no-lock's naive duplicate check).
func (s *Store) OrderByRequestNo(ctx context.Context, requestNo string) (o Order, found bool, err error) {
	var created int64
	err = s.db.QueryRowContext(ctx, s.q(`SELECT id, product_id, count, fence, request_id, request_no, created_ms
FROM orders WHERE request_no = $1 ORDER BY id LIMIT 1`), requestNo).
		Scan(&o.ID, &o.ProductID, &o.Count, &o.Fence, &o.RequestID, &o.RequestNo, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, fmt.Errorf("looking up request %q: %w", requestNo, err)
	}
	o.CreatedAt = time.UnixMilli(created).UTC()
	return o, true, nil
}

// OrderStats counts a product's orders and the items they took.
func (s *Store) OrderStats(ctx context.Context, productID int64) (orders, items int64, err error) {
	err = s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*), COALESCE(SUM(count), 0) FROM orders WHERE product_id = $1`), productID).
		Scan(&orders, &items)
	return orders, items, err
}

// OrdersByRequestNo counts the orders of each request number starting with
// prefix.
func (s *Store) OrdersByRequestNo(ctx context.Context, prefix string) (map[string]int, error) {
	escaped := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT request_no, COUNT(*) FROM orders
WHERE request_no LIKE $1 ESCAPE '\' GROUP BY request_no`), escaped+"%")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[string]int{}
	for rows.Next() {
		var no string
		var n int
		if err := rows.Scan(&no, &n); err != nil {
			return nil, err
		}
		counts[no] = n
	}
	return counts, rows.Err()
}

// nowMillis is the current time at millisecond precision (what the tables
// keep), so that an order read back equals the one written.
func nowMillis() time.Time { return time.UnixMilli(time.Now().UnixMilli()).UTC() }

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
