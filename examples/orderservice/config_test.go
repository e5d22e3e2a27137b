package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigPrecedence(t *testing.T) {
	cfg, err := parseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:8080" || cfg.DatabaseURL != "" || cfg.Database() != "sqlite" || cfg.WorkDelay != 2*time.Millisecond || cfg.NoLock {
		t.Errorf("defaults: %+v", cfg)
	}

	e := env(map[string]string{EnvListen: ":9000", EnvRedisURL: "redis://:envpw@r:6379/1", EnvDatabaseURL: "postgres://u:pw@db/x"})
	cfg, err = parseConfig(nil, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":9000" || cfg.RedisURL != "redis://:envpw@r:6379/1" || cfg.Database() != "postgres" {
		t.Errorf("from the environment: %+v", cfg)
	}

	cfg, err = parseConfig([]string{"-listen", ":7000", "-redis-url", "redis://flag:6379", "-no-lock", "-work-delay", "5ms", "-lock-wait", "250ms"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":7000" || cfg.RedisURL != "redis://flag:6379" || !cfg.NoLock || cfg.WorkDelay != 5*time.Millisecond || cfg.LockWait != 250*time.Millisecond {
		t.Errorf("flags over the environment: %+v", cfg)
	}
	if cfg.DatabaseURL != "postgres://u:pw@db/x" {
		t.Errorf("DATABASE_URL lost: %q", cfg.DatabaseURL)
	}
}

func TestConfigInvalid(t *testing.T) {
	for _, args := range [][]string{
		{"-lock-ttl", "1ms"},
		{"-lock-wait", "-1s"},
		{"-work-delay", "-1ms"},
		{"-log-level", "loud"},
		{"-sqlite", "a?b"},
		{"extra"},
	} {
		if _, err := parseConfig(args, env(nil), io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestHelpNeverShowsPasswords(t *testing.T) {
	var out bytes.Buffer
	_, err := parseConfig([]string{"-h"}, env(map[string]string{EnvRedisURL: "redis://:sekrit1@r:6379", EnvDatabaseURL: "postgres://u:sekrit2@db/x"}), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	help := out.String()
	if strings.Contains(help, "sekrit") {
		t.Errorf("help shows a password:\n%s", help)
	}
	if !strings.Contains(help, "DEMONSTRATION OF THE FAILURE") {
		t.Errorf("help does not mark --no-lock as a demonstration:\n%s", help)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@host:6379/0":                       "redis://:xxxxx@host:6379/0",
		"redis://user:pw@host:6379":                     "redis://user:xxxxx@host:6379",
		"redis://host:6379":                             "redis://host:6379",
		"postgres://u:p%40ss@db:5432/x?sslmode=disable": "postgres://u:xxxxx@db:5432/x?sslmode=disable",
		"postgres://u@db/x?password=pw&sslmode=disable": "postgres://u@db/x?password=xxxxx&sslmode=disable",
		"host=db user=u password=pw dbname=x":           "host=db user=u password=xxxxx dbname=x",
		"host=db password='p w\\'d' dbname=x":           "host=db password=xxxxx dbname=x",
		"postgres://u:pw@[bad":                          "(unparseable URL, not shown)",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}

	cfg := defaultConfig()
	cfg.RedisURL = "redis://:topsecret@host:6379"
	cfg.DatabaseURL = "host=db password=hunter2 dbname=x"
	clean := cfg.Redactor()
	msg := clean(`dial "redis://:topsecret@host:6379" failed; also hunter2 and topsecret`)
	if strings.Contains(msg, "topsecret") || strings.Contains(msg, "hunter2") {
		t.Errorf("Redactor left a password: %s", msg)
	}

	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("starting", "config", cfg)
	if strings.Contains(logs.String(), "topsecret") || strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the logged config shows a password: %s", logs.String())
	}
}

// A bad Redis password must not appear in the startup error either.
func TestStartupErrorRedacted(t *testing.T) {
	srv := servertest.Redis(t)
	// (redisserver cannot start a server with --requirepass: its readiness
	// PING is refused, so the password is set once it runs.)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if err := rdb.ConfigSet(context.Background(), "requirepass", "rightpass").Err(); err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	cfg.SQLitePath = filepath.Join(t.TempDir(), "orders.db")
	cfg.RedisURL = "redis://:wrongpass99@" + srv.Addr() + "/0"
	log, _ := testLogger(t)
	_, err := NewApp(context.Background(), cfg, log)
	if err == nil {
		t.Fatal("NewApp with a wrong Redis password: no error")
	}
	if strings.Contains(err.Error(), "wrongpass99") {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestRunDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "loadtest") {
		t.Errorf("help: %d %q", code, out.String())
	}
	if code := run([]string{"frobnicate"}, &out, &errOut); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
	if code := run([]string{"loadtest", "-instances", "1"}, &out, &errOut); code != 2 {
		t.Errorf("loadtest -instances 1: exit %d, want 2", code)
	}
}
