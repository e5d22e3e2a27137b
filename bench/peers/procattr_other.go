//go:build !linux

package main

import "syscall"

// childProcAttr: elsewhere, children are stopped by this process only.
func childProcAttr() *syscall.SysProcAttr { return nil }
