package leaktest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/leaktest"
)

// childEnv makes this test binary a child whose TestMain starts a
// goroutine and hands over to leaktest.Main, so that the tests below can
// see what Main does with the process's exit: "leak" starts one that never
// ends, "late" one that ends after two seconds.
const childEnv = "LEAKTEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "leak":
		stop := make(chan struct{})
		go leakedGoroutine(stop)
		leaktest.Main(m)
	case "late":
		go time.Sleep(2 * time.Second)
		leaktest.Main(m)
	default:
		os.Exit(m.Run())
	}
}

func leakedGoroutine(stop chan struct{}) { <-stop }

// runChild runs this binary as a child of the given kind, with no tests.
func runChild(t *testing.T, kind string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+kind)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestMainFailsOnLeak(t *testing.T) {
	out, err := runChild(t, "leak")
	if err == nil || !strings.Contains(out, "leakedGoroutine") || !strings.Contains(out, "unexpected goroutines") {
		t.Fatalf("a goroutine left running: err = %v, want a failure naming it; output:\n%s", err, out)
	}
}

func TestMainWaitsForLateGoroutines(t *testing.T) {
	if out, err := runChild(t, "late"); err != nil {
		t.Fatalf("a goroutine that ends within %v failed the package: %v; output:\n%s", leaktest.Settle, err, out)
	}
}
