package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Dialect is the SQL flavour of a Store.
type Dialect int

const (
	// Postgres is PostgreSQL (for example through github.com/jackc/pgx/v5/stdlib).
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.24 or later (for example modernc.org/sqlite).
	SQLite
)

const (
	stateInProgress = "in_progress"
	stateDone       = "done"
	stateFailed     = "failed"
)

// Store keeps idempotency records in a SQL table:
//
//	CREATE TABLE <table> (
//	    scope       TEXT   NOT NULL,  -- the kind of operation, e.g. "create_order"
//	    request_key TEXT   NOT NULL,  -- the client's request number
//	    state       TEXT   NOT NULL,  -- in_progress | done | failed
//	    fence       BIGINT NOT NULL,  -- fencing token of the run owning the record
//	    response    BYTEA,            -- BLOB on SQLite; the stored result (done)
//	    error       TEXT,             -- the operation's error (failed)
//	    updated_ms  BIGINT NOT NULL,  -- unix milliseconds of the last change
//	    fingerprint TEXT   NOT NULL DEFAULT '',  -- hex SHA-256 of the payload (WithFingerprint)
//	    PRIMARY KEY (scope, request_key)
//	)
//	CREATE INDEX <table>_updated_ms ON <table> (updated_ms)  -- for Purge
//
// The primary key is the unique index that makes a request claimable once.
//
// Records stay until Purge deletes them: a record must outlive every retry
// of its request, since a request whose record is gone runs again.
type Store struct {
	db      *sql.DB
	dialect Dialect
	table   string
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxTableLen leaves room for the index name's suffix ("_updated_ms")
// within PostgreSQL's 63-byte identifiers.
const maxTableLen = 48

// NewStore returns a Store on table (created by Migrate).
func NewStore(db *sql.DB, dialect Dialect, table string) (*Store, error) {
	if dialect != Postgres && dialect != SQLite {
		return nil, invalid("dialect", int(dialect), "want idempotency.Postgres or idempotency.SQLite")
	}
	if !tableName.MatchString(table) || len(table) > maxTableLen {
		return nil, invalid("table name", table, fmt.Sprintf("want 1 to %d letters, digits and underscores, not starting with a digit", maxTableLen))
	}
	if db == nil {
		return nil, invalid("database", nil, "NewStore needs a *sql.DB")
	}
	return &Store{db: db, dialect: dialect, table: table}, nil
}

// Migrate creates the table and its index if they do not exist, and adds
// the fingerprint column to a table made before it existed. Several
// processes may run it at once: on PostgreSQL the statements run in one
// transaction under an advisory lock of the table (concurrent CREATE ...
// IF NOT EXISTS can fail there otherwise); on SQLite each statement takes
// the database's write lock.
func (s *Store) Migrate(ctx context.Context) error {
	if s.dialect == Postgres {
		return s.migratePostgres(ctx)
	}
	if _, err := s.db.ExecContext(ctx, s.createTable("BLOB")); err != nil {
		return err
	}
	if err := s.addFingerprintSQLite(ctx); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, s.createIndex())
	return err
}

func (s *Store) createTable(blob string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    scope       TEXT   NOT NULL,
    request_key TEXT   NOT NULL,
    state       TEXT   NOT NULL,
    fence       BIGINT NOT NULL,
    response    %s,
    error       TEXT,
    updated_ms  BIGINT NOT NULL,
    fingerprint TEXT   NOT NULL DEFAULT '',
    PRIMARY KEY (scope, request_key)
)`, s.table, blob)
}

func (s *Store) createIndex() string {
	return fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[1]s_updated_ms ON %[1]s (updated_ms)`, s.table)
}

const addFingerprint = ` ADD COLUMN fingerprint TEXT NOT NULL DEFAULT ''`

