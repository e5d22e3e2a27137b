package servertest

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/redis/go-redis/v9"
)

// RedisAdminUser and RedisAdminPassword are the credentials of the user
// RedisAdmin makes.
const (
	RedisAdminUser     = "fencelock-test-admin"
	RedisAdminPassword = "admin-password"
)

// RedisAdmin makes srv's user RedisAdminUser, allowed everything, and
// returns a go-redis client logged in as it, closed at cleanup: for tests
// of credentials and permissions, which then change the other users freely
// with SetRedisUser (the default user too: give it a password, and every
// client without one is refused with NOAUTH).
func RedisAdmin(t testing.TB, srv *redisserver.Server) *redis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boot := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer boot.Close()
	err := boot.Do(ctx, "ACL", "SETUSER", RedisAdminUser, "reset", "on", ">"+RedisAdminPassword, "~*", "&*", "+@all").Err()
	if err != nil {
		t.Fatalf("servertest: making the admin user of redis-server %s: %v", srv.Addr(), err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: RedisAdminUser, Password: RedisAdminPassword})
	t.Cleanup(func() { admin.Close() })
	return admin
}

// SetRedisUser runs ACL SETUSER name rules... through admin (RedisAdmin),
// failing the test if the server refuses: e.g. "on", ">pw", "~*", "&*",
// "+@all", "-evalsha" for a user that may do anything but run scripts. The
// rules apply at once, also to the connections already logged in as name.
func SetRedisUser(t testing.TB, admin *redis.Client, name string, rules ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := []any{"ACL", "SETUSER", name}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("servertest: ACL SETUSER %s %v: %v", name, rules, err)
	}
}
