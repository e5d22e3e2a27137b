package childproc_test

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/childproc"
	"github.com/fencelock/fencelock/internal/leakcheck"
)

// TestSpawnerIsNotALeak: Start leaves its spawner goroutine running for the
// life of the process, by design, and leakcheck knows it by name.
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
	const spawner = "github.com/fencelock/fencelock/internal/childproc.spawner("
	if !strings.Contains(stacks, spawner) {
		t.Fatalf("no goroutine running %s...): has it been renamed? leakcheck ignores it by name.\n%s", spawner, stacks)
	}
	if err := leakcheck.Check(); err != nil {
		t.Error(err)
	}
}
