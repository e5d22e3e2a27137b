package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/redis/go-redis/v9"
)

// Environment variables the service reads. A flag given on the command line
// wins over its variable.
const (
	EnvListen      = "LISTEN"
	EnvRedisURL    = "REDIS_URL"
	EnvDatabaseURL = "DATABASE_URL"
)

// Config is the service's configuration, from flags and the environment.
type Config struct {
	Listen          string        // address to listen on
	RedisURL        string        // redis:// or rediss:// URL (may hold a password), or host:port
	DatabaseURL     string        // PostgreSQL URL or keyword/value string; empty: SQLite
	SQLitePath      string        // SQLite file, when DatabaseURL is empty
	Namespace       string        // fencelock key prefix
	LockTTL         time.Duration // lease of the per-product and per-request locks
	LockWait        time.Duration // how long a request waits for a lock before 503 busy
	WorkDelay       time.Duration // simulated work between reading and writing stock
	NoLock          bool          // demonstration of the failure: no lock, no guards
	ShutdownTimeout time.Duration // bound on waiting for in-flight requests at shutdown
	KeepRecords     time.Duration // idempotency records older than this are purged hourly; 0 keeps them
	LogLevel        slog.Level
}

// defaultConfig returns the configuration used when nothing is set.
func defaultConfig() Config {
	return Config{
		Listen:          "127.0.0.1:8080",
		RedisURL:        "redis://127.0.0.1:6379/0",
		SQLitePath:      "orderservice.db",
		Namespace:       "orderservice",
		LockTTL:         10 * time.Second,
		LockWait:        3 * time.Second,
		WorkDelay:       2 * time.Millisecond,
		ShutdownTimeout: 15 * time.Second,
		KeepRecords:     7 * 24 * time.Hour,
		LogLevel:        slog.LevelInfo,
	}
}

// noLockHelp is the --no-lock flag's help, shown in -h.
const noLockHelp = `DEMONSTRATION OF THE FAILURE, never for real use: skip the distributed lock
and the database guards (the "stock >= N" condition, the fencing check, the
idempotency records) and run the naive read-check-write instead, so that
concurrent requests oversell stock and duplicate orders`

// parseConfig reads the serve flags in args, falling back to getenv for the
// variables above and to defaultConfig. Help goes to output.
func parseConfig(args []string, getenv func(string) string, output io.Writer) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("orderservice serve", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		fmt.Fprintf(output, `Usage: orderservice [serve] [flags]

Runs the order API. Several instances may share one Redis and one database.
Environment: %s, %s, %s (a flag wins over its variable).
Prefer the variables for URLs with passwords: command lines are visible to
other users.

Flags:
`, EnvListen, EnvRedisURL, EnvDatabaseURL)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on (env "+EnvListen+")")
	fs.StringVar(&cfg.RedisURL, "redis-url", cfg.RedisURL, "Redis URL, redis://[:password@]host:port/db, or host:port (env "+EnvRedisURL+")")
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "PostgreSQL URL; empty: use the SQLite file (env "+EnvDatabaseURL+")")
	fs.StringVar(&cfg.SQLitePath, "sqlite", cfg.SQLitePath, "SQLite database file, used when no database URL is set")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "prefix of the lock keys in Redis")
	fs.DurationVar(&cfg.LockTTL, "lock-ttl", cfg.LockTTL, "lease of a lock (renewed every third of it while held)")
	fs.DurationVar(&cfg.LockWait, "lock-wait", cfg.LockWait, "how long a request waits for a busy lock before answering 503 busy")
	fs.DurationVar(&cfg.WorkDelay, "work-delay", cfg.WorkDelay, "simulated work between reading the stock and writing the order")
	fs.BoolVar(&cfg.NoLock, "no-lock", false, noLockHelp)
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long shutdown waits for in-flight requests")
	fs.DurationVar(&cfg.KeepRecords, "keep-records", cfg.KeepRecords, "delete idempotency records older than this, once an hour across the instances (a request number is new again after it); 0 keeps them")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, v := range []struct {
		flag, env string
		dst       *string
	}{
		{"listen", EnvListen, &cfg.Listen},
		{"redis-url", EnvRedisURL, &cfg.RedisURL},
		{"database-url", EnvDatabaseURL, &cfg.DatabaseURL},
	} {
		if value := getenv(v.env); value != "" && !set[v.flag] {
			*v.dst = value
		}
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(*level)); err != nil {
		return Config{}, fmt.Errorf("invalid -log-level %q: want debug, info, warn or error", *level)
	}
	return cfg, cfg.validate()
}

