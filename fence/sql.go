package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
)

// Dialect is the SQL flavour of a SQLStore.
type Dialect int

const (
	// Postgres is PostgreSQL (for example through github.com/jackc/pgx/v5/stdlib).
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.24 or later (for example modernc.org/sqlite).
	SQLite
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	default:
		return fmt.Sprintf("Dialect(%d)", int(d))
	}
}

// Querier is what a SQLStore writes through: *sql.DB, *sql.Tx or *sql.Conn.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLStore is a Store in a SQL table:
//
//	CREATE TABLE <table> (
//	    resource TEXT   PRIMARY KEY,
//	    value    BYTEA  NOT NULL,   -- BLOB on SQLite
//	    fence    BIGINT NOT NULL    -- the token of the accepted value
//	)
//
// A write is one statement, an insert that on conflict updates only where
// the stored fence is not larger:
//
//	INSERT INTO <table> (resource, value, fence) VALUES ($1, $2, $3)
//	ON CONFLICT (resource) DO UPDATE SET value = excluded.value, fence = excluded.fence
//	WHERE <table>.fence <= excluded.fence
//
// so the first write of a resource and every later one are race-free without
// locking: no row changed means a newer token is there.
type SQLStore struct {
	db      *sql.DB
	dialect Dialect
	table   string
	write   string
	read    string
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// NewSQLStore returns a SQLStore on table (created by Migrate).
func NewSQLStore(db *sql.DB, dialect Dialect, table string) (*SQLStore, error) {
	if dialect != Postgres && dialect != SQLite {
		return nil, fmt.Errorf("fence: invalid dialect %v: want fence.Postgres or fence.SQLite", dialect)
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("fence: invalid table name %q: want letters, digits and underscores", table)
	}
	s := &SQLStore{db: db, dialect: dialect, table: table}
	s.write = fmt.Sprintf(`INSERT INTO %[1]s (resource, value, fence) VALUES (%[2]s, %[3]s, %[4]s)
ON CONFLICT (resource) DO UPDATE SET value = excluded.value, fence = excluded.fence
WHERE %[1]s.fence <= excluded.fence`, table, s.param(1), s.param(2), s.param(3))
	s.read = fmt.Sprintf(`SELECT value, fence FROM %s WHERE resource = %s`, table, s.param(1))
	return s, nil
}

var _ Store = (*SQLStore)(nil)

func (s *SQLStore) param(n int) string {
	if s.dialect == Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// Migrate creates the table if it does not exist.
func (s *SQLStore) Migrate(ctx context.Context) error {
	blob := "BYTEA"
	if s.dialect == SQLite {
		blob = "BLOB"
	}
	_, err := s.db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    resource TEXT   PRIMARY KEY,
    value    %s     NOT NULL,
    fence    BIGINT NOT NULL
)`, s.table, blob))
	return err
}

// Write implements Store.
func (s *SQLStore) Write(ctx context.Context, resource string, token int64, value []byte) error {
	return s.WriteWith(ctx, s.db, resource, token, value)
}

// WriteWith writes through q, which may be the caller's transaction: the
// fenced write then commits or rolls back with the business write next to it.
// On a stale token the transaction is left as it was; the caller rolls back.
func (s *SQLStore) WriteWith(ctx context.Context, q Querier, resource string, token int64, value []byte) error {
	if err := checkArgs(resource, token); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	res, err := q.ExecContext(ctx, s.write, resource, value, token)
	if err != nil {
		return fmt.Errorf("fence: write %q: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: write %q: %w", resource, err)
	}
	if n > 0 {
		return nil
	}
	var current int64
	if err := q.QueryRowContext(ctx, fmt.Sprintf(`SELECT fence FROM %s WHERE resource = %s`, s.table, s.param(1)), resource).Scan(&current); err != nil {
		return fmt.Errorf("fence: write %q: reading the current token: %w", resource, err)
	}
	return &StaleError{Resource: resource, Token: token, Current: current}
}

// Read implements Store.
func (s *SQLStore) Read(ctx context.Context, resource string) ([]byte, int64, error) {
	var value []byte
	var token int64
	err := s.db.QueryRowContext(ctx, s.read, resource).Scan(&value, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	return value, token, nil
}
