package fence_test

import (
	"database/sql"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// postgresDB opens a fresh database on the test PostgreSQL server.
func postgresDB(t *testing.T) *sql.DB {
	url := servertest.Postgres(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
