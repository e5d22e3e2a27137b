package redisbackend

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAcquireScriptSteps measures what each step of the uncontended
// acquire costs Redis: the acquire script's body is built up a step at a
// time, each stage run on a fresh lock key (the key is deleted between
// runs, as a release does), and the server's own time per call (INFO
// commandstats, evalsha usec_per_call) is reported as "server-µs/call".
// Subtract consecutive stages for a step's cost. "full" is acquireScript
// itself; "set-px" takes the lock as a plain string with SET ... PX in
// place of HSET and PEXPIRE: what a key layout without a hash for a lone
// hold would cost. Figures for deciding where Redis's time goes, not for
// comparing machines; no time is asserted. A step costs 1 to 5 µs and the
// stages move by as much between runs on a shared machine: take medians
// of several (-count 5), e.g.
//
//	go test -run '^$' -bench AcquireScriptSteps -benchtime 10000x -count 5 ./redisbackend
func BenchmarkAcquireScriptSteps(b *testing.B) {
	srv := servertest.Redis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()

	const head = `
local lock, counter, tombstone = KEYS[1], KEYS[2], KEYS[3]
local owner, hold, ttl, counterTTL, floor = ARGV[1], 't:' .. ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
`
	steps := []struct{ name, src string }{
		{"1-time", `local t = redis.call('TIME')
local nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
`},
		{"2-exists", `if redis.call('EXISTS', lock, tombstone) ~= 0 then return 0 end
`},
		{"3-getset", `local fence = math.max(nowUs, floor + 1)
local last = tonumber(redis.call('GETSET', counter, string.format('%d', fence)) or 0)
if last >= fence then
  fence = last + 1
  redis.call('SET', counter, string.format('%d', fence))
end
`},
		{"4-hset", `local now = math.floor(nowUs / 1000)
redis.call('HSET', lock, 'owner', owner, 'fence', string.format('%d', fence), hold, string.format('%d', now + ttl))
`},
		{"5-pexpire", `redis.call('PEXPIRE', lock, ttl)
`},
	}
	stages := []struct{ name, src string }{{"0-call", head + "return 1"}}
	body := head
	for _, s := range steps {
		body += s.src
		stages = append(stages, struct{ name, src string }{s.name, body + "return 1"})
	}
	stages = append(stages,
		struct{ name, src string }{"6-reply", body + "return fence"},
		struct{ name, src string }{"full", acquireScript.src},
		struct{ name, src string }{"set-px", head + steps[0].src + steps[1].src + steps[2].src +
			"redis.call('SET', lock, owner, 'PX', ttl) return fence"})

	keys := []string{"{k}:lock", "{k}:fence", "{k}:tombstone:token"}
	args := []any{"owner-0123456789abcdefghij", "token-0123456789abcdefghij", 10000, 0, 0}
	for _, st := range stages {
		b.Run(st.name, func(b *testing.B) {
			sha, err := rdb.ScriptLoad(ctx, st.src).Result()
			if err != nil {
				b.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := rdb.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
					b.Fatal(err)
				}
				if err := rdb.Del(ctx, keys[0]).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(evalshaMicros(b, rdb), "server-µs/call")
		})
	}
}

// evalshaMicros returns the server's time per EVALSHA since the last
// CONFIG RESETSTAT, in microseconds.
func evalshaMicros(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		stats, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, field := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
	}
	b.Fatal("no evalsha in INFO commandstats")
	return 0
}
