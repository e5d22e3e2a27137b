package demo

import (
	"fmt"

	"github.com/fencelock/fencelock/testing/pgserver"
)

// pgHandle is the PostgreSQL database of --store postgres.
type pgHandle struct {
	url      string
	password string // from url (or pgx's password file): never shown
	private  bool   // started by the demo
	close    func()
}

// openPostgres uses url, or starts a private PostgreSQL server when it is
// empty.
func openPostgres(url string) (*pgHandle, error) {
	if url != "" {
		cfg, err := parsePostgresURL(url)
		if err != nil {
			return nil, err
		}
		return &pgHandle{url: url, password: cfg.Password, close: func() {}}, nil
	}
	srv, err := pgserver.Start(pgserver.Options{})
	if err != nil {
		return nil, fmt.Errorf("starting a private PostgreSQL server for --store postgres: %w (or pass --postgres-url / set DATABASE_URL)", err)
	}
	return &pgHandle{url: srv.URL(), private: true, close: func() { srv.Close() }}, nil
}
