// Package examplecheck holds a test, and nothing else: that every Example
// function in the repository (its modules included) can be copied into a
// user's program as it stands. See examplecheck_test.go.
package examplecheck
