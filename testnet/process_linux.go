package testnet

import "syscall"

// orphanGuard has the kernel kill a node whose runner died without its
// cleanup (a test binary's timeout panic, a SIGKILL), so that no node
// outlives the run that started it.
func orphanGuard(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
