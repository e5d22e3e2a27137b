package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/servertest"
)

func TestDashboardBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool   // a pointer to -h is printed
		want  string // in stderr
	}{
		{[]string{"extra"}, true, `unexpected argument "extra"`},
		{[]string{"--namespace", ""}, true, `invalid --namespace ""`},
		{[]string{"--redis", "redis://[::1"}, true, "invalid --redis URL"},
		{[]string{"--namespace", "a{b}"}, false, `invalid namespace "a{b}"`},
		{[]string{"--interval", "1ms"}, false, `invalid interval "1ms"`},
		{[]string{"--max-locks", "0"}, false, `invalid max locks "0"`},
		{[]string{"--max-locks", "10001"}, false, `invalid max locks "10001"`},
		{[]string{"--interval", "0s"}, false, `invalid interval "0s"`},
		{[]string{"--listen", "127.0.0.1:99999"}, false, `cannot listen on --listen "127.0.0.1:99999"`},
	} {
		code, _, errOut := runCLI(append([]string{"dashboard"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "-h") != tc.usage || strings.Count(errOut, "fencelock") != 1+btoi(tc.usage) {
			t.Errorf("fencelock dashboard %q: exit %d, stderr %q; want 2 and %q (pointer to -h: %v)", tc.args, code, errOut, tc.want, tc.usage)
		}
	}
	if code, _, errOut := runCLI("dashboard", "-h"); code != 0 || !strings.Contains(errOut, "--listen") || !strings.Contains(errOut, "loopback") {
		t.Errorf("fencelock dashboard -h: exit %d, %q", code, errOut)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The command serves the page on the address it prints, starts while Redis
// is unreachable (the page says so), and exits 0 on SIGINT.
func TestDashboardServes(t *testing.T) {
	srv := servertest.Redis(t)
	// The test's own subscription keeps a SIGINT from killing the test
	// binary, whenever it comes (the command's handler gets it too).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	for _, tc := range []struct {
		redis, wantErr string
	}{
		{srv.Addr(), ""},
		{"127.0.0.1:1", "Redis unreachable"},
	} {
		outR, outW := io.Pipe()
		var errOut strings.Builder
		done := make(chan int, 1)
		stopped := false
		t.Cleanup(func() { // on a failure below: stop the command
			if !stopped {
				syscall.Kill(syscall.Getpid(), syscall.SIGINT)
				<-done
			}
		})
		go func() {
			code := run([]string{"dashboard", "--redis", tc.redis, "--listen", "127.0.0.1:0", "--interval", "100ms"}, outW, &lockedWriter{w: &errOut})
			outW.Close()
			done <- code
		}()
		// The address line is printed once the signal handler is in
		// place, so the SIGINT below goes to the command.
		line, err := bufio.NewReader(outR).ReadString('\n')
		if err != nil {
			t.Fatalf("no address line: %v (exit %d)", err, <-done)
		}
		go io.Copy(io.Discard, outR)
		_, rest, _ := strings.Cut(line, "http://")
		base, _, _ := strings.Cut(rest, " ")
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		var snap struct{ Namespace, Error string }
		if !pollFor(30*time.Second, func() bool {
			snap.Namespace, snap.Error = "", ""
			resp, err := client.Get("http://" + base + "state")
			if err != nil {
				t.Fatal(err)
			}
			json.NewDecoder(resp.Body).Decode(&snap)
			resp.Body.Close()
			return (tc.wantErr == "" && snap.Error == "") || (tc.wantErr != "" && strings.HasPrefix(snap.Error, tc.wantErr))
		}) {
			t.Fatalf("--redis %s: /state says namespace %q, error %q; want error %q", tc.redis, snap.Namespace, snap.Error, tc.wantErr)
		}
		if resp, err := client.Get("http://" + base); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /: %v %v", resp, err)
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), "static/app.js") {
				t.Errorf("GET / is not the page: %.200s", b)
			}
		}
		syscall.Kill(syscall.Getpid(), syscall.SIGINT)
		select {
		case code := <-done:
			stopped = true
			if code != 0 {
				t.Errorf("--redis %s: exit %d after SIGINT, want 0; stderr:\n%s", tc.redis, code, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("--redis %s: still running 30s after SIGINT", tc.redis)
		}
	}
}

// lockedWriter lets the command's goroutines share a buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
