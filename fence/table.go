package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Table fences writes to rows of a table of your own: rows that carry a
// fence column, the largest fencing token that has written them,
//
//	fence BIGINT NOT NULL DEFAULT 0
//
// (in SQLite, INTEGER NOT NULL DEFAULT 0). Inside your transaction, before
// writing a row, Claim records the lock's token on it with one statement,
//
//	UPDATE "products" SET "fence" = $1 WHERE "id" = $2 AND "fence" <= $1
//
// and returns a *StaleError if a newer token has written the row: roll
// back, since your lock was lost (it stalled past its lease, or the lock
// service lost it) and a newer holder has been at the row. Otherwise write
// the row (and anything else) in the same transaction and commit: the
// claim and your writes commit together, or not at all.
//
// The claim is safe against a newer holder writing at the same moment. On
// PostgreSQL the UPDATE locks the row until your transaction ends; under
// the default READ COMMITTED isolation a concurrent claim waits for it and
// then checks its token against the committed fence (a stale one matches
// no row, so it gets a *StaleError); under REPEATABLE READ or SERIALIZABLE
// it fails with a serialization error (SQLSTATE 40001) instead, and
// nothing is written either way. SQLite runs one writing transaction at a
// time.
//
// Table and column names are quoted as given (so on PostgreSQL they are
// case-sensitive: pass names created unquoted in lower case); a table may
// be schema-qualified ("shop.products"). Values travel as parameters.
type Table struct {
	dialect Dialect
	name    string   // the table, as given, for messages
	keys    []string // key column names, as given, for messages
	claim   string
	read    string
}

// NewTable returns a Table for table, whose rows are named by keyColumns
// (usually one: the primary key) and carry fenceColumn.
func NewTable(d Dialect, table, fenceColumn string, keyColumns ...string) (*Table, error) {
	if d != Postgres && d != SQLite {
		return nil, fmt.Errorf("fence: invalid dialect %v: want fence.Postgres or fence.SQLite", d)
	}
	if len(keyColumns) == 0 {
		return nil, errors.New("fence: invalid key columns (none): name the columns that identify a row")
	}
	var parts []string
	for part := range strings.SplitSeq(table, ".") {
		q, err := quoteIdent("table name", table, part)
		if err != nil {
			return nil, err
		}
		parts = append(parts, q)
	}
	qtable := strings.Join(parts, ".")
	qfence, err := quoteIdent("fence column", fenceColumn, fenceColumn)
	if err != nil {
		return nil, err
	}
	t := &Table{dialect: d, name: table, keys: slices.Clone(keyColumns)}
	param := func(n int) string {
		if d == Postgres {
			return fmt.Sprintf("$%d", n)
		}
		return fmt.Sprintf("?%d", n) // numbered: $1/?1 is used twice
	}
	var where []string
	for i, col := range keyColumns {
		q, err := quoteIdent("key column", col, col)
		if err != nil {
			return nil, err
		}
		where = append(where, q+" = "+param(i+2))
	}
	keys := strings.Join(where, " AND ")
	t.claim = fmt.Sprintf(`UPDATE %s SET %s = %s WHERE %s AND %s <= %s`, qtable, qfence, param(1), keys, qfence, param(1))
	// The read runs only after a claim changed nothing. It takes the key
	// alone, numbered from 1 (PostgreSQL cannot type a parameter the
	// statement does not use).
	var readWhere []string
	for i, col := range keyColumns {
		q, _ := quoteIdent("key column", col, col)
		readWhere = append(readWhere, q+" = "+param(i+1))
	}
	t.read = fmt.Sprintf(`SELECT %s FROM %s WHERE %s`, qfence, qtable, strings.Join(readWhere, " AND "))
	return t, nil
}

