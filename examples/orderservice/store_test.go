package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// envOpenChild makes the test binary a process that opens the SQLite file it
// names, as an instance starting up does (see TestMain and openStoreChild).
const envOpenChild = "ORDERSERVICE_TEST_OPEN_SQLITE"

// openAndUse opens the SQLite file at path, migrates it and writes a row:
// the start of an instance.
func openAndUse(ctx context.Context, path string) error {
	s, err := OpenStore(ctx, "", path)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	if _, err := s.CreateProduct(ctx, "p", 1); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	return nil
}

// openStoreChild is the child process of TestOpenStoreConcurrently: it says
// "ready", waits for the start signal (the end of the pipe it has as file
// descriptor 3, which the parent closes for all the children at once, so
// that they open the database at the same moment), then runs openAndUse.
func openStoreChild(path string) int {
	fmt.Println("ready")
	start := os.NewFile(3, "start")
	if _, err := io.Copy(io.Discard, start); err != nil {
		fmt.Fprintln(os.Stderr, "no start signal:", err)
		return 2
	}
	if err := openAndUse(context.Background(), path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Instances started together on a SQLite file that does not exist yet all
// switch it to WAL mode at once. SQLite answers SQLITE_BUSY at once, without
// calling its busy handler, to a connection that must upgrade its read lock
// while another waits to write, so OpenStore has to retry. The race is lost
// only now and then: many rounds of several openers each.
func TestOpenStoreConcurrently(t *testing.T) {
	t.Run("goroutines", func(t *testing.T) {
		const rounds, openers = 40, 6
		ctx := context.Background()
		failed := 0
		for round := range rounds {
			path := filepath.Join(t.TempDir(), "orders.db")
			errs := make([]error, openers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range openers {
				wg.Go(func() {
					<-start
					errs[i] = openAndUse(ctx, path)
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					failed++
					t.Errorf("round %d, opener %d: %v", round, i, err)
				}
			}
		}
		if failed > 0 {
			t.Errorf("%d of %d opens failed", failed, rounds*openers)
		}
	})

	t.Run("processes", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts processes")
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		const rounds, openers = 30, 4
		failed := 0
		for round := range rounds {
			path := filepath.Join(t.TempDir(), "orders.db")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmds := make([]*exec.Cmd, openers)
			stderrs := make([]*strings.Builder, openers)
			startR, startW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			for i := range cmds {
				cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
				cmd.ExtraFiles = []*os.File{startR} // the start signal: EOF once startW is closed
				// Under -race a process sleeps 1 s at exit by default.
				gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
				cmd.Env = append(os.Environ(), envOpenChild+"="+path, "GORACE="+gorace)
				stderrs[i] = &strings.Builder{}
				cmd.Stderr = stderrs[i]
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[i] = cmd
				if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
					t.Fatalf("child %d: %q %v", i, line, err)
				}
			}
			startR.Close()
			startW.Close() // every child reads EOF: go
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					failed++
					var exit *exec.ExitError
					if !errors.As(err, &exit) || exit.ExitCode() != 1 {
						t.Errorf("round %d, process %d: %v: %s", round, i, err, stderrs[i])
						continue
					}
					t.Errorf("round %d, process %d: %s", round, i, strings.TrimSpace(stderrs[i].String()))
				}
			}
			cancel()
		}
		if failed > 0 {
			t.Errorf("%d of %d opens failed", failed, rounds*openers)
		}
	})
}
