//go:build !unix && !windows

package store

import "os"

// Platforms without file locks: a single pull at a time is the user's care.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) {}
