package demo

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"github.com/fencelock/fencelock/fence"
	"github.com/redis/go-redis/v9"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"
)

// Store kinds (--store).
const (
	StoreRedis    = "redis"
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// StoreKinds lists the accepted --store values.
var StoreKinds = []string{StoreRedis, StoreSQLite, StorePostgres}

// sqliteDSN opens path in WAL mode with a busy timeout, so that the worker
// processes can share the file. The busy timeout comes first: switching to
// WAL needs a lock that another process opening the file may hold.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
}

// sqliteConfig is the store of a scenario on a SQLite file in dir.
func sqliteConfig(dir, scenario string) storeConfig {
	return storeConfig{Kind: StoreSQLite, DSN: sqliteDSN(filepath.Join(dir, "fence-"+scenario+".db")), Table: "fenced_values"}
}

// openedStore is a fenced store and what closes it.
type openedStore struct {
	fence.Store
	close func() error
	drop  func(context.Context) error // removes the data (SQL table); nil when nothing to do
}

// openStore opens the store described by cfg. rdb is used for the Redis
// store. With migrate, the SQL table is created first.
func openStore(ctx context.Context, cfg storeConfig, rdb redis.UniversalClient, migrate bool) (*openedStore, error) {
	switch cfg.Kind {
	case StoreRedis:
		return &openedStore{Store: fence.NewRedisStore(rdb, cfg.Prefix), close: func() error { return nil }}, nil
	case StoreSQLite, StorePostgres:
		driver, dialect := "sqlite", fence.SQLite
		if cfg.Kind == StorePostgres {
			driver, dialect = "pgx", fence.Postgres
			// pgx parses the data source name when it first connects, with
			// errors that may show its password: parse it here first.
			if _, err := parsePostgresURL(cfg.DSN); err != nil {
				return nil, err
			}
		}
		db, err := sql.Open(driver, cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("opening the %s store: %w", cfg.Kind, err)
		}
		db.SetMaxOpenConns(2)
		s, err := fence.NewSQLStore(db, dialect, cfg.Table)
		if err != nil {
			db.Close()
			return nil, err
		}
		if migrate {
			if err := s.Migrate(ctx); err != nil {
				db.Close()
				return nil, fmt.Errorf("creating the %s store's table: %w", cfg.Kind, err)
			}
		}
		return &openedStore{
			Store: s,
			close: db.Close,
			drop: func(ctx context.Context) error {
				_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+cfg.Table)
				return err
			},
		}, nil
	default:
		return nil, fmt.Errorf("unknown store %q", cfg.Kind)
	}
}
