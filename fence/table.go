package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	if err := t.checkClaim(token, key); err != nil {
		return err
	}
	res, err := q.ExecContext(ctx, t.claim, append([]any{token}, key...)...)
	if err != nil {
		return fmt.Errorf("fence: claiming %s: %w", t.resource(key), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: claiming %s: %w", t.resource(key), err)
	}
	if n > 0 {
		return nil
	}
	var current int64
	err = q.QueryRowContext(ctx, t.read, key...).Scan(&current)
	return t.refused(key, token, current, err)
}

// PgxQuerier is what ClaimPgx writes through: a pgx.Tx (from a *pgx.Conn
// or a *pgxpool.Pool) for pgx users who do not go through database/sql.
type PgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ClaimPgx is Claim through pgx's own interface (PostgreSQL only).
func (t *Table) ClaimPgx(ctx context.Context, q PgxQuerier, token int64, key ...any) error {
	if t.dialect != Postgres {
		return fmt.Errorf("fence: ClaimPgx on a %v table: pgx talks to PostgreSQL only", t.dialect)
	}
	if err := t.checkClaim(token, key); err != nil {
		return err
	}
	tag, err := q.Exec(ctx, t.claim, append([]any{token}, key...)...)
	if err != nil {
		return fmt.Errorf("fence: claiming %s: %w", t.resource(key), err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var current int64
	err = q.QueryRow(ctx, t.read, key...).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		err = sql.ErrNoRows
	}
	return t.refused(key, token, current, err)
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
