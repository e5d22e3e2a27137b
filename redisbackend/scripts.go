package redisbackend

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Every script gets the keys it touches in KEYS (all in one hash slot) and
// takes one round trip. Field names are described in keys.go.
//
// Each hold has a lease of its own: its field t:TOKEN holds the server time
// (ms) at which it ends, and the lock key expires with the latest of them.
// Every script first drops the holds whose lease has ended (prune), so a
// lapsed re-entrant hold never keeps the lock alive.
//
// The scripts are the files of lua/, each headed by what it does and its
// KEYS, ARGV and reply. A script uses shared helpers by including their
// files (luaScript).

//go:embed lua/*.lua
var luaFiles embed.FS

// luaConstants replaces the names that stand for Go constants in the Lua
// files with their values, so that Go and Lua share one definition.
var luaConstants = strings.NewReplacer(
	"TURN_HOLDS_MAX", strconv.Itoa(turnHoldsMax),
	"TURN_KEEP_MS", strconv.Itoa(turnKeepMs),
)

// includeDirective starts a line of a Lua file that stands for the whole
// text of another file of lua/ (the rest of the line names it). It is a
// Lua comment, so a file reads as Lua with its includes in place.
const includeDirective = "--#include "

// luaScript returns the script of lua/name: its text with each include
// line replaced by the included file's text (its own includes replaced in
// turn), and the names of luaConstants by their values. It panics on a
// missing file: the scripts are part of the binary, so that is a build
// mistake, and every test run meets it.
func luaScript(name string) string {
	return luaConstants.Replace(luaInclude(name, nil))
}

