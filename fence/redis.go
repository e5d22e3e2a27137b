package fence

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// RedisStore is a Store in Redis. Each resource is a hash
//
//	PREFIX:{RESOURCE}  value  the last accepted value
//	                   fence  its fencing token
//
// written by one Lua script that compares and writes in one step.
type RedisStore struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewRedisStore returns a RedisStore whose keys start with prefix (for
// example "fenced"; an empty prefix means none).
func NewRedisStore(rdb redis.UniversalClient, prefix string) *RedisStore {
	return &RedisStore{rdb: rdb, prefix: prefix}
}

var _ Store = (*RedisStore)(nil)

func (s *RedisStore) key(resource string) string {
	if s.prefix == "" {
		return "{" + resource + "}"
	}
	return s.prefix + ":{" + resource + "}"
}

// writeScript compares decimal tokens as strings (length, then bytes), which
// is exact for any positive int64, unlike Lua's doubles.
//
//	KEYS: the resource hash    ARGV: token, value
//	returns {1, token} when written, {0, current} when stale.
var writeScript = redis.NewScript(`
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local current = redis.call('HGET', KEYS[1], 'fence')
if current and less(ARGV[1], current) then
  return {0, current}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', ARGV[1])
return {1, ARGV[1]}
`)

// Write implements Store.
func (s *RedisStore) Write(ctx context.Context, resource string, token int64, value []byte) error {
	if err := checkArgs(resource, token); err != nil {
		return err
	}
	res, err := writeScript.Run(ctx, s.rdb, []string{s.key(resource)}, strconv.FormatInt(token, 10), value).Slice()
	if err != nil {
		return err
	}
	if len(res) != 2 {
		return errors.New("fence: unexpected reply from the write script")
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return nil
	}
	current, _ := strconv.ParseInt(res[1].(string), 10, 64)
	return &StaleError{Resource: resource, Token: token, Current: current}
}

// Read implements Store.
func (s *RedisStore) Read(ctx context.Context, resource string) ([]byte, int64, error) {
	vals, err := s.rdb.HMGet(ctx, s.key(resource), "value", "fence").Result()
	if err != nil {
		return nil, 0, err
	}
	if vals[1] == nil {
		return nil, 0, ErrNotFound
	}
	token, err := strconv.ParseInt(vals[1].(string), 10, 64)
	if err != nil {
		return nil, 0, err
	}
	value, _ := vals[0].(string)
	return []byte(value), token, nil
}
