//go:build !unix

package store

// freeSpace is unknown here; the write fails clearly when the disk fills.
func freeSpace(string) (int64, bool) { return 0, false }
