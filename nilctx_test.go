package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/redis/go-redis/v9"
)

// A nil context is bad input: every call that takes a context and returns
// an error refuses it with an error matching ErrInvalidArgument that names
// ctx, before it touches the backend (nothing is sent, nothing is left
// locked); the calls without an error result panic with a message naming
// the nil context, as their documentation says. The table lists every
// exported function and method of the package that takes a context:
// the test fails when one is added without a row.
func TestNilContext(t *testing.T) {
	_, rdb := startRedis(t)
	hook := &announceHook{}
	rdb.AddHook(hook)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	lk, err := c.Acquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.AcquireAll(ctx, []string{"m1", "m2"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.Campaign(ctx, "e", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Campaign announces its new leader with a PUBLISH sent in the
	// background: wait for it, so that it is not counted below.
	waitUntil(t, 10*time.Second, "the new leader's announcement", func() bool { return hook.published.Load() > 0 })
	var nilCtx context.Context
	ran := false
	fn := func(context.Context, *fencelock.Lock) error { ran = true; return nil }
	fnAll := func(context.Context, *fencelock.MultiLock) error { ran = true; return nil }
	lock := func(_ *fencelock.Lock, err error) error { return err }
	errs := map[string]func() error{
		"Client.Acquire":    func() error { return lock(c.Acquire(nilCtx, "k", time.Minute)) },
		"Client.TryAcquire": func() error { return lock(c.TryAcquire(nilCtx, "k", time.Minute)) },
		"Client.Do":         func() error { return c.Do(nilCtx, "k", time.Minute, fn) },
		"Client.AcquireAll": func() error { _, err := c.AcquireAll(nilCtx, []string{"k", "l"}, time.Minute); return err },
		"Client.DoAll":      func() error { return c.DoAll(nilCtx, []string{"k", "l"}, time.Minute, fnAll) },
		"Client.Campaign":   func() error { _, err := c.Campaign(nilCtx, "k", "you", time.Minute); return err },
		"Client.Leader":     func() error { _, err := c.Leader(nilCtx, "e"); return err },
		"Client.RunJob": func() error {
			_, err := c.RunJob(nilCtx, fencelock.Job{Name: "k", LockAtMost: time.Minute}, time.Now(), fn)
			return err
		},
		"Client.Check":          func() error { return c.Check(nilCtx) },
		"Client.Inspect":        func() error { _, err := c.Inspect(nilCtx, "held"); return err },
		"Client.ReleaseToken":   func() error { _, err := c.ReleaseToken(nilCtx, "held", lk.Token()); return err },
		"Client.ForceRelease":   func() error { _, err := c.ForceRelease(nilCtx, "held", "test"); return err },
		"Semaphore.Acquire":     func() error { return lock(c.Semaphore("k", 2).Acquire(nilCtx, time.Minute)) },
		"Semaphore.TryAcquire":  func() error { return lock(c.Semaphore("k", 2).TryAcquire(nilCtx, time.Minute)) },
		"RWLock.AcquireRead":    func() error { return lock(c.RWLock("k").AcquireRead(nilCtx, time.Minute)) },
		"RWLock.TryAcquireRead": func() error { return lock(c.RWLock("k").TryAcquireRead(nilCtx, time.Minute)) },
		"RWLock.AcquireWrite":   func() error { return lock(c.RWLock("k").AcquireWrite(nilCtx, time.Minute)) },
		"RWLock.TryAcquireWrite": func() error {
			return lock(c.RWLock("k").TryAcquireWrite(nilCtx, time.Minute))
		},
		"Lock.Release":      func() error { return lk.Release(nilCtx) },
		"Lock.Refresh":      func() error { return lk.Refresh(nilCtx, time.Minute) },
		"Lock.TTL":          func() error { _, err := lk.TTL(nilCtx); return err },
		"MultiLock.Release": func() error { return m.Release(nilCtx) },
		"Leadership.Resign": func() error { return leader.Resign(nilCtx) },
		"Client.Observe": func() error {
			for _, err := range c.Observe(nilCtx, "e") {
				return err
			}
			return errors.New("Observe yielded nothing")
		},
	}
	panics := map[string]func(){
		"WithOwner":          func() { fencelock.WithOwner(nilCtx, "o") },
		"Lock.Context":       func() { lk.Context(nilCtx) },
		"MultiLock.Context":  func() { m.Context(nilCtx) },
		"Leadership.Context": func() { leader.Context(nilCtx) },
	}
	hook.reset()
	for _, name := range sortedKeys(errs) {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panicked: %v", p)
					}
				}()
				err = errs[name]()
			}()
			if !errors.Is(err, fencelock.ErrInvalidArgument) {
				t.Fatalf("%v, want ErrInvalidArgument", err)
			}
			if want := "fencelock: invalid ctx nil: must not be nil"; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("%q, want it to begin %q", err, want)
			}
		})
	}
	for _, name := range sortedKeys(panics) {
		t.Run(name, func(t *testing.T) {
			defer func() {
				p := recover()
				if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, "nil context") || !strings.Contains(msg, name[strings.LastIndex(name, ".")+1:]) {
					t.Fatalf("recovered %v, want a panic naming the function and the nil context", p)
				}
			}()
			panics[name]()
		})
	}
	if n := hook.reset(); n != 0 {
		t.Errorf("%d Redis commands sent by calls with a nil context, want none", n)
	}
	if ran {
		t.Error("a function ran under a nil context")
	}
	if !lk.Held() || !m.Held() || leader.Err() != nil {
		t.Errorf("the holds were hurt: %v %v %v", lk.Err(), m.Err(), leader.Err())
	}
	// The Client works on: nothing was left locked or broken.
	if err := c.Do(ctx, "k", time.Minute, fn); err != nil || !ran {
		t.Fatalf("Do after the nil contexts: %v (ran %v)", err, ran)
	}
	covered := append(sortedKeys(errs), sortedKeys(panics)...)
	if missing := exportedWithContext(t); !slices.Equal(sorted(covered), missing) {
		t.Fatalf("the table covers %v,\nthe package's exported calls with a context are %v", sorted(covered), missing)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return sorted(keys)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// exportedWithContext lists the package's exported functions, and the
// exported methods of its exported types, that take a context.Context, as
// "Func" or "Type.Method", sorted, from its source.
func exportedWithContext(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, decl := range file.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || !fd.Name.IsExported() || !takesContext(fd.Type) {
					continue
				}
				name := fd.Name.Name
				if fd.Recv != nil {
					recv := fd.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					id, ok := recv.(*ast.Ident)
					if !ok || !id.IsExported() {
						continue
					}
					name = id.Name + "." + name
				}
				names = append(names, name)
			}
		}
	}
	return sorted(names)
}

// takesContext reports whether a function type has a context.Context
// parameter.
func takesContext(ft *ast.FuncType) bool {
	for _, p := range ft.Params.List {
		if sel, ok := p.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Context" {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "context" {
				return true
			}
		}
	}
	return false
}

// announceHook is countingHook that also counts PUBLISH commands apart.
type announceHook struct {
	countingHook
	published atomic.Int64
}

func (h *announceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	count := h.countingHook.ProcessHook(next)
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "publish" {
			h.published.Add(1)
		}
		return count(ctx, cmd)
	}
}
