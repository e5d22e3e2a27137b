package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/fencelock/fencelock/testing/servertest"
)

// EnvChromium names the environment variable that, when set, says which
// Chromium binary the browser tests run; otherwise the first of chromiums
// found on $PATH.
const EnvChromium = "FENCELOCK_CHROMIUM"

// chromiums are the binaries looked for on $PATH, in order.
var chromiums = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"}

// page is one tab of a headless Chromium driven by chromedp, with the
// errors the page reports (uncaught exceptions, console.error and
// console.assert, errors in the browser's log) collected as they come.
type page struct {
	ctx  context.Context // chromedp's, for the tab
	mu   sync.Mutex
	errs []string
}

// browser starts a headless Chromium with a window of width by height for
// the test, and stops it at the test's end. Without a Chromium the test is
// skipped, or fails when servertest.RequireServers.
func browser(t *testing.T, ctx context.Context, width, height int) *page {
	t.Helper()
	path, err := findChromium()
	if err != nil {
		if servertest.RequireServers() {
			t.Fatalf("%v (%s=1, so this is a failure)", err, servertest.EnvRequireServers)
		}
		t.Skipf("skipping: %v (set %s=1 to fail instead)", err, servertest.EnvRequireServers)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the sandbox refuses to run as root, as CI does
		chromedp.WindowSize(width, height),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	)
	// Not ctx: the browser lives as long as the context of its first Run,
	// and the test ends it with cancel, after which it has exited.
	actx, acancel := chromedp.NewExecAllocator(context.WithoutCancel(ctx), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	p := &page{ctx: bctx}
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		bcancel()
		acancel()
		t.Fatalf("starting %s: %v", path, err)
	}
	console := chromedp.Console(bctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == "assert" {
				p.mu.Lock()
				p.errs = append(p.errs, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		bcancel()
		acancel()
		<-done
	})
	return p
}

// findChromium returns $FENCELOCK_CHROMIUM or the first of chromiums on
// $PATH, or an error that says how to install one.
func findChromium() (string, error) {
	const hint = "run scripts/setup.sh, or apt-get install -y chromium (Debian) / chromium-browser (Ubuntu)"
	if p := os.Getenv(EnvChromium); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("no Chromium: $%s=%q is not an executable (%v); %s", EnvChromium, p, err, hint)
		}
		return path, nil
	}
	for _, name := range chromiums {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("no Chromium on $PATH (tried %s): %s, or set $%s", strings.Join(chromiums, ", "), hint, EnvChromium)
}

// run runs a on the tab until it is done or ctx ends.
func run[T any](p *page, ctx context.Context, a chromedp.Action[T]) (T, error) {
	rctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	return chromedp.Run(rctx, a)
}

// Navigate opens url in the tab and waits for it to load.
func (p *page) Navigate(ctx context.Context, url string) error {
	_, err := run(p, ctx, chromedp.Navigate(url))
	return err
}

// Eval evaluates the JavaScript expression expr in the page and decodes its
// value (as JSON) into out.
func (p *page) Eval(ctx context.Context, expr string, out any) error {
	raw, err := run(p, ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// WaitTrue waits until the JavaScript expression expr is true in the page
// (checked at every animation frame), or ctx ends; the error then says
// what expr was.
func (p *page) WaitTrue(ctx context.Context, expr string) error {
	_, err := run(p, ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(0)))
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", expr, err)
	}
	return nil
}

// Screenshot returns a PNG of the page's viewport.
func (p *page) Screenshot(ctx context.Context) ([]byte, error) {
	return run(p, ctx, chromedp.CaptureScreenshot())
}

// Errors returns the errors the page has reported so far.
func (p *page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errs...)
}
