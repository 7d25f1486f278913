//go:build !linux

package testnet

import "syscall"

// orphanGuard: only Linux can tie a child's life to its parent's.
func orphanGuard(*syscall.SysProcAttr) {}
