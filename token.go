package fencelock

import (
	"crypto/rand"
	"encoding/base64"
)

// randomToken returns 128 random bits, base64url without padding (22 bytes).
func randomToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// shortToken shortens a token for logs: enough to tell holders apart, too
// little to release someone else's lock with.
func shortToken(token string) string {
	if len(token) > 8 {
		return token[:8]
	}
	return token
}