// quoteIdent quotes one identifier for SQL, refusing what no database can
// name: an empty name, a NUL byte, invalid UTF-8, more than 63 bytes
// (PostgreSQL would silently cut it).
func quoteIdent(what, whole, name string) (string, error) {
	bad := func(reason string) (string, error) {
		return "", fmt.Errorf("fence: invalid %s %q: %s", what, whole, reason)
	}
	switch {
	case name == "":
		return bad("empty name")
	case len(name) > 63:
		return bad("a name longer than 63 bytes")
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	case strings.IndexByte(name, 0) >= 0:
		return bad("contains a NUL byte")
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`, nil
}

// Claim records token as the fence of the row named by key (one value per
// key column, in order) through q, your transaction: it returns nil when
// the row's fence was at most token (it is token now), a *StaleError
// (matching ErrStale) when a newer token has written the row, or an error
// matching ErrNotFound when no row has that key. After a *StaleError or
// any error, roll the transaction back.
//
// q may also be a *sql.DB or *sql.Conn, but a claim outside a transaction
// protects nothing that is written after it.
func (t *Table) Claim(ctx context.Context, q Querier, token int64, key ...any) error {
	return t.ClaimRows(ctx, sqlRows{q}, token, key...)
}

// RowQuerier is what ClaimRows writes through: a database interface other
// than database/sql (package fencepgx, a module of its own, adapts pgx's),
// in your transaction.
type RowQuerier interface {
	// Exec runs a statement and returns the number of rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryInt64 returns the one column, an integer, of the one row query
	// returns, or an error matching sql.ErrNoRows when it returns none.
	QueryInt64(ctx context.Context, query string, args ...any) (int64, error)
}

// ClaimRows is Claim through a RowQuerier.
func (t *Table) ClaimRows(ctx context.Context, q RowQuerier, token int64, key ...any) error {
	if err := t.checkClaim(token, key); err != nil {
		return err
	}
	n, err := q.Exec(ctx, t.claim, append([]any{token}, key...)...)
	if err != nil {
		return fmt.Errorf("fence: claiming %s: %w", t.resource(key), err)
	}
	if n > 0 {
		return nil
	}
	current, err := q.QueryInt64(ctx, t.read, key...)
	return t.refused(key, token, current, err)
}

// Dialect returns the SQL dialect the Table was made for.
func (t *Table) Dialect() Dialect { return t.dialect }

// sqlRows is a database/sql Querier as a RowQuerier.
type sqlRows struct{ q Querier }

func (r sqlRows) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := r.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r sqlRows) QueryInt64(ctx context.Context, query string, args ...any) (int64, error) {
	var v int64
	err := r.q.QueryRowContext(ctx, query, args...).Scan(&v)
	return v, err
}

func (t *Table) checkClaim(token int64, key []any) error {
	if token <= 0 {
		return fmt.Errorf("fence: invalid token %d: must be positive", token)
	}
	if len(key) != len(t.keys) {
		return fmt.Errorf("fence: invalid key %v: %s has %d key column(s) (%s)", key, t.name, len(t.keys), strings.Join(t.keys, ", "))
	}
	return nil
}

// refused explains a claim that changed no row, from the fence read after.
func (t *Table) refused(key []any, token, current int64, readErr error) error {
	res := t.resource(key)
	switch {
	case errors.Is(readErr, sql.ErrNoRows):
		return fmt.Errorf("%w: no row %s", ErrNotFound, res)
	case readErr != nil:
		return fmt.Errorf("fence: claiming %s: reading its fence: %w", res, readErr)
	case current > token:
		return &StaleError{Resource: res, Token: token, Current: current}
	default:
		// The row exists with a fence the claim should have accepted; a
		// concurrent writer outside the claim protocol could do this.
		return fmt.Errorf("fence: claiming %s changed no row, though its fence %d is not above %d", res, current, token)
	}
}

// resource names a row for errors: products(id=7).
func (t *Table) resource(key []any) string {
	var b strings.Builder
	b.WriteString(t.name + "(")
	for i, col := range t.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		if i < len(key) {
			fmt.Fprintf(&b, "%s=%v", col, key[i])
		}
	}
	return b.String() + ")"
}
