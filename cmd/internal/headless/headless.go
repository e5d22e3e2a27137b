// Package headless drives a headless Chromium over the DevTools protocol,
// for tests of web pages (the dashboard's): open a URL, evaluate
// JavaScript in the page, collect the page's errors, take a screenshot.
// It speaks the protocol over a minimal WebSocket client of its own, so the
// root module needs no browser-automation dependency.
//
// Every browser runs in its own process group with a temporary profile,
// and is killed with its child processes by Close (and, on Linux, when the
// test binary dies: see testing/childproc).
package headless

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/testing/childproc"
)

// EnvBrowserPath names the environment variable that, when set, says
// which browser binary Find returns.
const EnvBrowserPath = "FENCELOCK_CHROMIUM"

// InstallHint says how to install a headless-capable Chromium.
const InstallHint = "run scripts/setup.sh, or apt-get install -y chromium (Debian) / chromium-browser (Ubuntu)"

// ErrNotFound is wrapped by the error Find (and Start) returns when no
// Chromium is installed.
var ErrNotFound = errors.New("headless: no chromium found")

// names are the binaries Find looks for on $PATH, in order.
var names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"}

// Find returns the path of a Chromium binary: $FENCELOCK_CHROMIUM if set,
// else the first of chromium, chromium-browser, google-chrome,
// google-chrome-stable or headless_shell on $PATH. The error wraps
// ErrNotFound and says how to install one.
func Find() (string, error) {
	if p := os.Getenv(EnvBrowserPath); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%w: $%s=%q is not an executable (%v); %s", ErrNotFound, EnvBrowserPath, p, err, InstallHint)
		}
		return path, nil
	}
	for _, n := range names {
		if path, err := exec.LookPath(n); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%w on $PATH (tried %s): %s, or set $%s", ErrNotFound, strings.Join(names, ", "), InstallHint, EnvBrowserPath)
}

// Options configures Start.
type Options struct {
	Width, Height int // the window, in CSS pixels; 0 means 1280 by 800
}

