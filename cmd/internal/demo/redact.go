package demo

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// The Redis and PostgreSQL URLs the demo is given may hold a password, which
// no error or log line of the demo may show. Three defences:
//
//   - A URL is only ever shown through redactURL.
//   - Parsing a URL is explained without the parser's own message, which
//     quotes the URL (url.Parse) or pieces of it (an unescaped '/' or '@' in
//     a password makes the rest of it look like a port or a path), or
//     redacts it best effort only (pgx): the URL is parsed again with its
//     user info (and a password query parameter) masked, and that error,
//     which cannot hold the password, is reported.
//   - Once parsed, the passwords are known, and everything the demo
//     prints or reports (progress lines, forwarded worker output, failure
//     reasons, notes, Run's error) is scrubbed of them.

// secretMask stands for the user info of a URL parsed only to explain why
// the URL does not parse.
const secretMask = "xxxxx"

// redactURL hides the user info (user name and password) of a URL: all
// between "://" and the last '@', or all before the last '@' when no "://"
// comes before it. That is never less than what url.Parse (or pgx) takes as
// user info, also for malformed URLs.
func redactURL(u string) string { return maskUserinfo(u, "…") }

func maskUserinfo(u, mask string) string {
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return u
	}
	if i := strings.Index(u, "://"); i >= 0 && i < at {
		return u[:i+3] + mask + u[at:]
	}
	return mask + u[at:]
}

// maskQueryPasswords masks the values of the query parameters of u whose
// names look like a password (pgx takes "password" in a URL's query).
func maskQueryPasswords(u, mask string) string {
	q := strings.IndexByte(u, '?')
	if q < 0 {
		return u
	}
	params := strings.Split(u[q+1:], "&")
	for i, p := range params {
		name, _, _ := strings.Cut(p, "=")
		unescaped, err := url.QueryUnescape(name)
		if err != nil {
			unescaped = name
		}
		if strings.Contains(strings.ToLower(unescaped), "pass") {
			params[i] = name + "=" + mask
		}
	}
	return u[:q+1] + strings.Join(params, "&")
}

// parseRedisURL is redis.ParseURL with errors that never hold the URL's
// password.
func parseRedisURL(u string) (*redis.Options, error) {
	opt, err := redis.ParseURL(u)
	if err == nil {
		return opt, nil
	}
	masked := maskUserinfo(u, secretMask)
	if masked != u {
		if _, err = redis.ParseURL(masked); err == nil {
			return nil, fmt.Errorf("invalid redis URL %q: its user name or password does not parse (percent-encode characters such as '/', '@', '?', '#' and '%%' in it)", redactURL(u))
		}
	}
	// err is about the URL without its user info (or one that has none).
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // without the (masked) URL, which is shown redacted
	}
	return nil, fmt.Errorf("invalid redis URL %q: %v", redactURL(u), err)
}

// isPostgresURL tells a PostgreSQL URL from a keyword/value connection
// string, as pgx does.
func isPostgresURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// parsePostgresURL is pgconn.ParseConfig (which pgx's database/sql driver
// runs on the data source name) with errors that never hold its password.
func parsePostgresURL(dsn string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err == nil {
		return cfg, nil
	}
	if !isPostgresURL(dsn) {
		// A keyword/value string cannot be masked reliably (quoting).
		return nil, errors.New("invalid PostgreSQL connection string (not shown, nor why, as that could quote its password)")
	}
	masked := maskQueryPasswords(maskUserinfo(dsn, secretMask), secretMask)
	if _, err = pgconn.ParseConfig(masked); err == nil {
		return nil, fmt.Errorf("invalid PostgreSQL URL %q: its user name or password does not parse (percent-encode characters such as '/', '@', '?', '#' and '%%' in it)", redactURL(maskQueryPasswords(dsn, "…")))
	}
	// err is about the masked URL, which it may quote: no password there.
	return nil, fmt.Errorf("invalid PostgreSQL URL: %v", err)
}

// secrets are the passwords the demo was given.
type secrets []string

func (s *secrets) add(secret string) {
	if secret != "" && !slices.Contains(*s, secret) {
		*s = append(*s, secret)
	}
}

// scrub returns msg with every secret taken out: as is, URL-escaped and
// Go-quoted (as url.Error and %q show it).
func (s secrets) scrub(msg string) string {
	var forms []string
	for _, secret := range s {
		quoted := strconv.Quote(secret)
		forms = append(forms, secret, url.QueryEscape(secret), url.PathEscape(secret), url.UserPassword("", secret).String()[1:], quoted[1:len(quoted)-1])
	}
	// Longest first, so that no form is cut short by a shorter one.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range forms {
		if f != "" {
			msg = strings.ReplaceAll(msg, f, "…")
		}
	}
	return msg
}

// scrubResult scrubs what res reports.
func (s secrets) scrubResult(res *Result) {
	for i := range res.Reasons {
		res.Reasons[i] = s.scrub(res.Reasons[i])
	}
	for i := range res.Notes {
		res.Notes[i] = s.scrub(res.Notes[i])
	}
}