// validate checks the values a flag cannot check by itself.
func (c Config) validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("invalid listen address \"\": must not be empty"))
	}
	if c.RedisURL == "" {
		errs = append(errs, errors.New("invalid Redis URL \"\": must not be empty"))
	} else if _, err := redisOptions(c.RedisURL); err != nil {
		errs = append(errs, err)
	}
	if c.DatabaseURL == "" && c.SQLitePath == "" {
		errs = append(errs, errors.New("invalid -sqlite \"\": a SQLite file is needed when no database URL is set"))
	}
	if strings.ContainsAny(c.SQLitePath, "?#") {
		errs = append(errs, fmt.Errorf("invalid -sqlite %q: must not contain '?' or '#'", c.SQLitePath))
	}
	if c.LockTTL < fencelock.MinTTL {
		errs = append(errs, fmt.Errorf("invalid -lock-ttl %v: must be at least %v", c.LockTTL, fencelock.MinTTL))
	}
	if c.LockWait < 0 {
		errs = append(errs, fmt.Errorf("invalid -lock-wait %v: must not be negative", c.LockWait))
	}
	if c.WorkDelay < 0 {
		errs = append(errs, fmt.Errorf("invalid -work-delay %v: must not be negative", c.WorkDelay))
	}
	if c.KeepRecords != 0 && c.KeepRecords < time.Hour {
		errs = append(errs, fmt.Errorf("invalid -keep-records %v: 0 (keep) or at least 1h, longer than clients retry", c.KeepRecords))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("invalid -shutdown-timeout %v: must be positive", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// Database names the storage in use, for logs.
func (c Config) Database() string {
	if c.DatabaseURL != "" {
		return "postgres"
	}
	return "sqlite"
}

// LogValue makes a Config safe to log: URLs are redacted.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("listen", c.Listen),
		slog.String("redis", RedactURL(c.RedisURL)),
		slog.String("database", c.Database()),
	}
	if c.DatabaseURL != "" {
		attrs = append(attrs, slog.String("database_url", RedactURL(c.DatabaseURL)))
	} else {
		attrs = append(attrs, slog.String("sqlite", c.SQLitePath))
	}
	attrs = append(attrs,
		slog.String("namespace", c.Namespace),
		slog.String("lock_ttl", c.LockTTL.String()),
		slog.String("lock_wait", c.LockWait.String()),
		slog.String("work_delay", c.WorkDelay.String()),
		slog.Bool("no_lock", c.NoLock),
		slog.String("keep_records", c.KeepRecords.String()),
	)
	return slog.GroupValue(attrs...)
}

// redacted is what a secret is replaced with.
const redacted = "xxxxx"

// passwordKV matches password=VALUE in a keyword/value connection string,
// with VALUE quoted ('...', backslash escapes) or not.
var passwordKV = regexp.MustCompile(`(?i)\b(password|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// secretParams are URL query parameters that carry secrets.
var secretParams = []string{"password", "sslpassword", "pass"}

// RedactURL returns a Redis or database URL (or a keyword/value connection
// string) with its password replaced, for logs and messages. A URL it cannot
// parse is not shown at all.
func RedactURL(s string) string {
	if s == "" {
		return ""
	}
	if !strings.Contains(s, "://") {
		return passwordKV.ReplaceAllString(s, "${1}="+redacted)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL, not shown)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for _, p := range secretParams {
			if q.Has(p) {
				q.Set(p, redacted)
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// secretsOf returns the passwords in a URL or connection string, so that
// error messages quoting them can be cleaned (see Redactor).
func secretsOf(s string) []string {
	var out []string
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil {
			if p, ok := u.User.Password(); ok && p != "" {
				out = append(out, p, url.UserPassword("", p).String()[1:]) // raw and escaped
			}
			for _, name := range secretParams {
				if v := u.Query().Get(name); v != "" {
					out = append(out, v)
				}
			}
		}
	}
	for _, m := range passwordKV.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.Trim(m[2], "'"), m[2])
	}
	if len(out) > 0 {
		out = append(out, s) // the whole string, in case it is quoted verbatim
	}
	return out
}

// Redactor returns a function that removes the passwords of the configured
// URLs from a message (drivers sometimes quote a connection string in their
// errors).
func (c Config) Redactor() func(string) string {
	type pair struct{ old, new string }
	var pairs []pair
	for _, s := range []string{c.RedisURL, c.DatabaseURL} {
		for _, secret := range secretsOf(s) {
			switch {
			case secret == s:
				pairs = append(pairs, pair{secret, RedactURL(s)})
			case secret != "":
				pairs = append(pairs, pair{secret, redacted})
			}
		}
	}
	if len(pairs) == 0 {
		return func(s string) string { return s }
	}
	// Longest first, so that a whole URL is replaced before its password.
	slices.SortStableFunc(pairs, func(a, b pair) int { return len(b.old) - len(a.old) })
	var oldnew []string
	for _, p := range pairs {
		oldnew = append(oldnew, p.old, p.new)
	}
	return strings.NewReplacer(oldnew...).Replace
}

// redisOptions reads the Redis address: a redis:// or rediss:// URL, or a
// bare host:port as the fencelock CLI takes it (database 0, no password:
// use a URL, through the environment, for a password). The errors never
// quote the URL, which may hold a password.
func redisOptions(raw string) (*redis.Options, error) {
	if strings.Contains(raw, "://") {
		opts, err := redis.ParseURL(raw)
		if err != nil {
			var urlErr *url.Error
			if errors.As(err, &urlErr) {
				err = urlErr.Err // url.Error quotes the whole URL
			}
			return nil, fmt.Errorf("invalid Redis URL %s: %v", RedactURL(raw), err)
		}
		return opts, nil
	}
	if strings.Contains(raw, ",") {
		return nil, fmt.Errorf("invalid Redis address %q: one host:port (orderservice does not use Redis Cluster)", raw)
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || port == "" {
		return nil, fmt.Errorf("invalid Redis address %q: want redis://host:port/db or host:port", raw)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return &redis.Options{Addr: net.JoinHostPort(host, port)}, nil
}