func (s *Store) migratePostgres(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	h := fnv.New64a()
	io.WriteString(h, "fencelock/idempotency migrate "+s.table)
	for _, stmt := range []string{
		`SELECT pg_advisory_xact_lock(` + strconv.FormatInt(int64(h.Sum64()), 10) + `)`,
		s.createTable("BYTEA"),
		`ALTER TABLE ` + s.table + strings.Replace(addFingerprint, "COLUMN", "COLUMN IF NOT EXISTS", 1),
		s.createIndex(),
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// addFingerprintSQLite adds the fingerprint column unless it is there.
// SQLite has no ADD COLUMN IF NOT EXISTS: if the ALTER fails, another
// process may have added it in the meantime, which a second look tells.
func (s *Store) addFingerprintSQLite(ctx context.Context) error {
	has := func() (bool, error) {
		var n int
		err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'fingerprint'`, s.table).Scan(&n)
		return n > 0, err
	}
	if ok, err := has(); err != nil || ok {
		return err
	}
	_, err := s.db.ExecContext(ctx, `ALTER TABLE `+s.table+addFingerprint)
	if err != nil {
		if ok, herr := has(); herr == nil && ok {
			return nil
		}
	}
	return err
}

// Record is the stored state of one request, for inspection.
type Record struct {
	State       string // "in_progress", "done" or "failed"
	Fence       int64
	Response    []byte
	Error       string
	Updated     time.Time
	Fingerprint string // hex SHA-256 of the payload (WithFingerprint), or ""
}

// Get returns the record of (scope, key), or found false. When the database
// could not be reached, the error matches ErrUnavailable; a scope or key
// that cannot be stored (see Guard.Do) is refused with ErrInvalidArgument.
func (s *Store) Get(ctx context.Context, scope, key string) (rec Record, found bool, err error) {
	if err := checkKey("scope", scope); err != nil {
		return Record{}, false, err
	}
	if err := checkKey("request key", key); err != nil {
		return Record{}, false, err
	}
	r, err := s.get(ctx, scope, key)
	if err != nil || r.state == "" {
		return Record{}, false, err
	}
	return Record{State: r.state, Fence: r.fence, Response: r.response, Error: r.errText,
		Updated: time.UnixMilli(r.updatedMs), Fingerprint: r.fingerprint}, true, nil
}

// Purge deletes the records last changed more than olderThan ago, in any
// state, and returns how many it deleted. Run it periodically, from one
// process (fencelock's Client.RunJob runs a job once per period across
// instances), with olderThan longer than any client keeps retrying a
// request and than the longest operation: a request whose record is gone
// runs again, and a run still going when its record is purged cannot
// commit (it ends with ErrSuperseded).
//
// Ages are measured with the clocks of the processes that wrote the
// records (updated_ms) against this one's; skews of seconds do not
// matter at the hours or days a retention is counted in.
//
// The table's index on updated_ms makes the DELETE touch only the purged
// rows; with many records due at once it still runs as one statement.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, invalid("Purge age", olderThan, "must be positive (records still in use would go)")
	}
	cutoff := time.Now().Add(-olderThan).UnixMilli()
	res, err := s.db.ExecContext(ctx, s.q(fmt.Sprintf(`DELETE FROM %s WHERE updated_ms < $1`, s.table)), cutoff)
	if err != nil {
		if ctx.Err() == nil && unreachable(err) {
			return 0, fmt.Errorf("%w: purging records: %w", ErrUnavailable, err)
		}
		return 0, fmt.Errorf("idempotency: purging records: %w", err)
	}
	return res.RowsAffected()
}

type record struct {
	state       string // "" when absent
	fence       int64
	response    []byte
	errText     string
	updatedMs   int64
	fingerprint string
}

// q rewrites $n placeholders for the dialect. On SQLite they become "?", in
// order: so every query numbers its parameters in the order of use, once each.
func (s *Store) q(query string) string {
	if s.dialect == Postgres {
		return query
	}
	return placeholder.ReplaceAllString(query, "?")
}

var placeholder = regexp.MustCompile(`\$[0-9]+`)

func (s *Store) get(ctx context.Context, scope, key string) (record, error) {
	var r record
	var response []byte
	var errText sql.NullString
	err := s.db.QueryRowContext(ctx, s.q(fmt.Sprintf(
		`SELECT state, fence, response, error, updated_ms, fingerprint FROM %s WHERE scope = $1 AND request_key = $2`, s.table)),
		scope, key).Scan(&r.state, &r.fence, &response, &errText, &r.updatedMs, &r.fingerprint)
	if errors.Is(err, sql.ErrNoRows) {
		return record{}, nil
	}
	if err != nil {
		return record{}, storeError(ctx, "reading", scope, key, err)
	}
	r.response, r.errText = response, errText.String
	return r, nil
}

// claim makes the run with fence the owner of (scope, key): a new record,
// or a failed or abandoned one taken over (only by a newer fence, and only
// for the same payload). It returns the current record, unclaimed, when
// the request is done, owned by a newer run, or was made for another
// payload (the caller tells which).
func (s *Store) claim(ctx context.Context, scope, key string, fence int64, fingerprint string) (record, bool, error) {
	now := time.Now().UnixMilli()
	res, err := s.db.ExecContext(ctx, s.q(fmt.Sprintf(
		`INSERT INTO %s (scope, request_key, state, fence, fingerprint, updated_ms) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (scope, request_key) DO NOTHING`, s.table)),
		scope, key, stateInProgress, fence, fingerprint, now)
	if err != nil {
		return record{}, false, storeError(ctx, "claiming", scope, key, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return record{}, true, nil
	}
	// The record exists. Its fingerprint is checked before a takeover: a
	// failed request is run again only for the payload it was made for.
	r, err := s.get(ctx, scope, key)
	if err != nil || r.state == stateDone || mismatch(r.fingerprint, fingerprint) {
		return r, false, err
	}
	if fingerprint == "" {
		fingerprint = r.fingerprint // keep what the record was made for
	}
	res, err = s.db.ExecContext(ctx, s.q(fmt.Sprintf(
		`UPDATE %s SET state = $1, fence = $2, error = NULL, updated_ms = $3, fingerprint = $4
WHERE scope = $5 AND request_key = $6 AND state <> $7 AND fence < $8`, s.table)),
		stateInProgress, fence, now, fingerprint, scope, key, stateDone, fence)
	if err != nil {
		return record{}, false, storeError(ctx, "taking over", scope, key, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return record{}, true, nil
	}
	r, err = s.get(ctx, scope, key)
	return r, false, err
}

// run runs op in a transaction that also marks the record done, only if
// the run with fence still owns it. On op's error it marks the record
// failed (if still owned) and returns the error.
func (s *Store) run(ctx context.Context, scope, key string, fence int64, op Operation) ([]byte, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, storeError(ctx, "beginning the transaction of", scope, key, err)
	}
	defer tx.Rollback() // no-op after Commit

	response, opErr := op(ctx, tx)
	if opErr != nil {
		tx.Rollback()
		s.markFailed(ctx, scope, key, fence, opErr)
		return nil, opErr
	}
	if response == nil {
		response = []byte{}
	}
	res, err := tx.ExecContext(ctx, s.q(fmt.Sprintf(
		`UPDATE %s SET state = $1, response = $2, updated_ms = $3
WHERE scope = $4 AND request_key = $5 AND state = $6 AND fence = $7`, s.table)),
		stateDone, response, time.Now().UnixMilli(), scope, key, stateInProgress, fence)
	if err != nil {
		return nil, storeError(ctx, "completing", scope, key, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return nil, fmt.Errorf("%w: %s %q", ErrSuperseded, scope, key)
	}
	if err := tx.Commit(); err != nil {
		// If the connection broke, the commit may or may not have
		// happened: a retry replays the response or runs op again.
		return nil, storeError(ctx, "committing", scope, key, err)
	}
	return response, nil
}

// markFailed records op's error, best effort: if it cannot be written (the
// context is gone, the process dies), the record stays in_progress and the
// next request takes it over just the same.
func (s *Store) markFailed(ctx context.Context, scope, key string, fence int64, opErr error) {
	_, _ = s.db.ExecContext(ctx, s.q(fmt.Sprintf(
		`UPDATE %s SET state = $1, error = $2, updated_ms = $3
WHERE scope = $4 AND request_key = $5 AND state = $6 AND fence = $7`, s.table)),
		stateFailed, opErr.Error(), time.Now().UnixMilli(), scope, key, stateInProgress, fence)
}

// storeError wraps err, an error of the database while doing something to
// the record of (scope, key). It also matches ErrUnavailable when err says
// that the database could not be reached or stopped answering, and ctx,
// the caller's, had not ended (then the error is the caller's giving up).
// Errors of op are never passed here: op may talk to other systems.
func storeError(ctx context.Context, doing, scope, key string, err error) error {
	if ctx.Err() == nil && unreachable(err) {
		return fmt.Errorf("%w: %s %s %q: %w", ErrUnavailable, doing, scope, key, err)
	}
	return fmt.Errorf("idempotency: %s %s %q: %w", doing, scope, key, err)
}

// unreachable reports whether err, from database/sql, says the database
// could not be reached or the connection broke, as far as a driver-neutral
// look can tell: a network error (refused, reset, timeout), a connection
// database/sql or the driver found bad, a reply cut short, or an SQLSTATE
// of class 08 (connection exception) or 57P01-57P03 (the server is
// shutting down or starting). Anything else, such as a constraint
// violation or SQLite's "database is locked", is not an outage.
func unreachable(err error) bool {
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		code := state.SQLState()
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
	}
	return false
}