// luaInclude returns the text of lua/name with its includes replaced;
// within is the chain of files being included, to refuse a cycle.
func luaInclude(name string, within []string) string {
	for _, w := range within {
		if w == name {
			panic(fmt.Sprintf("redisbackend: lua/%s includes itself (%s)", name, strings.Join(within, " > ")))
		}
	}
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("redisbackend: " + err.Error())
	}
	var b strings.Builder
	for line := range strings.Lines(string(src)) {
		if inc, ok := strings.CutPrefix(strings.TrimSpace(line), includeDirective); ok {
			text := luaInclude(strings.TrimSpace(inc), append(within, name))
			b.WriteString(text)
			if !strings.HasSuffix(text, "\n") {
				b.WriteByte('\n')
			}
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// leaveLineScript takes a process out of the lock's line: lua/leave_line.lua.
var leaveLineScript = newScript(luaScript("leave_line.lua"))

// turnHoldsMax is how many holds in a row a process whose turn it is may
// hand on to its own waiters (driver.Lines.HandOff) before it wakes
// the next process in line: each such hand-off costs one script run and
// no message, where waking another process costs a message and that
// process's attempt, so a turn of a few holds keeps a busy lock busier,
// and the others wait for at most this many holds of each process before
// theirs. Measured (bench/peers, 4 processes × 4 workers,
// hold 1 ms, think 1 ms, 3 rounds of each in turns, 2026-12-02):
// hand-offs/s and p99 wait 586–607 and 38–44 ms with 2, 612–636 and
// 31–39 ms with 4, 649–682 and 48–49 ms with 8, 656–692 and 82–89 ms with
// 16. 4 is about one hold per waiter of a process there, and keeps the
// p99 within 40 ms.
const turnHoldsMax = 4

// turnKeepMs is how long (ms) a free lock keeps its line of waiting
// processes (lua/turns.lua): the process woken takes the lock in far less,
// and the lock's lease then keeps the line. A line left when every process
// in it has gone lasts no longer.
const turnKeepMs = 5000

// acquireScript takes a free lock, re-enters a lock held by the same owner,
// or refuses and marks the lock as waited for: lua/acquire.lua.
var acquireScript = newScript(luaScript("acquire.lua"))

// releaseScript drops one hold and, when it frees the lock, wakes or hands
// the lock to the next: lua/release.lua.
var releaseScript = newScript(luaScript("release.lua"))

// renewScript renews one hold: lua/renew.lua.
var renewScript = newScript(luaScript("renew.lua"))

// renewManyScript renews a batch of holds of different locks on one node:
// lua/renew_many.lua.
var renewManyScript = newScript(luaScript("renew_many.lua"))

// ttlScript returns the remaining lease of a hold: lua/ttl.lua.
var ttlScript = newScript(luaScript("ttl.lua"))

// script is a Lua script run with EVALSHA, falling back to EVAL when the
// server's script cache has lost it (restart, failover, SCRIPT FLUSH). A
// NOSCRIPT reply means the script did not run, so the fallback is safe.
type script struct {
	src string
	id  int // index into scriptCache
	// The source and its SHA1 (hex) as command arguments, boxed once:
	// boxing a string costs an allocation on every call otherwise.
	srcArg, shaArg any
}

var scriptCount int

func newScript(src string) script {
	scriptCount++
	if scriptCount > maxScripts {
		panic("redisbackend: more scripts than maxScripts")
	}
	sum := sha1.Sum([]byte(src))
	return script{src: src, id: scriptCount - 1, srcArg: src, shaArg: hex.EncodeToString(sum[:])}
}

// cmd makes the command that runs s with EVALSHA (sha) or EVAL, for the
// call whose sendTracker is sent (nil: none).
func (s script) cmd(sha bool, keys []string, args []any, sent *sendTracker) Command {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	if sha {
		cmdArgs = append(cmdArgs, "evalsha", s.shaArg)
	} else {
		cmdArgs = append(cmdArgs, "eval", s.srcArg)
	}
	cmdArgs = append(cmdArgs, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	return Command{Args: cmdArgs, FirstKey: 3, Keys: len(keys), sent: sent}
}

// sendTracker tells whether a call's commands may have been sent. guard
// uses it when the caller's context ends first: a call abandoned before any
// of its commands was written was certainly not sent (driver.ErrNotSent),
// so the Client need not clean up after it.
type sendTracker struct {
	state atomic.Int32 // trackerIdle, trackerWritten or trackerAbandoned
}

const (
	trackerIdle int32 = iota
	trackerWritten
	trackerAbandoned
)

// markWritten records a write; it reports false when the call was already
// abandoned unsent (then nothing may be written).
func (t *sendTracker) markWritten() bool {
	return t.state.CompareAndSwap(trackerIdle, trackerWritten) || t.state.Load() == trackerWritten
}

// abandon records that the caller gave up; it reports whether nothing had
// been written, in which case nothing ever will be.
func (t *sendTracker) abandon() (unsent bool) {
	return t.state.CompareAndSwap(trackerIdle, trackerAbandoned)
}

type trackerKey struct{}

// trackedCtx is a call's context carrying its sendTracker: one allocation
// where context.WithValue and a separate tracker would take two.
type trackedCtx struct {
	context.Context
	sent sendTracker
}

// Value implements context.Context.
func (c *trackedCtx) Value(key any) any {
	if key == (trackerKey{}) {
		return &c.sent
	}
	return c.Context.Value(key)
}

// withTracker returns ctx carrying a new sendTracker for one call.
func withTracker(ctx context.Context) (context.Context, *sendTracker) {
	c := &trackedCtx{Context: ctx}
	return c, &c.sent
}

// trackerFrom returns the sendTracker of the call that ctx belongs to, or nil.
func trackerFrom(ctx context.Context) *sendTracker {
	t, _ := ctx.Value(trackerKey{}).(*sendTracker)
	return t
}

// do1 runs one command on tr.
func do1(ctx context.Context, tr Transport, c Command) Reply {
	if g, ok := tr.(*goRedis); ok {
		return g.do1(ctx, c) // no slices
	}
	return tr.Do(ctx, []Command{c})[0]
}

// scriptCache remembers, per Backend, which scripts it has sent with EVAL, so
// that the first run of each is one round trip (EVAL loads it) rather than a
// NOSCRIPT reply followed by EVAL.
type scriptCache struct {
	sent [maxScripts]atomic.Bool
}

// maxScripts bounds the scripts of the package (newScript panics beyond
// it): room for every primitive's scripts.
const maxScripts = 32

// run runs s in one round trip (two after the server's cache was lost).
func (c *scriptCache) run(ctx context.Context, tr Transport, s script, keys []string, args ...any) Reply {
	sent := trackerFrom(ctx)
	if !c.sent[s.id].Load() {
		r := do1(ctx, tr, s.cmd(false, keys, args, sent))
		if r.Err == nil {
			c.sent[s.id].Store(true)
		}
		return r
	}
	r := do1(ctx, tr, s.cmd(true, keys, args, sent))
	if isNoScript(r.Err) {
		r = do1(ctx, tr, s.cmd(false, keys, args, sent))
	}
	return r
}

// queue returns the command that runs s in a pipeline, for the call whose
// sendTracker is sent: EVALSHA, or EVAL while this Backend has not sent
// the script yet. The caller retries NOSCRIPT replies with EVAL.
func (c *scriptCache) queue(s script, keys []string, args []any, sent *sendTracker) Command {
	sha := c.sent[s.id].Load()
	c.sent[s.id].Store(true) // optimistic: a failed EVAL leaves NOSCRIPT to the fallback
	return s.cmd(sha, keys, args, sent)
}

// call is one script invocation in a pipelined batch. The calls of a batch
// may run different scripts (a renewal of locks and semaphore permits).
type call struct {
	s    script
	keys []string
	args []any
}

// runBatch runs each call's script in one pipelined round trip (per
// Cluster node), then once more with EVAL for the calls that met NOSCRIPT.
// It returns one reply per call.
func (c *scriptCache) runBatch(ctx context.Context, tr Transport, calls []call) []Reply {
	replies, _ := c.runBatchOn(ctx, tr, "", calls, nil)
	return replies
}

// runBatchOn is runBatch, on the connection of the master of key when key
// is not "" (Transport.DoOnMaster), followed there by extra (a WAIT),
// whose reply it returns too (again after the EVAL retry, if any).
func (c *scriptCache) runBatchOn(ctx context.Context, tr Transport, key string, calls []call, extra *Command) ([]Reply, Reply) {
	sent := trackerFrom(ctx)
	do := func(cmds []Command) ([]Reply, Reply) {
		if extra != nil {
			cmds = append(cmds, *extra)
		}
		var replies []Reply
		if key == "" {
			replies = tr.Do(ctx, cmds)
		} else {
			replies = tr.DoOnMaster(ctx, key, cmds)
		}
		if extra != nil {
			return replies[:len(replies)-1], replies[len(replies)-1]
		}
		return replies, Reply{}
	}
	cmds := make([]Command, len(calls), len(calls)+1)
	for i, call := range calls {
		cmds[i] = c.queue(call.s, call.keys, call.args, sent)
	}
	replies, last := do(cmds)

	var missing []int
	for i, r := range replies {
		if isNoScript(r.Err) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return replies, last
	}
	cmds = make([]Command, len(missing), len(missing)+1)
	for j, i := range missing {
		cmds[j] = calls[i].s.cmd(false, calls[i].keys, calls[i].args, sent)
	}
	again, last := do(cmds)
	for j, i := range missing {
		replies[i] = again[j]
	}
	return replies, last
}

// isNoScript reports whether err is Redis's NOSCRIPT reply. (It checks
// for nil first: HasErrorPrefix allocates even for nil, on every call.)
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
