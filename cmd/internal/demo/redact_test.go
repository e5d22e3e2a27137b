package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// leaks reports the first piece (3 characters or more) of secret, as is or
// Go-quoted, that s shows.
func leaks(s, secret string) (string, bool) {
	quoted := strconv.Quote(secret)
	for _, form := range []string{secret, quoted[1 : len(quoted)-1]} {
		for i := 0; i+3 <= len(form); i++ {
			if piece := form[i : i+3]; strings.Contains(s, piece) {
				return piece, true
			}
		}
	}
	return "", false
}

func noLeak(t *testing.T, what, s, secret string) {
	t.Helper()
	if piece, ok := leaks(s, secret); ok {
		t.Errorf("%s shows %q of the password %q: %s", what, piece, secret, s)
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"redis://:Xk7qJ2@localhost:6379/0", "redis://…@localhost:6379/0"},
		{"redis://user:Xk7@qJ2@localhost", "redis://…@localhost"},
		{"rediss://user:Xk7/qJ2@localhost/1", "rediss://…@localhost/1"},
		{"Xk7qJ2@localhost:6379", "…@localhost:6379"},
		{"u:Xk7@c://d", "…@c://d"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// badRedisURLs do not parse; each holds the password Xk7qJ2 in some form.
var badRedisURLs = []struct{ url, password string }{
	{"redis://:Xk7qJ2@local host:6379/0", "Xk7qJ2"},      // the reviewer's: url.Parse quotes the URL
	{"redis://user:Xk7/qJ2@localhost:6379/0", "Xk7/qJ2"}, // unescaped '/': the rest looks like a port
	{"redis://user:Xk7@qJ2@local host/0", "Xk7@qJ2"},
	{"redis://:Xk7%zqJ2@localhost/0", "Xk7%zqJ2"},   // a bad escape, which url.Parse quotes
	{`redis://:Xk7"\qJ2@local host/0`, `Xk7"\qJ2`},  // Go-quoted in the message
	{"redis://user:Xk7qJ2@localhost/0/1", "Xk7qJ2"}, // go-redis: a bad path
	{"bogus://user:Xk7qJ2@localhost/0", "Xk7qJ2"},   // go-redis: a bad scheme
	{"user:Xk7qJ2@local host:6379", "Xk7qJ2"},       // no scheme: the demo adds redis://
}

// TestRunRedisURLPassword checks that an invalid or unreachable Redis URL
// makes Run fail without showing its password.
func TestRunRedisURLPassword(t *testing.T) {
	cases := append(badRedisURLs, struct{ url, password string }{"redis://:Xk7qJ2@127.0.0.1:1/0", "Xk7qJ2"}) // parses, cannot be reached
	for _, tc := range cases {
		var out bytes.Buffer
		rep, err := Run(context.Background(), Config{RedisURL: tc.url, WorkerCommand: []string{"unused"}, Progress: &out})
		if err == nil || rep != nil {
			t.Errorf("%s: Run did not fail: %v", tc.url, err)
			continue
		}
		noLeak(t, "Run's error", err.Error(), tc.password)
		noLeak(t, "Run's progress output", out.String(), tc.password)
		if !strings.Contains(err.Error(), "…@") {
			t.Errorf("%s: the error does not show the redacted URL: %v", tc.url, err)
		}
	}
}

func TestWorkerRedisURLPassword(t *testing.T) {
	for _, tc := range badRedisURLs {
		var out bytes.Buffer
		err := runWorker(context.Background(), workerConfig{RedisURL: tc.url}, strings.NewReader(""), &emitter{enc: json.NewEncoder(&out)}, nil)
		if err == nil {
			t.Errorf("%s: the worker started", tc.url)
			continue
		}
		noLeak(t, "the worker's error", err.Error(), tc.password)
		noLeak(t, "the worker's output", out.String(), tc.password)
	}
}

// badPostgresURLs do not parse; each holds the password Xk7qJ2 in some form.
var badPostgresURLs = []struct{ url, password string }{
	{"postgres://u:Xk7/qJ2@localhost/db", "Xk7/qJ2"},
	{"postgres://u:Xk7@qJ2@local host/db", "Xk7@qJ2"},
	{"postgresql://u:Xk7qJ2@localhost:port/db", "Xk7qJ2"},
	{"postgres://localhost:port/db?password=Xk7qJ2", "Xk7qJ2"},
	{"host=localhost port=port password=Xk7qJ2", "Xk7qJ2"},
	{"host=localhost password='Xk7 qJ2' port=port", "Xk7 qJ2"},
	{"host=localhost password=Xk7qJ2 sslmode=bogus", "Xk7qJ2"},
}

// TestPostgresURLPassword checks that opening the PostgreSQL store (as the
// master and every worker do) fails without showing the password.
func TestPostgresURLPassword(t *testing.T) {
	for _, tc := range badPostgresURLs {
		if _, err := openPostgres(tc.url); err == nil {
			t.Errorf("%s: openPostgres accepted it", tc.url)
		} else {
			noLeak(t, "openPostgres's error", err.Error(), tc.password)
		}
		st, err := openStore(context.Background(), storeConfig{Kind: StorePostgres, DSN: tc.url, Table: "t"}, nil, true)
		if err == nil {
			st.close()
			t.Errorf("%s: openStore accepted it", tc.url)
			continue
		}
		noLeak(t, "openStore's error", err.Error(), tc.password)
	}
}

// TestRunPostgresURLPassword runs the demo with a PostgreSQL URL that does
// not parse: it fails without showing the password.
func TestRunPostgresURLPassword(t *testing.T) {
	srv := servertest.Redis(t)
	sc, _ := Lookup("mutex")
	for _, tc := range badPostgresURLs[:2] {
		var out bytes.Buffer
		rep, err := Run(context.Background(), Config{
			Scenarios: []Scenario{sc}, Workers: 2, Iterations: 1, RedisURL: srv.Addr(),
			Store: StorePostgres, PostgresURL: tc.url, WorkerCommand: []string{"unused"}, Progress: &out,
		})
		var shown []string
		if err != nil {
			shown = append(shown, err.Error())
		}
		if rep != nil {
			var b bytes.Buffer
			rep.WriteTable(&b)
			rep.WriteJSON(&b)
			shown = append(shown, b.String())
		}
		if err == nil && (rep == nil || rep.Pass) {
			t.Errorf("%s: the demo ran", tc.url)
		}
		noLeak(t, "Run's output", strings.Join(append(shown, out.String()), "\n"), tc.password)
	}
}

func TestSecretsScrub(t *testing.T) {
	var s secrets
	s.add(`Xk7 "/@qJ2`)
	s.add("")
	msg := `a Xk7 "/@qJ2 b "Xk7 \"/@qJ2" c Xk7+%22%2F%40qJ2 d Xk7%20%22%2F@qJ2 e`
	noLeak(t, "scrub", s.scrub(msg), `Xk7 "/@qJ2`)
	if got := s.scrub("nothing secret"); got != "nothing secret" {
		t.Errorf("scrub changed %q", got)
	}

	// What the workers print reaches the progress output and the result
	// scrubbed.
	var out bytes.Buffer
	r := &runner{progress: newProgress(&out, false)}
	r.addSecret("Xk7qJ2")
	w := &prefixWriter{w: r.progress, prefix: "worker 0: "}
	w.Write([]byte("connecting to redis://:Xk7qJ2@host failed\n"))
	res := &Result{Reasons: []string{"worker 0: bad password Xk7qJ2"}, Notes: []string{"Xk7qJ2"}}
	r.progress.done("mutex", res)
	r.secrets.scrubResult(res)
	noLeak(t, "progress", out.String(), "Xk7qJ2")
	noLeak(t, "result", strings.Join(append(res.Reasons, res.Notes...), "\n"), "Xk7qJ2")
	if !strings.Contains(out.String(), "worker 0: connecting to redis://:…@host failed") {
		t.Errorf("progress: %q", out.String())
	}
}
