package childproc_test

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/childproc"
	"github.com/fencelock/fencelock/testing/leaktest"
	"go.uber.org/goleak"
)

// TestSpawnerIsNotALeak: Start leaves its spawner goroutine running for the
// life of the process, by design, and leaktest.Options ignores it by name.
func TestSpawnerIsNotALeak(t *testing.T) {
	cmd := exec.Command("true")
	if err := childproc.Start(cmd, nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	spawner := leaktest.Spawner + "("
	if !strings.Contains(stacks, spawner) {
		t.Fatalf("no goroutine running %s...): has it been renamed? leaktest.Spawner names it for goleak to ignore.\n%s", spawner, stacks)
	}
	if err := goleak.Find(leaktest.Options()...); err != nil {
		t.Error(err)
	}
}
