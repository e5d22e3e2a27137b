// Package fencepgx claims the rows of a fence.Table through pgx's own
// interface (github.com/jackc/pgx/v5), for programs that use pgx without
// database/sql. It is a module of its own, so that users of package fence
// do not download pgx.
package fencepgx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what Claim writes through: a pgx.Tx (from a *pgx.Conn or a
// *pgxpool.Pool).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Claim is fence.Table's Claim through pgx (PostgreSQL only): it records
// token as the fence of the row named by key inside q, your transaction,
// and returns nil, a *fence.StaleError or an error matching
// fence.ErrNotFound as Claim does.
func Claim(ctx context.Context, t *fence.Table, q Querier, token int64, key ...any) error {
	if t.Dialect() != fence.Postgres {
		return fmt.Errorf("fencepgx: claim on a %v table: pgx talks to PostgreSQL only", t.Dialect())
	}
	return t.ClaimRows(ctx, rows{q}, token, key...)
}

// rows is a Querier as a fence.RowQuerier.
type rows struct{ q Querier }

func (r rows) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := r.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (r rows) QueryInt64(ctx context.Context, query string, args ...any) (int64, error) {
	var v int64
	err := r.q.QueryRow(ctx, query, args...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		err = sql.ErrNoRows
	}
	return v, err
}