// Browser is one headless Chromium with one page, driven over the DevTools
// protocol. Its methods may be called from several goroutines.
type Browser struct {
	cmd *exec.Cmd
	dir string // the temporary profile and the browser's log
	ws  *wsConn

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan reply
	errs    []string // the page's uncaught exceptions and console errors
	readErr error    // why the reader stopped

	readerDone chan struct{} // closed when read returns
	exited     chan struct{} // closed when the browser process has exited
	closeOnce  sync.Once
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startTimeout bounds the browser's start-up (generous: a busy 2-core
// machine starts Chromium in seconds).
const startTimeout = 60 * time.Second

// Start starts a headless Chromium with one blank page. Close it.
func Start(ctx context.Context, opts Options) (*Browser, error) {
	path, err := Find()
	if err != nil {
		return nil, err
	}
	if opts.Width == 0 {
		opts.Width = 1280
	}
	if opts.Height == 0 {
		opts.Height = 800
	}
	dir, err := os.MkdirTemp("", "fencelock-headless-")
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "browser.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logFile.Close()
	profile := filepath.Join(dir, "profile")
	cmd := exec.Command(path,
		"--headless",
		"--no-sandbox", // the sandbox refuses to run as root, as CI does
		"--disable-gpu",
		"--disable-dev-shm-usage",
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-extensions",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--disable-features=Translate,MediaRouter,OptimizationHints",
		"--mute-audio",
		"--hide-scrollbars",
		"--password-store=basic",
		"--user-data-dir="+profile,
		"--remote-debugging-address=127.0.0.1",
		"--remote-debugging-port=0", // the port is then written to DevToolsActivePort
		fmt.Sprintf("--window-size=%d,%d", opts.Width, opts.Height),
		"about:blank",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := childproc.Start(cmd, nil); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("headless: starting %s: %w", path, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b := &Browser{cmd: cmd, dir: dir, pending: make(map[int64]chan reply), readerDone: make(chan struct{}), exited: exited}
	fail := func(err error) (*Browser, error) {
		b.kill()
		log := childproc.Tail(childproc.ReadFrom(filepath.Join(dir, "browser.log"), 0), 20)
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w; browser log:\n%s", err, log)
	}
	wsURL, err := pageSocket(ctx, profile, exited)
	if err != nil {
		return fail(err)
	}
	ws, err := dialWS(wsURL)
	if err != nil {
		return fail(err)
	}
	b.ws = ws
	go b.read()
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		if err := b.Call(ctx, m, nil, nil); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// pageSocket waits for the browser to write its DevTools port and returns
// the WebSocket URL of its page.
func pageSocket(ctx context.Context, profile string, exited <-chan struct{}) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var port int
	for port == 0 {
		if b, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort")); err == nil {
			line, _, _ := strings.Cut(string(b), "\n")
			port, _ = strconv.Atoi(strings.TrimSpace(line))
		}
		if port != 0 {
			break
		}
		select {
		case <-exited:
			return "", errors.New("headless: the browser exited at start-up")
		case <-ctx.Done():
			return "", fmt.Errorf("headless: the browser did not open its DevTools port: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	// A client of its own without keep-alive, so that no idle connection
	// (and its goroutines) outlives the call.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/json/list", port), nil)
		resp, err := client.Do(req)
		if err == nil {
			var targets []struct {
				Type, WebSocketDebuggerURL string
			}
			err = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
			for _, t := range targets {
				if t.Type == "page" && t.WebSocketDebuggerURL != "" {
					return t.WebSocketDebuggerURL, nil
				}
			}
		}
		select {
		case <-exited:
			return "", errors.New("headless: the browser exited at start-up")
		case <-ctx.Done():
			return "", fmt.Errorf("headless: the browser has no page to drive (last error: %v): %w", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// read dispatches the browser's messages: replies to their callers, the
// page's errors to b.errs. It returns when the connection ends.
func (b *Browser) read() {
	defer close(b.readerDone)
	for {
		msg, err := b.ws.ReadMessage()
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.pending {
				delete(b.pending, id)
				close(ch)
			}
			b.mu.Unlock()
			return
		}
		var m struct {
			ID     int64           `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			reply
		}
		if json.Unmarshal(msg, &m) != nil {
			continue
		}
		if m.ID != 0 {
			b.mu.Lock()
			ch := b.pending[m.ID]
			delete(b.pending, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m.reply
			}
			continue
		}
		if e := pageError(m.Method, m.Params); e != "" {
			b.mu.Lock()
			b.errs = append(b.errs, e)
			b.mu.Unlock()
		}
	}
}

// pageError describes an event that reports an error of the page: an
// uncaught exception, console.error or console.assert, or an error the
// browser logged (a resource that failed to load, a refused script); ""
// for any other event.
func pageError(method string, params json.RawMessage) string {
	switch method {
	case "Runtime.exceptionThrown":
		var p struct {
			ExceptionDetails struct {
				Text      string `json:"text"`
				URL       string `json:"url"`
				Line      int    `json:"lineNumber"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		json.Unmarshal(params, &p)
		d := p.ExceptionDetails
		return fmt.Sprintf("uncaught exception at %s:%d: %s %s", d.URL, d.Line+1, d.Text, d.Exception.Description)
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		json.Unmarshal(params, &p)
		if p.Type != "error" && p.Type != "assert" {
			return ""
		}
		var parts []string
		for _, a := range p.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		return "console." + p.Type + ": " + strings.Join(parts, " ")
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level, Source, Text, URL string
			} `json:"entry"`
		}
		json.Unmarshal(params, &p)
		if p.Entry.Level != "error" {
			return ""
		}
		return fmt.Sprintf("browser log (%s): %s %s", p.Entry.Source, p.Entry.Text, p.Entry.URL)
	}
	return ""
}

// Call sends a DevTools command and decodes its result into result (if
// not nil).
func (b *Browser) Call(ctx context.Context, method string, params, result any) error {
	ch := make(chan reply, 1)
	b.mu.Lock()
	if b.readErr != nil {
		err := b.readErr
		b.mu.Unlock()
		return fmt.Errorf("headless: %s: the connection to the browser is gone: %w", method, err)
	}
	b.nextID++
	id := b.nextID
	b.pending[id] = ch
	b.mu.Unlock()
	if params == nil {
		params = struct{}{}
	}
	msg, err := json.Marshal(struct {
		ID     int64  `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params"`
	}{id, method, params})
	if err == nil {
		err = b.ws.WriteText(msg)
	}
	if err != nil {
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("headless: %s: %w", method, err)
	}
	select {
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("headless: %s: %w", method, ctx.Err())
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("headless: %s: the connection to the browser is gone", method)
		}
		if r.Error != nil {
			return fmt.Errorf("headless: %s: %s (%d)", method, r.Error.Message, r.Error.Code)
		}
		if result != nil {
			return json.Unmarshal(r.Result, result)
		}
		return nil
	}
}

// Navigate opens url in the page and waits until it has loaded.
func (b *Browser) Navigate(ctx context.Context, url string) error {
	var res struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.Call(ctx, "Page.navigate", map[string]any{"url": url}, &res); err != nil {
		return err
	}
	if res.ErrorText != "" {
		return fmt.Errorf("headless: opening %s: %s", url, res.ErrorText)
	}
	return b.WaitTrue(ctx, `document.readyState === "complete"`)
}

// Eval evaluates a JavaScript expression in the page (awaiting it if it
// is a promise) and decodes its value, as JSON, into out (if not nil).
func (b *Browser) Eval(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := b.Call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res)
	if err != nil {
		return err
	}
	if d := res.ExceptionDetails; d != nil {
		return fmt.Errorf("headless: evaluating %q: %s %s", expr, d.Text, d.Exception.Description)
	}
	if out != nil && res.Result.Value != nil {
		return json.Unmarshal(res.Result.Value, out)
	}
	return nil
}

// WaitTrue evaluates expr every 100 ms until it is true, or ctx ends; the
// error then says what expr was.
func (b *Browser) WaitTrue(ctx context.Context, expr string) error {
	for {
		var ok bool
		err := b.Eval(ctx, expr, &ok)
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("still false")
			}
			return fmt.Errorf("headless: waiting for %s: %w (%v)", expr, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Screenshot returns a PNG of the page's viewport.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	var res struct {
		Data string `json:"data"`
	}
	if err := b.Call(ctx, "Page.captureScreenshot", map[string]any{"format": "png"}, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

// Errors returns the errors the page reported so far: uncaught exceptions,
// console.error and console.assert calls, and errors the browser logged
// (a resource that failed to load, a script the page's policy refused).
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// Close kills the browser and its child processes, waits for them, and
// removes its temporary profile.
func (b *Browser) Close() error {
	b.closeOnce.Do(func() {
		b.ws.Close()
		<-b.readerDone
		b.kill()
		os.RemoveAll(b.dir)
	})
	return nil
}

// kill kills the browser's process group (the browser and its renderer,
// GPU and utility processes) and waits for the browser to exit.
func (b *Browser) kill() {
	syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	<-b.exited
}
