package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

// stores returns every Store implementation, each on a fresh real server.
func stores(t *testing.T) map[string]fence.Store {
	return map[string]fence.Store{
		"redis":    redisStore(t),
		"sqlite":   sqlStore(t, fence.SQLite, sqliteDB(t)),
		"postgres": sqlStore(t, fence.Postgres, postgresDB(t)),
	}
}

func redisStore(t *testing.T) fence.Store {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return fence.NewRedisStore(rdb, "fenced")
}

func sqliteDB(t *testing.T) *sql.DB {
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func sqlStore(t *testing.T, d fence.Dialect, db *sql.DB) fence.Store {
	s, err := fence.NewSQLStore(db, d, "fenced_values")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStores(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			t.Run("lower token rejected, equal accepted", func(t *testing.T) {
				if err := s.Write(ctx, "r1", 10, []byte("ten")); err != nil {
					t.Fatal(err)
				}
				if err := s.Write(ctx, "r1", 10, []byte("ten again")); err != nil {
					t.Fatalf("equal token: %v", err)
				}
				err := s.Write(ctx, "r1", 9, []byte("nine"))
				var stale *fence.StaleError
				if !errors.Is(err, fence.ErrStale) || !errors.As(err, &stale) || stale.Token != 9 || stale.Current != 10 {
					t.Fatalf("lower token: %v", err)
				}
				v, tok, err := s.Read(ctx, "r1")
				if err != nil || string(v) != "ten again" || tok != 10 {
					t.Fatalf("read %q %d %v", v, tok, err)
				}
				if err := s.Write(ctx, "r1", 11, nil); err != nil {
					t.Fatal(err)
				}
				if v, tok, _ := s.Read(ctx, "r1"); len(v) != 0 || tok != 11 {
					t.Fatalf("after an empty value: %q %d", v, tok)
				}
			})
			t.Run("large tokens compare exactly", func(t *testing.T) {
				big := int64(math.MaxInt64 - 1)
				if err := s.Write(ctx, "big", big, []byte("a")); err != nil {
					t.Fatal(err)
				}
				if err := s.Write(ctx, "big", big-1, []byte("b")); !errors.Is(err, fence.ErrStale) {
					t.Fatalf("max-2 after max-1: %v", err)
				}
				if err := s.Write(ctx, "big", math.MaxInt64, []byte("c")); err != nil {
					t.Fatal(err)
				}
				// Around a server-time fence (~1.8e15), beyond double precision
				// for the neighbours of 2^53 as well.
				if err := s.Write(ctx, "t", 1<<53+1, []byte("x")); err != nil {
					t.Fatal(err)
				}
				if err := s.Write(ctx, "t", 1<<53, []byte("y")); !errors.Is(err, fence.ErrStale) {
					t.Fatalf("2^53 after 2^53+1: %v", err)
				}
			})
			t.Run("concurrent writers: the largest token wins", func(t *testing.T) {
				for round := range 5 {
					res := fmt.Sprintf("race-%d", round)
					tokens := rand.Perm(64)
					var wg sync.WaitGroup
					var mu sync.Mutex
					accepted, refused := 0, 0
					for _, tok := range tokens {
						wg.Go(func() {
							err := s.Write(ctx, res, int64(tok+1), fmt.Appendf(nil, "v%d", tok+1))
							mu.Lock()
							defer mu.Unlock()
							switch {
							case err == nil:
								accepted++
							case errors.Is(err, fence.ErrStale):
								refused++
							default:
								t.Error(err)
							}
						})
					}
					wg.Wait()
					v, tok, err := s.Read(ctx, res)
					if err != nil || tok != 64 || string(v) != "v64" {
						t.Fatalf("round %d: final %q token %d (%v), want v64/64", round, v, tok, err)
					}
					if accepted+refused != 64 || accepted == 0 {
						t.Fatalf("accepted %d refused %d", accepted, refused)
					}
				}
			})
			t.Run("bad input", func(t *testing.T) {
				if err := s.Write(ctx, "", 1, nil); err == nil {
					t.Fatal("empty resource accepted")
				}
				if err := s.Write(ctx, "r", 0, nil); err == nil {
					t.Fatal("zero token accepted")
				}
				if _, _, err := s.Read(ctx, "never"); !errors.Is(err, fence.ErrNotFound) {
					t.Fatalf("read of a never-written resource: %v", err)
				}
			})
		})
	}
}

// A fenced write inside the caller's transaction rolls back with it.
func TestSQLWriteInTransaction(t *testing.T) {
	for name, db := range map[string]*sql.DB{"sqlite": sqliteDB(t), "postgres": postgresDB(t)} {
		t.Run(name, func(t *testing.T) {
			d := fence.SQLite
			if name == "postgres" {
				d = fence.Postgres
			}
			s := sqlStore(t, d, db).(*fence.SQLStore)
			ctx := context.Background()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.WriteWith(ctx, tx, "tx", 5, []byte("in tx")); err != nil {
				t.Fatal(err)
			}
			tx.Rollback()
			if _, _, err := s.Read(ctx, "tx"); !errors.Is(err, fence.ErrNotFound) {
				t.Fatalf("after rollback: %v", err)
			}
		})
	}
	if _, err := fence.NewSQLStore(nil, fence.SQLite, "bad name; drop table x"); err == nil {
		t.Fatal("a bad table name was accepted")
	}
}
